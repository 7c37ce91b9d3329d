// Loads the sampling BPF program, attaches it to a cpu-clock perf event on every online CPU and
// drains the ring buffer of samples.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "sampler/runtime_bpf_config.h"
#include "sampler/sample_record_layout.h"
#include "sampler/unwind_maps.h"

// libbpf's and the skeleton's types, which stay out of this header.
struct profiler_bpf;
struct bpf_link;
struct ring_buffer;

namespace ember {

struct BpfProfilerConfig {
  int sampling_hz = 19;
  std::vector<uint32_t> pids;    // empty: every process
  size_t ring_buffer_bytes = 0;  // 0: chosen from the number of CPUs
  // User stack bytes copied per sample for DWARF unwinding (at most EMBER_MAX_SNAPSHOT_BYTES);
  // 0 copies none and leaves frame-pointer stacks only.
  uint32_t stack_snapshot_bytes = 0;
  // A process never sampled, in the initial pid namespace (the agent's own); 0: none.
  uint32_t skip_tgid = 0;
  // Rows of CFI the BPF program can hold for walking user stacks itself (docs/bpf-unwinding.md);
  // 0: no walk in BPF.
  uint32_t unwind_rows = 0;
  // The shortest time between two wake-ups of the agent by a sample of a process it has not
  // marked known (MarkProcessKnown); 0: samples never wake it for that.
  uint64_t new_process_wakeup_gap_ns = 0;
};

// Kernel-side counters, summed over CPUs.
struct BpfStats {
  uint64_t samples = 0;
  uint64_t ring_buffer_full = 0;
  uint64_t kernel_stack_errors = 0;
  uint64_t user_stack_errors = 0;
  uint64_t snapshot_errors = 0;      // stack mapping not found or copy faulted
  uint64_t snapshot_no_mapping = 0;  // of those, no stack mapping found
  uint64_t snapshot_clamped = 0;     // stacks deeper than the snapshot
  // CPython frame walks by how they ended (ember_python_status).
  uint64_t python_ok = 0;
  uint64_t python_no_thread_state = 0;
  uint64_t python_read_failed = 0;
  uint64_t python_not_code = 0;
  uint64_t python_truncated = 0;
  // In-BPF unwinding: walks that reached the first frame, walks that stopped short, samples of
  // processes without tables.
  uint64_t unwind_complete = 0;
  uint64_t unwind_stopped = 0;
  uint64_t unwind_no_tables = 0;
  // OpenTelemetry thread-context reads by their result (ember_context_status).
  uint64_t context_ok = 0;
  uint64_t context_none = 0;
  uint64_t context_invalid = 0;
  uint64_t context_read_failed = 0;
  uint64_t context_no_tls_block = 0;
  // Process-context re-publish notices written, and lost to a full ring buffer.
  uint64_t context_notices = 0;
  uint64_t context_notices_lost = 0;
  uint64_t context_notices_suppressed = 0;  // within EMBER_CONTEXT_NOTICE_GAP_NS of the last
};

// Adds `value` to the member of `stats` that counts what the BPF program's `stats` map holds at
// `index` (enum ember_stat); an index outside the enum adds to none.
void AddBpfStat(uint32_t index, uint64_t value, BpfStats& stats);

class BpfProfiler final : public RuntimeBpfConfig, public ThreadContextBpfConfig {
 public:
  // Called for every record, inside Poll. Views are valid only during the call.
  using SampleHandler = std::function<void(const SampleView&)>;
  // Called inside Poll for each process that re-published its OpenTelemetry process context.
  using ContextNoticeHandler = std::function<void(uint32_t pid)>;

  static absl::StatusOr<std::unique_ptr<BpfProfiler>> Create(const BpfProfilerConfig& config,
                                                             SampleHandler handler);
  ~BpfProfiler();
  BpfProfiler(const BpfProfiler&) = delete;
  BpfProfiler& operator=(const BpfProfiler&) = delete;

  int attached_cpus() const { return static_cast<int>(links_.size()); }
  // Hands every queued record to the handler, waits timeout_ms (less when the ring buffer is a
  // quarter full or a sample of a process not marked known arrives: records do not end the wait
  // one by one), then hands over what came meanwhile; returns how many. An interrupting signal
  // only ends the wait early.
  absl::StatusOr<int> Poll(int timeout_ms);
  BpfStats ReadStats() const;
  // Whether the maps can be read with the thread's current capabilities (a kernel before 6.5 with
  // kernel.unprivileged_bpf_disabled set wants CAP_BPF for every map access).
  bool MapsAccessible() const;
  // Walks the CPython frames of process `pid` (tgid) with `config` from its next sample on; a
  // process may have one entry, replaced by the next call.
  absl::Status SetPythonProcess(uint32_t pid, const ember_python_proc& config) override;
  // Stops walking its Python frames; no-op for a pid without an entry.
  void RemovePythonProcess(uint32_t pid) override;
  // Whether samples of process `pid` (tgid) wake the agent at once (new_process_wakeup_gap_ns)
  // and carry EMBER_SAMPLE_PROCESS_UNKNOWN: they do until it is marked known, and again after it
  // execs (the BPF side then forgets it, and its CFI rows' placement). A failed update only costs
  // a wake-up, so none is reported.
  // The mark also says whether the process has a Python entry (EMBER_KNOWN_PROC_PYTHON): the
  // program looks that up only for processes marked so, or not marked at all.
  void MarkProcessKnown(uint32_t pid);
  // Forgets the mark and the process's thread-context entry (the process exited).
  void ForgetProcess(uint32_t pid);
  // Copies the OpenTelemetry thread-context record of each sampled thread of `pid` as `config`
  // says (bpf/context.bpf.h), from its next sample on; one entry per process, replaced by the
  // next call. The known_procs mark says so (EMBER_KNOWN_PROC_CONTEXT).
  absl::Status SetThreadContextProcess(uint32_t pid, const ember_context_proc& config) override;
  void RemoveThreadContextProcess(uint32_t pid) override;
  // Where re-publish notices of process contexts go (prctl naming a mapping OTEL_CTX); none
  // before it is set.
  void set_context_notice_callback(ContextNoticeHandler callback) {
    context_notice_ = std::move(callback);
  }
  // Whether the prctl tracepoint is attached: without it notices come only from maps re-reads.
  bool context_notices_enabled() const { return prctl_link_ != nullptr; }
  // The maps of the in-BPF walk; nullptr when the walk is off (unwind_rows 0).
  UnwindMaps* unwind_maps() { return unwind_maps_.get(); }
  // The phase_ns map of a bench build (bpf/phase_times.h, CMake option EMBER_BPF_PHASE_TIMES),
  // summed over CPUs, by enum ember_phase; nullopt in any other build.
  std::optional<std::vector<uint64_t>> ReadPhaseSums() const;
  // Records the ring buffer held that did not decode (should stay 0).
  uint64_t malformed_records() const { return malformed_records_; }

 private:
  BpfProfiler() = default;
  static int OnRecord(void* ctx, void* data, size_t size);
  // The re-publish notices: one warning when they cannot be had, never a failed start.
  void AttachPrctl();

  // known_procs's value for `pid`, and its rewrite where there is one (after a Python change).
  uint8_t KnownFlags(uint32_t pid) const;
  void UpdateKnownFlags(uint32_t pid);

  struct profiler_bpf* skeleton_ = nullptr;
  std::vector<int> perf_fds_;
  std::vector<struct bpf_link*> links_;    // one per CPU's perf event
  struct bpf_link* exec_link_ = nullptr;   // sched_process_exec: forgets what an exec replaced
  struct bpf_link* prctl_link_ = nullptr;  // sys_enter_prctl: process-context notices
  struct ring_buffer* ring_ = nullptr;
  SampleHandler handler_;
  ContextNoticeHandler context_notice_;
  std::unique_ptr<UnwindMaps> unwind_maps_;
  uint64_t malformed_records_ = 0;
  absl::flat_hash_set<uint32_t> python_pids_;   // the processes with a python_procs entry
  absl::flat_hash_set<uint32_t> context_pids_;  // the processes with a context_procs entry
};

}  // namespace ember
