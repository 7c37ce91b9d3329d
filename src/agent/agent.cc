// The profiling loop of ember-agent.
#include "agent/agent.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "agent/privileges.h"
#include "agent/seccomp_filter.h"
#include "common/log_safe.h"
#include "common/status_macros.h"
#include "context/tls_location.h"
#include "debuginfod/debuginfod_setup.h"
#include "debuginfod/fetcher_metrics.h"
#include "k8s/kubernetes_metrics.h"
#include "k8s/pod_watch_setup.h"
#include "otlp/exporter_metrics.h"
#include "otlp/resource_attributes.h"
#include "process/proc_read_metrics.h"
#include "process/process_ids.h"
#include "process/process_metadata.h"
#include "runtimes/cpython/cpython_runtime.h"
#include "runtimes/hotspot/hotspot_runtime.h"
#include "runtimes/perf_map/perf_map_runtime.h"
#include "sampler/sampler_metrics.h"
#include "spdlog/spdlog.h"
#include "stacks/symbolization_metrics.h"
#include "status/common_metrics.h"
#include "status/heap_metrics.h"
#include "status/process_metrics.h"
#include "symbolize/symbolize_metrics.h"

namespace ember {
namespace {

// The loop's longest wait for samples. Records do not end the wait one by one: the ring buffer
// wakes the agent only when a quarter full, or for a sample of a process the agent has not read
// yet (at most once per kNewProcessWakeupGap), so that it reads a short-lived process's maps
// while it runs. Each wait is a wake-up, and under load a wake-up costs far more than a sample
// (the context switch back in; on a host with shadow paging, 0.1 to 1.2 ms, growing with the
// agent's resident memory): every 5 s, and at most 10 times a second more for new processes
// (docs/benchmarks.md has what shorter waits cost). A process that exec'd is new again
// to the BPF side, whether its stack is walked there or copied, so the wait does not keep stale
// maps or unwind entries in use (docs/benchmarks.md). What is queued when an
// interval ends is read before it is written.
constexpr int kMaxPollMs = 5000;
constexpr std::chrono::milliseconds kNewProcessWakeupGap{100};
// At exit, how long intervals still queued for the OTLP endpoint may take to leave.
constexpr absl::Duration kExporterDrainTime = absl::Seconds(5);

// A variable of the environment; nullopt when it is not set.
std::optional<std::string> FromEnvironment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
}

// This host's name; empty when it cannot be read.
std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "";
  return host;
}

int64_t MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

// The symbol cache budget: ELF modules (symbol tables, DWARF indexes) take three quarters, the
// symbolized frames one quarter.
size_t ModuleBudget(const Options& options) { return options.max_symbol_cache_bytes / 4 * 3; }
size_t FrameBudget(const Options& options) {
  return options.max_symbol_cache_bytes - ModuleBudget(options);
}

DwarfUnwinder::Limits UnwinderLimits(const Options& options) {
  return {.max_processes = options.max_processes,
          .max_row_cache_bytes = options.max_cfi_cache_bytes};
}

ProcessTableLimits ProcessLimits(const Options& options) {
  ProcessTableLimits limits{.max_processes = options.max_processes};
  limits.max_mappings_per_process = options.max_mappings_per_process;
  limits.max_mapping_bytes = options.max_mapping_bytes;
  return limits;
}

PerfMapRuntimeLimits JitNameLimits(const Options& options) {
  PerfMapRuntimeLimits limits{.max_total_bytes = options.max_perf_map_total_bytes};
  // The flag bounds the estimate; names alone and the entry count then cannot exceed it either.
  limits.per_process.max_bytes = options.max_perf_map_bytes;
  limits.per_process.max_name_bytes = options.max_perf_map_bytes;
  limits.per_process.max_entries = options.max_perf_map_bytes / kPerfMapEntryBytes;
  return limits;
}

}  // namespace

Agent::Agent(const Options& options)
    : options_(options),
      processes_("/proc", std::chrono::milliseconds(500), ProcessLimits(options)),
      cgroups_(CgroupResolverOptionsForHost()),
      modules_(/*max_modules=*/1024, ElfModuleOptions{}, ModuleBudget(options)),
      frames_(&processes_, &modules_, nullptr, FrameBudget(options)),
      unwinder_(UnwinderLimits(options)),
      memory_(modules_, frames_, unwinder_) {
  WireIntervalTurnover();
  // Registration fails only on a programming error (a bad or duplicate name).
  auto counter = [this](absl::string_view name, absl::string_view help, MetricLabels labels = {}) {
    return metrics_.AddCounter(name, help, std::move(labels)).value();
  };
  samples_metric_ = counter("ember_samples_total", "Stack samples received from the kernel.");
  samples_lost_metric_ = counter("ember_samples_lost_total",
                                 "Samples the kernel dropped because the ring buffer was full.");
  contexts_folded_metric_ =
      counter("ember_trace_context_samples_folded_total",
              "Samples counted without their trace context: their interval already held "
              "Aggregator::kMaxContextKeys stacks with one.");
  stacks_ = std::make_unique<StackBuilder>(&frames_, &processes_, &unwinder_, metrics_);
  local_output_ = std::make_unique<LocalOutput>(options.output_dir, metrics_);
  kernel_symbols_ = std::make_unique<KernelSymbolsSource>(metrics_);
  table_build_seconds_metric_ =
      metrics_
          .AddDoubleCounter("ember_bpf_unwind_table_build_seconds_total",
                            "Time spent building the CFI row tables of files for the BPF stack "
                            "walk and writing them to its maps: once per file while it is in use, "
                            "at most 5% of the agent's time.")
          .value();
  cache_metrics_ = std::make_unique<CacheMetrics>(metrics_);
  symbolization_failure_metrics_ = std::make_unique<SymbolizationFailureMetrics>(metrics_);
  proc_read_failure_metrics_ = std::make_unique<ProcReadFailureMetrics>(metrics_);
}

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(
    const Options& options, std::chrono::steady_clock::time_point started_at) {
  std::unique_ptr<Agent> agent(new Agent(options));
  agent->started_at_ = started_at;

  // The exporter's settings are flags too: their errors come before anything is loaded.
  auto exporter_config = ResolveExporterConfig(options.otlp, FromEnvironment);
  if (!exporter_config.ok()) return exporter_config.status();
  agent->write_local_ = !exporter_config->has_value() || options.output_dir_given;
  if (agent->write_local_) RETURN_IF_ERROR(agent->local_output_->CreateDir());
  // Before any thread exists: libdebuginfod reads its settings from the environment. Its workers
  // start later, without capabilities.
  ASSIGN_OR_RETURN(agent->debug_files_,
                   SetUpDebuginfod({.urls = options.debuginfod_urls,
                                    .cache_dir = options.debuginfod_cache_dir,
                                    .cache_bytes = options.debuginfod_cache_bytes,
                                    .timeout = options.debuginfod_timeout,
                                    .max_fetches = options.debuginfod_max_fetches}));
  if (agent->debug_files_ != nullptr) {
    agent->late_debug_files_ = std::make_unique<LateDebugFiles>(
        *agent->debug_files_, agent->modules_, agent->frames_, agent->metrics_);
  }
  // Pod metadata: this node's pods are watched when --kubernetes says so (or, by default, when
  // the agent runs in a pod).
  ASSIGN_OR_RETURN(PodWatch pod_watch, SetUpPodWatch(options.kubernetes, options.kube,
                                                     options.max_pods, FromEnvironment));
  agent->pods_ = std::move(pod_watch.pods);
  agent->pod_watcher_ = std::move(pod_watch.watcher);

  ASSIGN_OR_RETURN(std::vector<uint32_t> pids, ThreadGroupsOf(options.pids, "--pid"));
  RETURN_IF_ERROR(CheckCapabilities());
  static_assert(kMaxStackSnapshotBytes == EMBER_MAX_SNAPSHOT_BYTES);
  BpfProfilerConfig config{.sampling_hz = options.sampling_hz,
                           .pids = pids,
                           .stack_snapshot_bytes = options.stack_snapshot_bytes,
                           .skip_tgid = options.profile_self ? 0 : OwnTgidInInitialPidNamespace(),
                           .unwind_rows = options.bpf_unwind_rows,
                           .new_process_wakeup_gap_ns = static_cast<uint64_t>(
                               std::chrono::nanoseconds(kNewProcessWakeupGap).count())};
  Agent* self = agent.get();
  ASSIGN_OR_RETURN(agent->profiler_,
                   BpfProfiler::Create(config, [self](const SampleView& s) { self->OnSample(s); }));
  // The language runtimes whose frames are named (src/runtimes/): one line each. They configure
  // the BPF program's walks of their frames, so they come with it.
  // The perf maps' first: each frame in code outside files asks the runtimes in this order.
  agent->stacks_->runtimes().Add(
      std::make_unique<PerfMapRuntime>(agent->processes_, agent->metrics_, JitNameLimits(options)));
  const auto bpf_stats = [self] { return self->BpfStatsForMetrics(); };
  agent->stacks_->runtimes().Add(std::make_unique<python::CPythonRuntime>(
      *agent->profiler_, agent->metrics_, /*memory=*/nullptr, bpf_stats));
  // HotSpot steps its frames where the unwinder meets its code, and names them in the splice.
  agent->stacks_->runtimes().Add(std::make_unique<hotspot::HotSpotRuntime>(agent->metrics_));
  if (UnwindMaps* maps = agent->profiler_->unwind_maps()) {
    agent->bpf_unwind_ = std::make_unique<BpfUnwindTables>(*maps, options.bpf_unwind_rows);
    agent->stacks_->set_bpf_unwind_tables(agent->bpf_unwind_.get());
    agent->bpf_unwind_feed_ =
        std::make_unique<BpfUnwindTablesFeed>(agent->processes_, *agent->bpf_unwind_);
    agent->processes_.Subscribe(agent->bpf_unwind_feed_.get());
  }
  agent->processes_.Subscribe(&agent->stacks_->runtimes());
  agent->unwinder_events_ = std::make_unique<ProcessEventCallbacks>(
      nullptr, [self](uint32_t pid) { self->unwinder_.ForgetProcess(pid); });
  agent->processes_.Subscribe(agent->unwinder_events_.get());
  // The OpenTelemetry process and thread contexts (docs/trace-context.md): read at a process's
  // first sight, when it re-publishes (the BPF side's notice of its naming prctl) and after its
  // maps change; the BPF program copies the thread-context records of the processes it is told.
  agent->trace_contexts_ = std::make_unique<context::TraceContexts>(
      agent->profiler_.get(), agent->metrics_,
      context::TraceContextsHooks{
          .find_process = [self](uint32_t pid) { return self->processes_.Find(pid); },
          .resolve_tls = [](const Process& process,
                            MemoryReader& memory) -> absl::StatusOr<ember_context_proc> {
            ASSIGN_OR_RETURN(context::TlsLocation location,
                             context::FindThreadContextTls(process, memory));
            return location.config;
          }});
  agent->processes_.Subscribe(agent->trace_contexts_.get());
  agent->profiler_->set_context_notice_callback(
      [self](uint32_t pid) { self->trace_contexts_->Notice(pid); });
  // Subscribed last: the BPF side forgets a process once the rest has.
  agent->known_processes_ = std::make_unique<KnownProcesses>(
      agent->processes_, [self](uint32_t pid) { self->profiler_->MarkProcessKnown(pid); },
      [self](uint32_t pid) { self->profiler_->ForgetProcess(pid); });
  spdlog::info("attached to {} CPUs in {} ms (sampling at {} Hz{})",
               agent->profiler_->attached_cpus(), MillisecondsSince(started_at),
               options.sampling_hz,
               options.pids.empty() ? ", every process"
                                    : absl::StrCat(", ", options.pids.size(), " process(es)"));

  // Samples queue in the ring buffer meanwhile, so loading symbols does not lose any. Read after
  // the BPF load rather than beside it: the first sample is taken as early either way, and the
  // two loads' memory (libbpf holds the kernel's 5 MB of BTF) does not add up in the peak RSS.
  if (absl::Status symbols =
          agent->kernel_symbols_->Load(absl::ToChronoNanoseconds(options.kernel_symbols_recheck));
      symbols.ok()) {
    agent->frames_.ReplaceKernelSymbols(agent->kernel_symbols_->symbols());
  } else {
    spdlog::warn("kernel frames will be unnamed: {}", std::string(symbols.message()));
  }
  // Capabilities belong to each thread: the process keeps only what reading other processes
  // needs while it has one thread, and the seccomp filter every later thread inherits goes on
  // then too. The network I/O is set up on a thread without any capability, so none of the
  // threads the exporter, the pod watcher and the status endpoint start (nor gRPC's, curl's and
  // libmicrohttpd's) holds one: only this thread, the sampling loop, does.
  BpfProfiler* profiler = agent->profiler_.get();
  RETURN_IF_ERROR(DropCapabilities([profiler] { return profiler->MapsAccessible(); }));
  RETURN_IF_ERROR(InstallSeccompFilter());
  // The status endpoint's threads read the BPF counters for /metrics; where the kernel wants a
  // capability for map reads (before 6.5), the loop reads them for those threads.
  bool maps_readable = false;
  RETURN_IF_ERROR(RunWithoutCapabilities([&] { maps_readable = profiler->MapsAccessible(); }));
  agent->bpf_stats_from_loop_ = !maps_readable;
  absl::Status network;
  RETURN_IF_ERROR(RunWithoutCapabilities([&] {
    if (!exporter_config->has_value()) return;
    auto exporter = ProfileExporter::Create(
        **exporter_config, ExporterLimits{.max_queue_bytes = options.otlp_max_queue_bytes});
    if (!exporter.ok()) {
      network = exporter.status();
      return;
    }
    agent->exporter_ = std::move(exporter).value();
  }));
  RETURN_IF_ERROR(network);
  if (agent->exporter_ != nullptr) {
    agent->resources_ = MakeResourceContext(FromEnvironment, HostName(), EMBER_VERSION);
    spdlog::info("exporting OTLP profiles: {}", DescribeExporterConfig(**exporter_config));
  }
  agent->interval_start_ = ClockReading::Now();
  RETURN_IF_ERROR(RunWithoutCapabilities([&] {
    // libdebuginfod's curl runs on these threads only: they hold no capability either.
    if (agent->debug_files_ != nullptr) agent->debug_files_->Start();
    if (agent->pod_watcher_ != nullptr) agent->pod_watcher_->Start();
    network = agent->SetUpStatusEndpoint();
  }));
  RETURN_IF_ERROR(network);
  return agent;
}

Agent::~Agent() {
  OffTheSamplingThread([this] {
    if (debug_files_ != nullptr) debug_files_->Stop();
    status_server_.reset();
    pod_watcher_.reset();
    exporter_.reset();
  });
}

BpfStats Agent::BpfStatsForMetrics() {
  if (!bpf_stats_from_loop_) return profiler_->ReadStats();
  std::lock_guard lock(bpf_stats_mu_);
  return bpf_stats_;
}

void Agent::OffTheSamplingThread(const std::function<void()>& work) {
  // Only when even emptying a thread's capabilities failed, which the start-up already did once.
  if (!RunWithoutCapabilities(work).ok()) work();
}

absl::Status Agent::SetUpStatusEndpoint() {
  RETURN_IF_ERROR(AddProcessMetrics(metrics_));
  RETURN_IF_ERROR(AddHeapMetrics(metrics_));
  RETURN_IF_ERROR(RegisterFileOpenMetrics(metrics_));
  // The BPF program's counters, read when scraped.
  RETURN_IF_ERROR(RegisterBpfSampleMetrics(
      metrics_, [this] { return BpfStatsForMetrics(); },
      [this] { return profiler_->context_notices_enabled(); }));
  RETURN_IF_ERROR(RegisterNameMetrics(metrics_));
  RETURN_IF_ERROR(RegisterDemangleMetrics(metrics_));
  if (debug_files_ != nullptr) RETURN_IF_ERROR(RegisterDebuginfodMetrics(metrics_, *debug_files_));
  if (pods_ != nullptr && pod_watcher_ != nullptr) {
    RETURN_IF_ERROR(RegisterKubernetesMetrics(metrics_, *pods_, *pod_watcher_));
  }
  if (exporter_ != nullptr) RETURN_IF_ERROR(RegisterExporterMetrics(metrics_, *exporter_));
  loop_alive_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count());
  if (options_.metrics_address.empty()) return absl::OkStatus();
  StatusHandlers handlers{.metrics = [this] { return metrics_.Render(); },
                          .healthz = [this] { return Liveness(); },
                          .readyz = [this] { return Readiness(); }};
  ASSIGN_OR_RETURN(status_server_, StatusServer::Start(options_.metrics_address, handlers));
  spdlog::info("status endpoint: http://{}/metrics, /healthz, /readyz",
               status_server_->address().ToString());
  return absl::OkStatus();
}

namespace {
// The loop goes round at least every 100 ms, but writing an interval may take a while (the first
// symbolization of big binaries): liveness allows for that, readiness is stricter.
constexpr std::chrono::seconds kLivenessStall{60};
constexpr std::chrono::seconds kReadinessStall{15};

// Not ok when the loop last went round more than `limit` ago.
ProbeResult LoopProbe(const std::atomic<int64_t>& loop_alive_ns, std::chrono::seconds limit) {
  auto stalled = std::chrono::steady_clock::now().time_since_epoch() -
                 std::chrono::nanoseconds(loop_alive_ns.load());
  if (stalled <= limit) return {true, ""};
  return {false,
          absl::StrCat("the profiling loop has not run for ",
                       std::chrono::duration_cast<std::chrono::seconds>(stalled).count(), " s")};
}
}  // namespace

ProbeResult Agent::Liveness() const { return LoopProbe(loop_alive_ns_, kLivenessStall); }

ProbeResult Agent::Readiness() const {
  if (ProbeResult loop = LoopProbe(loop_alive_ns_, kReadinessStall); !loop.ok) return loop;
  // Samples of pods would go out without their pod's names until the first list.
  if (pod_watcher_ != nullptr && !pod_watcher_->synced()) {
    PodWatcherStats stats = pod_watcher_->stats();
    return {false, stats.last_error.empty()
                       ? std::string("the pods of this node have not been listed yet")
                       : absl::StrCat("the pods of this node have not been listed yet: ",
                                      stats.last_error)};
  }
  return {true, ""};
}

void Agent::OnSample(const SampleView& sample) {
  if (!seen_first_sample_) {
    seen_first_sample_ = true;
    // When it was taken (its BPF timestamp is CLOCK_MONOTONIC, steady_clock's clock here) and when
    // read: samples wait in the ring buffer while the agent loads the kernel's symbols, and from
    // the moment one is taken none is lost.
    const auto taken = std::chrono::steady_clock::time_point(
        std::chrono::nanoseconds(static_cast<int64_t>(sample.header->timestamp_ns)));
    spdlog::info("first sample {} ms after start (taken; read at {} ms)",
                 std::chrono::duration_cast<std::chrono::milliseconds>(taken - started_at_).count(),
                 MillisecondsSince(started_at_));
  }
  samples_metric_->Increment();
  const ember_sample& header = *sample.header;
  absl::string_view thread(header.comm, strnlen(header.comm, sizeof(header.comm)));

  Process* process = known_processes_->OnSample(sample);
  // The container is looked up when a process is first seen in a cgroup, not per sample.
  if (process != nullptr && process->cgroup_id != header.cgroup_id) {
    process->cgroup_id = header.cgroup_id;
    process->container = cgroups_.ResolveProcess(header.cgroup_id, header.pid);
  }
  const std::vector<const Frame*>& stack = stacks_->Build(sample, process);

  absl::string_view process_name = process != nullptr ? absl::string_view(process->name) : thread;
  aggregator_.Add(header.pid, process_name, thread, stack,
                  trace_contexts_->ContextOf(process, sample));
  memory_.AfterSample();
}

void Agent::SyncFailureMetrics() {
  symbolization_failure_metrics_->Sync(frames_.failures());
  proc_read_failure_metrics_->Sync(processes_.read_failures(), cgroups_.stats().read_failures);
  stacks_->runtimes().SyncMetrics();
  const uint64_t folded = aggregator_.contexts_folded();
  if (folded > contexts_folded_reported_) {
    contexts_folded_metric_->Increment(folded - contexts_folded_reported_);
    contexts_folded_reported_ = folded;
  }
}

void Agent::ExportInterval(IntervalSpan span, absl::Time now, bool last) {
  // Frames whose debug file arrived during the interval go out named.
  if (late_debug_files_ != nullptr) late_debug_files_->Collect(/*ask_again=*/true);
  const int64_t period_ns = 1'000'000'000LL / options_.sampling_hz;
  IntervalProfile profile = aggregator_.TakeInterval(
      absl::ToUnixNanos(span.start), absl::ToInt64Nanoseconds(span.length), period_ns);
  // Before exited processes are dropped, and before any writer: each reads the same metadata.
  AttachProcessMetadata(processes_, pods_.get(), &profile);
  for (auto& [pid, metadata] : profile.process_metadata) {
    const std::vector<ProcessLabel>* published = trace_contexts_->Published(pid);
    if (published == nullptr) continue;
    metadata.published = *published;
    CapMetadataNames(metadata);
  }
  int64_t samples = 0;
  for (const StackSample& s : profile.samples) samples += s.count;
  if (samples > 0 && exporter_ != nullptr) {
    // Sent by the exporter's own thread; an interval too big for one request goes as several.
    for (const auto& request :
         BuildExportRequests(profile, resources_, options_.otlp_max_request_bytes)) {
      exporter_->Enqueue(request);
    }
  }
  if (samples > 0 && write_local_) local_output_->Write(profile, samples, now);
  local_output_->UpdateFlameGraph(last);
  if (exporter_ != nullptr) exporter_->LogNewProblems();
  BpfStats stats = profiler_->ReadStats();
  if (stats.ring_buffer_full > ring_buffer_full_reported_) {
    spdlog::warn("{} samples lost: ring buffer full",
                 stats.ring_buffer_full - ring_buffer_full_reported_);
    samples_lost_metric_->Increment(stats.ring_buffer_full - ring_buffer_full_reported_);
    ring_buffer_full_reported_ = stats.ring_buffer_full;
  }
  // Only now, with the interval written, may cached frames and modules go.
  for (const std::function<void()>& turn : interval_turnover_) turn();
  cache_metrics_->Publish(processes_, modules_, frames_, unwinder_);
  memory_.ReleaseFilePages();
  // What the caches freed goes back to the system rather than staying in the heap.
  memory_.TrimHeap(modules_.bytes() + frames_.bytes() + unwinder_.row_cache_bytes() +
                   stacks_->runtimes().HeldBytes() + processes_.mapping_bytes());
}

void Agent::WireIntervalTurnover() {
  // In this order. The frame cache turns first: the kernel symbols may be replaced only where its
  // generation turns, as that drops every cached kernel frame. Exited processes go before the
  // caches that hold entries for them (unwinder address spaces, the runtimes' frame names, the
  // BPF unwind tables), so that what only they used counts as unused in this turn rather than
  // the next.
  interval_turnover_ = {
      [this] { frames_.NextGeneration(); },
      [this] { kernel_symbols_->Refresh(frames_); },
      [this] { modules_.NextGeneration(); },
      [this] { cgroups_.NextGeneration(); },
      [this] { trace_contexts_->ForgetExited(); },  // those that exited before this turn
      [this] { processes_.DropExited(); },          // tells the process table's subscribers
      [this] { unwinder_.NextGeneration(); },
      [this] { stacks_->runtimes().NextGeneration(); },
      [this] {
        if (bpf_unwind_ != nullptr) bpf_unwind_->NextGeneration();
      },
  };
}

absl::Status Agent::PollSamples(int timeout_ms) {
  known_processes_->OnPoll();
  // Context reads put off to bound their rate: only processes with one pending.
  trace_contexts_->Upkeep();
  return profiler_->Poll(timeout_ms).status();
}

absl::Status Agent::Run(const std::atomic<bool>& stop) {
  IntervalClock clock(interval_start_, std::chrono::steady_clock::now(), options_.export_interval,
                      options_.duration);
  while (!stop.load()) {
    loop_alive_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count());
    SyncFailureMetrics();
    if (late_debug_files_ != nullptr) late_debug_files_->Collect(/*ask_again=*/false);
    if (bpf_stats_from_loop_) {
      BpfStats stats = profiler_->ReadStats();
      std::lock_guard lock(bpf_stats_mu_);
      bpf_stats_ = stats;
    }
    const ClockReading now = ClockReading::Now();
    if (clock.Done(now.steady)) break;
    if (clock.ExportDue(now.steady)) {
      // The interval's last samples belong to it, and their processes are still in the table:
      // exited ones go at the export.
      RETURN_IF_ERROR(PollSamples(0));
      ExportInterval(clock.EndInterval(now), now.wall, /*last=*/false);
      continue;
    }
    memory_.InLoop(now.steady);
    auto limit = std::chrono::milliseconds(kMaxPollMs);
    if (bpf_unwind_ != nullptr) {
      const std::chrono::nanoseconds built_before = bpf_unwind_->build_time();
      if (bpf_unwind_->BuildPending(now.steady) > 0) {
        table_build_seconds_metric_->Add(
            std::chrono::duration<double>(bpf_unwind_->build_time() - built_before).count());
      }
      // Queued tables are built as soon as the time share allows, not at the next wake-up.
      if (bpf_unwind_->pending() > 0) {
        limit = std::clamp(std::chrono::ceil<std::chrono::milliseconds>(
                               bpf_unwind_->next_build_at() - std::chrono::steady_clock::now()),
                           std::chrono::milliseconds(1), limit);
      }
    }
    const auto wait = clock.WaitFor(now.steady, limit);
    RETURN_IF_ERROR(PollSamples(static_cast<int>(wait.count())));
  }
  RETURN_IF_ERROR(PollSamples(0));  // what is already queued belongs to this run
  const ClockReading end = ClockReading::Now();
  ExportInterval(clock.EndInterval(end), end.wall, /*last=*/true);
  SyncFailureMetrics();
  if (pod_watcher_ != nullptr) OffTheSamplingThread([this] { pod_watcher_->Stop(); });

  BpfStats stats = profiler_->ReadStats();
  spdlog::info("done: {} samples, {} lost, {} malformed, {} profile(s) in {}, {} write failure(s)",
               samples_metric_->Value(), stats.ring_buffer_full, profiler_->malformed_records(),
               local_output_->files_written(), options_.output_dir,
               local_output_->write_failures());
  stacks_->LogSummary(stats);
  if (bpf_unwind_ != nullptr) bpf_unwind_->LogSummary(stats);
  stacks_->runtimes().LogSummary(stats);
  if (late_debug_files_ != nullptr) late_debug_files_->LogSummary();
  if (exporter_ != nullptr) {
    // What is still queued gets a last chance; cancelling the attempt in flight is gRPC's or
    // curl's work, kept off this thread's capabilities.
    OffTheSamplingThread([this] { exporter_->Shutdown(kExporterDrainTime); });
    exporter_->LogNewProblems();
    exporter_->LogSummary();
  }
  if (samples_metric_->Value() == 0) {
    spdlog::warn("no samples were taken: nothing ran on the CPU for the selected processes");
  } else if (write_local_) {
    local_output_->LogSummary();
  }
  return absl::OkStatus();
}

}  // namespace ember
