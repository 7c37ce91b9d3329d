// What every language runtime whose frames the agent names implements, and the set of them the
// stack builder splices from. A runtime follows the process table's events (maps changed,
// exited), hands the BPF program its per-process configuration, and puts its frames into the
// native user frames of each sample of a process it knows.
//
// CPython (cpython/) is the first. Where the next ones plug in:
// - Detection (ProcessMapsChanged): HotSpot finds libjvm.so in the mappings and reads
//   gHotSpotVMStructs from its ELF file; V8 finds the v8dbg_* constants in node's (or
//   libnode's) symbol table. What is read from a file is shared by every process mapping it
//   (keyed by FileIdentity); addresses in one process are per process.
// - BPF configuration (RuntimeBpfConfig, src/sampler/runtime_bpf_config.h): each runtime whose
//   frames the BPF program walks gets a Set/Remove pair of its own for its own per-process map,
//   beside the CPython pair, which BpfProfiler implements.
// - Naming and splicing (Splice): HotSpot replaces its interpreter and compiled-code frames, V8
//   its JIT frames, by the frames named from the VM's own data in process memory, cached by
//   address with a check that the address still holds the same object.
// - Code in no file (NameCodeOutsideFiles): what the resolver asks about an address of anonymous
//   or memfd memory, one frame for one address, before any splice, at every such frame of every
//   sample (the runtime finds a frame it named before in the resolver's cache, under the names'
//   current version, and names only what is not there). The perf-map runtime (perf_map/) answers
//   from the perf map or jitdump the JIT writes. Splice works on the whole stack of each sample and
//   may replace, drop or add frames; this hook only names one frame where no file does, and its
//   frames are cached by the resolver, keyed by the version the runtime gives (a runtime keeps
//   no frames of its own). A VM runtime whose JIT frames need the stack around them (HotSpot's
//   interpreter frames, V8's frame markers) splices them; one that can name a code address
//   alone, from a code cache it reads, may answer here too.
// - Turnover (NextGeneration), exit (ProcessExited), metrics (SyncMetrics) and the final
//   summary (LogSummary) as CPython does them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "common/address.h"
#include "common/profile.h"
#include "process/process_events.h"
#include "process/process_table.h"
#include "sampler/bpf_profiler.h"
#include "sampler/runtime_bpf_config.h"
#include "sampler/sample_record_layout.h"
#include "unwind/runtime_step.h"

namespace ember {

// The user part of one sample's stack, as the stack builder made it, for a runtime to splice
// its frames into.
struct UserFrames {
  // The whole stack, leaf first (kernel frames first); the user frames start at `begin`.
  std::vector<const Frame*>& stack;
  size_t begin = 0;
  // Per user frame: its pc, 0 for a marker ("[truncated]" ends a stack cut short). Describes
  // stack[begin...] only while no runtime has spliced: one runtime splices a given process's
  // samples (a process runs one language runtime's interpreter or JIT; a second would need the
  // pcs the first left).
  std::span<const uint64_t> pcs;
  // Per user frame, under the same condition: what the runtime that stepped it kept of it
  // (Runtime::StepCodeOutsideFiles); all zero for every other frame.
  std::span<const RuntimeFrame> runtime_frames;
};

// The resolver's cache of the frames of code in no file, as a runtime names them
// (Runtime::NameCodeOutsideFiles): a frame is filed under the runtime's version of the names
// that gave it (unique across processes and time, changed whenever the names may have) and the
// process address. The runtime looks up before it names, and adds what it named.
class CodeFrameCache {
 public:
  // The frame filed under (version, address); nullptr when none is.
  virtual const Frame* Find(uint64_t version, ProcessAddress address) = 0;
  // Files `frame` (its names bounded as every frame's are) and returns it as kept.
  virtual const Frame* Add(uint64_t version, ProcessAddress address, Frame frame) = 0;

 protected:
  ~CodeFrameCache() = default;
};

class Runtime {
 public:
  virtual ~Runtime() = default;

  // The process's maps were (re)read (it is new, or it exec'd or mapped more): detect the
  // runtime in its mappings and files, and configure or stop the BPF walk of its frames.
  virtual void ProcessMapsChanged(const Process& process) = 0;
  // The process exited (or its pid now names another): forget it, and its BPF configuration.
  virtual void ProcessExited(uint32_t pid) = 0;
  // Puts the runtime's frames of `sample` (of process `process`, known to the table) into its
  // user frames. Called once per sample of a process in the table (one virtual call per sample
  // and runtime, none per frame): return at once for a sample that holds none of this runtime's
  // frames. Per-sample code: no allocation once its scratch has grown, counts, never logs.
  virtual void Splice(const Process& process, const SampleView& sample, UserFrames frames) = 0;
  // The frame of `address` of `process`, code that lies in no file (anonymous or memfd memory,
  // or where the maps showed nothing executable), looked up in and added to `frames`; nullptr
  // when the runtime does not name it. Called for every such frame of every sample, never for a
  // file-backed frame: find the frame in `frames` first. The default names nothing. Per-frame
  // code: counts; it may read what the runtime wrote since its last read (rate-limited), and log
  // once per process and file it starts to read.
  virtual const Frame* NameCodeOutsideFiles(const Process& process, ProcessAddress address,
                                            CodeFrameCache& frames) {
    return nullptr;
  }
  // Steps a frame of `pid` whose pc lies in no file to its caller, the way the runtime lays out
  // the frames of the code it generated (unwind/runtime_step.h): false when the runtime does not
  // know the pc (the unwinder then follows the frame pointer). What it keeps in `runtime_frame`
  // comes back to its Splice in UserFrames::runtime_frames. Per-frame code, on the sampling
  // thread; the default knows no pc.
  virtual bool StepCodeOutsideFiles(uint32_t pid, const FrameRegisters& frame,
                                    bool is_return_address, const StackMemory& stack,
                                    StepResult& result, RuntimeFrame& runtime_frame) {
    return false;
  }
  // The interval was written: caches may drop what it was the last to use.
  virtual void NextGeneration() = 0;
  // Brings the runtime's metrics up to its own counts (kept as plain integers on the sampling
  // thread).
  virtual void SyncMetrics() = 0;
  // Logs what the runtime did over the run, with the BPF program's counters, at exit.
  virtual void LogSummary(const BpfStats& bpf) const = 0;
  // Estimated bytes of what it reads and holds of processes' files that a budget of its own
  // bounds (the agent's heap trim watches them shrink); 0 when none.
  virtual size_t HeldBytes() const { return 0; }
};

// The runtimes the agent names frames of, each told of every event in the order added. It
// subscribes to the process table itself (ProcessTable::Subscribe), and steps frames of code in
// no file for the unwinder (DwarfUnwinder::set_runtime_stepper) through the first runtime that
// knows the pc.
class RuntimeSet final : public ProcessEvents, public RuntimeStepper {
 public:
  void Add(std::unique_ptr<Runtime> runtime) { runtimes_.push_back(std::move(runtime)); }

  void OnMapsChanged(const Process& process) override;
  void OnExited(uint32_t pid) override;
  void Splice(const Process& process, const SampleView& sample, UserFrames frames);
  bool Step(uint32_t pid, const FrameRegisters& frame, bool is_return_address,
            const StackMemory& stack, StepResult& result, RuntimeFrame& runtime_frame) override;
  // The first runtime's, in the order added, that names it; nullptr when none does.
  const Frame* NameCodeOutsideFiles(const Process& process, ProcessAddress address,
                                    CodeFrameCache& frames);
  void NextGeneration();
  void SyncMetrics();
  void LogSummary(const BpfStats& bpf) const;
  size_t HeldBytes() const;
  size_t size() const { return runtimes_.size(); }

 private:
  std::vector<std::unique_ptr<Runtime>> runtimes_;
};

}  // namespace ember
