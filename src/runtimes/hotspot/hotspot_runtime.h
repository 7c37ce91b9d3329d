// HotSpot (Java) behind the runtime interface, with no flag set on the JVM: detects libjvm.so in
// a process's mappings and reads its VM structure tables (vm_structs.h) and code cache
// (code_cache.h); steps the frames of its interpreter and compiled code where the native unwinder
// meets them (frame_step.h, through Runtime::StepCodeOutsideFiles); and names each such frame,
// when the sample is spliced, from the JVM's own Method*s and nmethods (method_namer.h): the
// methods a compiled frame inlined become frames of their own, innermost first. A frame the walk
// stepped but could not name keeps the name the resolver gave it (a perf map's, if the JVM writes
// one, else "[anon]"): the walk wins where it names a frame.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtimes/hotspot/code_cache.h"
#include "runtimes/hotspot/frame_step.h"
#include "runtimes/hotspot/jvm_detect.h"
#include "runtimes/hotspot/method_namer.h"
#include "runtimes/hotspot/vm_structs.h"
#include "runtimes/process_memory.h"
#include "runtimes/runtime.h"
#include "status/metrics_registry.h"

namespace ember::hotspot {

// What HotSpotRuntime counts, as plain integers on the sampling thread.
struct HotSpotStats {
  // Processes by what detection (and the code cache's reading) made of them, per JvmOutcome.
  uint64_t processes[kJvmOutcomes] = {};
  uint64_t retries = 0;  // not-ready JVMs read again
  // Frames in the code cache the native unwinder handed over, by how the step ended.
  uint64_t steps[kStepOutcomeCount] = {};
  // Frames named (cache misses), by result.
  uint64_t named = 0;
  uint64_t stale = 0;        // the method or nmethod was no longer the one sampled
  uint64_t read_failed = 0;  // its memory could not be read (freed, or the process exited)
  uint64_t implausible = 0;  // read, but not what it should hold
  uint64_t stubs_named = 0;  // stubs and adapters named from their blob's name
  uint64_t not_cached = 0;   // not named: the cache of named frames was full
};

class HotSpotRuntime : public Runtime {
 public:
  // How the runtime reads a process's memory; tests stand in. The default reads it with
  // process_vm_readv.
  using MemoryFor = std::function<std::unique_ptr<MemoryReader>(uint32_t pid)>;
  // A clock in nanoseconds (steady), for when a JVM that was not ready is read again.
  using Clock = std::function<int64_t()>;

  // Registers ember_hotspot_processes_total, ember_hotspot_frames_stepped_total and
  // ember_hotspot_frames_named_total in `metrics`. `proc_root` is where /proc is ("/proc").
  explicit HotSpotRuntime(MetricsRegistry& metrics, MemoryFor memory_for = nullptr,
                          Clock clock = nullptr, std::string proc_root = "/proc");
  ~HotSpotRuntime() override;

  void ProcessMapsChanged(const Process& process) override;
  void ProcessExited(uint32_t pid) override;
  bool StepCodeOutsideFiles(uint32_t pid, const FrameRegisters& frame, bool is_return_address,
                            const StackMemory& stack, StepResult& result,
                            RuntimeFrame& runtime_frame) override;
  void Splice(const Process& process, const SampleView& sample, UserFrames frames) override;
  void NextGeneration() override;
  void SyncMetrics() override;
  void LogSummary(const BpfStats& bpf) const override;
  // The named frames and the namers' caches, as last estimated (at the last NextGeneration).
  size_t HeldBytes() const override { return held_bytes_; }

  const HotSpotStats& stats() const { return stats_; }
  // The process's outcome; nullopt when it is not a JVM (or not known).
  std::optional<JvmOutcome> OutcomeOf(uint32_t pid) const;
  size_t cached_frames() const { return frames_.size(); }

  // A JVM that was not ready (its tables or code cache not yet initialised) is read again at most
  // this often, when one of its frames is sampled, and at every generation.
  static constexpr int64_t kRetryIntervalNs = 200'000'000;
  // Named frames kept at most; past it a frame keeps the resolver's name (counted).
  static constexpr size_t kMaxCachedFrames = size_t{1} << 16;

 private:
  struct Jvm;
  struct FrameKey {
    uint32_t pid = 0;
    uint32_t kind = 0;
    uint32_t check = 0;
    uint64_t object = 0;
    uint64_t position = 0;
    bool operator==(const FrameKey&) const = default;
  };
  struct FrameKeyHash {
    size_t operator()(const FrameKey& key) const;
  };
  struct NamedFrames {
    std::vector<std::unique_ptr<Frame>> frames;  // innermost first; empty: could not be named
    uint64_t generation = 0;
    size_t bytes = 0;  // an estimate of what the entry holds
  };

  // Reads what a JVM needs that may not be there yet (the layout, then the code cache): true
  // once ready. Counts and logs the outcome when it is decided.
  bool Prepare(Jvm& jvm);
  // Reads the code cache's statics (the layout known); on kReady, makes the JVM ready.
  CodeCacheStatus ReadCodeCache(Jvm& jvm);
  // Records the JVM's outcome: counted once, and logged.
  void Decide(Jvm& jvm, JvmOutcome outcome, const std::string& reason);
  const NamedFrames& Name(Jvm& jvm, const RuntimeFrame& frame);
  void NameStub(Jvm& jvm, const RuntimeFrame& frame, NamedFrames& named);

  MemoryFor memory_for_;
  Clock clock_;
  std::string proc_root_;
  LibjvmFiles files_;
  LayoutCache layouts_;
  std::unordered_map<uint32_t, std::unique_ptr<Jvm>> jvms_;
  // Frames named, by process, kind, leaf or not, and what the step kept; kept two generations after
  // their last use (the interval that holds them has been written by then), also after the process
  // exited.
  std::unordered_map<FrameKey, NamedFrames, FrameKeyHash> frames_;
  uint64_t generation_ = 0;
  size_t frame_bytes_ = 0;  // NamedFrames::bytes of frames_
  HotSpotStats stats_;
  // Per-sample scratch, reused.
  std::vector<const Frame*> user_frames_;
  std::vector<JavaFrame> java_frames_;
  // Mirrors of stats_ in /metrics.
  std::vector<CounterMirror> process_metrics_;
  std::vector<CounterMirror> step_metrics_;
  CounterMirror named_metric_;
  CounterMirror stale_metric_;
  CounterMirror read_failed_metric_;
  CounterMirror implausible_metric_;
  CounterMirror stubs_metric_;
  // ember_hotspot_cache_bytes: HeldBytes, estimated once an interval (it walks every entry).
  size_t held_bytes_ = 0;
  Gauge* cache_bytes_metric_ = nullptr;
  CounterMirror not_cached_metric_;
};

}  // namespace ember::hotspot
