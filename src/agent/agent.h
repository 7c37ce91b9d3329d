// The profiling loop: sample, symbolize, aggregate, and write each interval to the output folder.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/cache_metrics.h"
#include "agent/interval_clock.h"
#include "agent/memory_upkeep.h"
#include "agent/options.h"
#include "context/trace_contexts.h"
#include "debuginfod/debug_file_fetcher.h"
#include "k8s/cgroup_resolver.h"
#include "k8s/pod_index.h"
#include "k8s/pod_watcher.h"
#include "otlp/profile_exporter.h"
#include "otlp/profiles_builder.h"
#include "output/local_output.h"
#include "process/proc_read_metrics.h"
#include "process/process_events.h"
#include "process/process_table.h"
#include "runtimes/runtime.h"
#include "sampler/bpf_profiler.h"
#include "sampler/bpf_unwind_tables.h"
#include "sampler/known_processes.h"
#include "stacks/aggregator.h"
#include "stacks/frame_resolver.h"
#include "stacks/kernel_symbols_source.h"
#include "stacks/late_debug_files.h"
#include "stacks/stack_builder.h"
#include "stacks/symbolization_metrics.h"
#include "status/metrics_registry.h"
#include "status/status_server.h"
#include "symbolize/elf_module.h"
#include "unwind/dwarf_unwinder.h"

namespace ember {

class Agent {
 public:
  // started_at: when the program started, for the start-up time it reports.
  static absl::StatusOr<std::unique_ptr<Agent>> Create(
      const Options& options, std::chrono::steady_clock::time_point started_at);

  // Profiles until --duration ends or `stop` turns true, then writes the last interval.
  absl::Status Run(const std::atomic<bool>& stop);

  // Stops the network I/O on a thread without capabilities (RunWithoutCapabilities).
  ~Agent();

 private:
  explicit Agent(const Options& options);
  void OnSample(const SampleView& sample);
  // Writes the interval's pprof file and the flame graph; a failed write is logged and counted.
  // `now` (wall clock) names the file; `last`: the final interval, at exit.
  void ExportInterval(IntervalSpan span, absl::Time now, bool last);
  // Lists what turns over at the end of each interval, once it is written (interval_turnover_).
  void WireIntervalTurnover();
  // Reads the queued samples, waiting up to timeout_ms for more; counts the poll
  // (KnownProcesses::OnPoll).
  absl::Status PollSamples(int timeout_ms);
  // Brings the failure counters of /metrics up to the process table's, the frame resolver's, the
  // cgroup resolver's and the runtimes' own counts (kept as plain integers on the sampling
  // thread).
  void SyncFailureMetrics();
  // The self-metrics, and the status endpoint at --metrics-address serving them with /healthz
  // and /readyz.
  absl::Status SetUpStatusEndpoint();
  // Stopping the network I/O may start a thread too (gRPC's clean-up, a cancelled transfer's):
  // it runs on a thread without capabilities (RunWithoutCapabilities), like the start.
  void OffTheSamplingThread(const std::function<void()>& work);
  // The BPF program's counters for /metrics, read on the status endpoint's thread: from the maps,
  // or as the loop last read them when that thread may not (bpf_stats_from_loop_).
  BpfStats BpfStatsForMetrics();
  ProbeResult Liveness() const;
  ProbeResult Readiness() const;

  Options options_;
  std::chrono::steady_clock::time_point started_at_;
  // Self-metrics, updated by the sampling thread and read by the status endpoint's. Before every
  // part that registers its counters here, so that it outlives them.
  MetricsRegistry metrics_;
  // Made in the constructor, never null. Before frames_, which holds its symbols.
  std::unique_ptr<KernelSymbolsSource> kernel_symbols_;
  ProcessTable processes_;
  CgroupResolver cgroups_;
  std::unique_ptr<PodIndex> pods_;  // the node's pods when watching the Kubernetes API, else null
  std::unique_ptr<PodWatcher> pod_watcher_;
  // Null without debuginfod servers. Before modules_, which asks it, so that it outlives them.
  std::unique_ptr<DebugFileFetcher> debug_files_;
  ModuleCache modules_;
  FrameResolver frames_;
  DwarfUnwinder unwinder_;
  MemoryUpkeep memory_;  // the file pages and free heap of the caches above
  // With debug_files_; after the caches it names frames again in, so that it goes before them.
  std::unique_ptr<LateDebugFiles> late_debug_files_;
  Aggregator aggregator_;
  // The pprof files and flamegraph.html; made in the constructor, never null (its counters are in
  // /metrics whether or not write_local_).
  std::unique_ptr<LocalOutput> local_output_;
  std::unique_ptr<BpfProfiler> profiler_;
  std::unique_ptr<ProfileExporter> exporter_;  // null without an OTLP endpoint
  ResourceContext resources_;                  // what OTLP resources say beyond the samples
  bool write_local_ = true;                    // pprof files and the flame graph
  // The caches' turnover at the end of an interval, in order: generations end, exited processes
  // are forgotten (WireIntervalTurnover).
  std::vector<std::function<void()>> interval_turnover_;

  ClockReading interval_start_;  // when the first interval began
  bool seen_first_sample_ = false;
  uint64_t ring_buffer_full_reported_ = 0;
  // The CFI rows of the BPF stack walk; null when --bpf-unwind-rows is 0. Before stacks_ and
  // bpf_unwind_feed_, which hold it.
  std::unique_ptr<BpfUnwindTables> bpf_unwind_;
  // Turns each sample into frames; holds the language runtimes. Made in the constructor, never
  // null.
  std::unique_ptr<StackBuilder> stacks_;
  // The process part of each sample: the table read, and the BPF side told which processes the
  // agent knows. Made with profiler_, which it tells.
  std::unique_ptr<KnownProcesses> known_processes_;
  // The process table's other subscribers (besides the runtimes, in stacks_): the BPF walk's
  // tables, the unwinder.
  std::unique_ptr<BpfUnwindTablesFeed> bpf_unwind_feed_;
  std::unique_ptr<ProcessEventCallbacks> unwinder_events_;
  // What each process published about itself through OpenTelemetry (its resource, the span each
  // sampled thread served); a subscriber of the process table. Made in Create, never null after.
  std::unique_ptr<context::TraceContexts> trace_contexts_;

  // The agent's own counters in metrics_ (registered in the constructor, never null).
  Counter* samples_metric_ = nullptr;
  Counter* samples_lost_metric_ = nullptr;
  Counter* contexts_folded_metric_ = nullptr;
  uint64_t contexts_folded_reported_ = 0;  // aggregator_.contexts_folded() at the last sync
  DoubleCounter* table_build_seconds_metric_ = nullptr;
  std::unique_ptr<CacheMetrics> cache_metrics_;  // published at the end of each interval
  // Frames left unnamed by reason, and /proc reads that failed by file (SyncFailureMetrics).
  std::unique_ptr<SymbolizationFailureMetrics> symbolization_failure_metrics_;
  std::unique_ptr<ProcReadFailureMetrics> proc_read_failure_metrics_;
  // When the profiling loop last went round (steady clock, ns): liveness and readiness.
  std::atomic<int64_t> loop_alive_ns_{0};
  // Whether the kernel refuses a thread without capabilities (the status endpoint's) to read the
  // BPF maps; the loop then reads the counters into bpf_stats_ each time round.
  bool bpf_stats_from_loop_ = false;
  std::mutex bpf_stats_mu_;
  BpfStats bpf_stats_;                           // guarded by bpf_stats_mu_
  std::unique_ptr<StatusServer> status_server_;  // after everything its handlers read
};

}  // namespace ember
