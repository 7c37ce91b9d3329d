// The profiling loop of ember-agent.
#include "agent/agent.h"

#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "agent/privileges.h"
#include "agent/seccomp_filter.h"
#include "common/log_safe.h"
#include "common/read_file.h"
#include "common/status_macros.h"
#include "debuginfod/fetcher_metrics.h"
#include "debuginfod/libdebuginfod_transport.h"
#include "elf/elf_file.h"
#include "k8s/kubernetes_metrics.h"
#include "otlp/exporter_metrics.h"
#include "output/pprof_writer.h"
#include "process/proc_read_metrics.h"
#include "runtimes/cpython/cpython_runtime.h"
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
// How often flamegraph.html is rewritten while the agent runs (it is also written at the end).
constexpr std::chrono::seconds kFlameGraphRewrite{60};
constexpr char kModulesPath[] = "/proc/modules";
// How often the loop drops the pages of mapped ELF files read since (Agent::ReleaseFilePages),
// when at least kFileReadsPerLoopRelease were read: the few reads of steady state (CFI rows for
// the stacks the BPF walk left over) wait for the interval's end, as a release reads
// /proc/self/maps, hundreds of lines.
constexpr std::chrono::seconds kFilePagesReleasePeriod{1};
constexpr uint64_t kFileReadsPerLoopRelease = 256;
// ... and after this many frames symbolized or modules opened since (a few ms of reading).
constexpr uint64_t kSymbolizationReadsPerRelease = 128;
// Free heap goes back to the system at an interval's end once more than this was freed since
// the last trim (TrimHeap). Each interval needs about as much again as the last: trimming at every
// export made the next one fault its pages back in (8% of the agent's CPU at 99 Hz on 2 CPUs).
constexpr size_t kFreeHeapKept = size_t{8} << 20;

// This process's resident bytes, as process_resident_memory_bytes reads them; 0 when they cannot
// be read.
size_t ResidentBytes() {
  const std::optional<ProcStat> stat = ParseProcStat(ReadWholeFile("/proc/self/stat").value_or(""));
  return stat ? stat->rss_pages * static_cast<size_t>(sysconf(_SC_PAGESIZE)) : 0;
}

// The thread group (process) of a thread id, from /proc/ID/status; nullopt when there is none.
std::optional<uint32_t> ThreadGroupOf(uint32_t id) {
  std::ifstream status(absl::StrCat("/proc/", id, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    uint32_t tgid = 0;
    if (line.rfind("Tgid:", 0) == 0 && absl::SimpleAtoi(line.substr(5), &tgid)) return tgid;
  }
  return std::nullopt;
}

// The agent's process id as BPF sees it (in the initial pid namespace), or 0 when the agent runs
// in another pid namespace: its own id there may be another process's on the host.
uint32_t OwnTgidInInitialPidNamespace() {
  // The initial pid namespace's inode number is fixed (PROC_PID_INIT_INO).
  constexpr ino_t kInitialPidNamespaceInode = 0xEFFFFFFC;
  struct stat ns;
  if (stat("/proc/self/ns/pid", &ns) != 0 || ns.st_ino != kInitialPidNamespaceInode) {
    spdlog::debug("not in the initial pid namespace: the agent's own samples are kept");
    return 0;
  }
  return static_cast<uint32_t>(getpid());
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
      unwinder_(UnwinderLimits(options)) {
  WireIntervalTurnover();
  // Registration fails only on a programming error (a bad or duplicate name).
  auto counter = [this](absl::string_view name, absl::string_view help, MetricLabels labels = {}) {
    return metrics_.AddCounter(name, help, std::move(labels)).value();
  };
  samples_metric_ = counter("ember_samples_total", "Stack samples received from the kernel.");
  samples_lost_metric_ = counter("ember_samples_lost_total",
                                 "Samples the kernel dropped because the ring buffer was full.");
  stacks_ = std::make_unique<StackBuilder>(&frames_, &processes_, &unwinder_, metrics_);
  profiles_written_metric_ =
      counter("ember_pprof_files_written_total", "Interval profiles written as pprof files.");
  write_failures_metric_ = counter("ember_output_write_failures_total",
                                   "Failed writes of pprof files or the flame graph.");
  kernel_symbols_reads_metric_ =
      counter("ember_kernel_symbols_reads_total",
              "Reads of /proc/kallsyms after the first (modules listed differently, or kernel "
              "frames above the kernel image: at most every 5 minutes), changed or not.");
  flame_graph_nodes_metric_ =
      metrics_
          .AddGauge("ember_flame_graph_nodes",
                    "Call-tree nodes of flamegraph.html, which holds every interval of the run "
                    "(bounded at 200,000).")
          .value();
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
  auto exporter_config = ResolveExporterConfig(options.otlp, [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
  });
  if (!exporter_config.ok()) return exporter_config.status();
  agent->write_local_ = !exporter_config->has_value() || options.output_dir_given;
  if (agent->write_local_) {
    std::error_code error;
    std::filesystem::create_directories(options.output_dir, error);
    if (error) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--output-dir: cannot create '", options.output_dir, "': ", error.message()));
    }
  }
  RETURN_IF_ERROR(agent->SetUpDebuginfod());
  RETURN_IF_ERROR(agent->SetUpKubernetes());

  std::vector<uint32_t> pids;
  for (uint32_t pid : options.pids) {
    std::optional<uint32_t> tgid = ThreadGroupOf(pid);
    if (!tgid) {
      return absl::InvalidArgumentError(absl::StrCat("--pid: no running process with id ", pid));
    }
    if (*tgid != pid) {
      spdlog::info("--pid {} is a thread of process {}: profiling that", pid, *tgid);
    }
    pids.push_back(*tgid);
  }
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
  const auto bpf_stats = [self] { return self->BpfStatsForMetrics(); };
  agent->stacks_->runtimes().Add(std::make_unique<python::CPythonRuntime>(
      *agent->profiler_, agent->metrics_, /*memory=*/nullptr, bpf_stats));
  agent->stacks_->runtimes().Add(
      std::make_unique<PerfMapRuntime>(agent->processes_, agent->metrics_, JitNameLimits(options)));
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
  absl::StatusOr<KallsymsFile> kallsyms = KallsymsFile::Open();
  absl::StatusOr<KernelSymbols> symbols =
      kallsyms.ok() ? kallsyms->Read() : absl::StatusOr<KernelSymbols>(kallsyms.status());
  if (symbols.ok()) {
    agent->kernel_symbols_ = std::move(symbols).value();
    agent->frames_.ReplaceKernelSymbols(&*agent->kernel_symbols_);
    agent->kallsyms_file_ = std::move(kallsyms).value();
    agent->kernel_symbols_refresh_.emplace(
        ReadWholeFile(kModulesPath), std::chrono::steady_clock::now(),
        absl::ToChronoNanoseconds(options.kernel_symbols_recheck));
  } else {
    spdlog::warn("kernel frames will be unnamed: {}", std::string(symbols.status().message()));
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
    agent->resources_ = agent->MakeResourceContext();
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

absl::Status Agent::SetUpDebuginfod() {
  std::string urls;
  if (options_.debuginfod_urls.has_value()) {
    urls = *options_.debuginfod_urls;
  } else if (const char* from_env = std::getenv("DEBUGINFOD_URLS")) {
    urls = from_env;
  }
  if (absl::StripAsciiWhitespace(urls).empty()) {
    // libdebuginfod's own users in this process (none today) must not ask either.
    unsetenv("DEBUGINFOD_URLS");
    return absl::OkStatus();
  }
  const std::string& dir = options_.debuginfod_cache_dir;
  const auto fail = [&dir](absl::string_view what) {
    return absl::FailedPreconditionError(
        absl::StrCat("--debuginfod-cache-dir: ", what,
                     " (give a writable directory, or --debuginfod-urls \"\" for no debuginfod)"));
  };
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(dir).parent_path(), error);
  if (error) return fail(absl::StrCat("cannot create '", dir, "': ", error.message()));
  const LibdebuginfodConfig config{.urls = urls,
                                   .staging_dir = dir + "/client",
                                   .timeout = std::chrono::seconds(std::max<int64_t>(
                                       1, absl::ToInt64Seconds(options_.debuginfod_timeout))),
                                   .max_file_bytes = options_.debuginfod_cache_bytes};
  DebugFileFetcherOptions fetcher_options{.cache_dir = dir,
                                          .max_cache_bytes = options_.debuginfod_cache_bytes,
                                          .max_file_bytes = options_.debuginfod_cache_bytes,
                                          .max_concurrent = options_.debuginfod_max_fetches};
  auto fetcher = DebugFileFetcher::Create(std::move(fetcher_options), [config] {
    absl::StatusOr<std::unique_ptr<LibdebuginfodTransport>> transport =
        LibdebuginfodTransport::Create(config);
    if (!transport.ok()) {
      spdlog::warn("debuginfod: {}", std::string(transport.status().message()));
      return std::unique_ptr<DebuginfodTransport>();
    }
    return std::unique_ptr<DebuginfodTransport>(std::move(transport).value());
  });
  if (!fetcher.ok()) return fail(fetcher.status().message());
  if (absl::Status status = ConfigureLibdebuginfod(config); !status.ok()) {
    return fail(status.message());
  }
  debug_files_ = std::move(fetcher).value();
  modules_.SetDebugFileSource(debug_files_.get());
  debuginfod_frames_named_metric_ =
      metrics_
          .AddCounter("ember_debuginfod_frames_named_total",
                      "Cached frames named again once the debug file of their binary arrived "
                      "from a debuginfod server.")
          .value();
  const DebugFileFetcherStats cached = debug_files_->stats();
  spdlog::info("debuginfod: asking {} for missing debug files; cache {} ({} files, {} bytes)",
               LogSafe(urls), dir, cached.cache_files, cached.cache_bytes);
  return absl::OkStatus();
}

void Agent::CollectDebugFiles(bool ask_again) {
  if (debug_files_ == nullptr) return;
  std::vector<std::string> arrived;
  if (debug_files_->HasArrived()) arrived = debug_files_->TakeArrived();
  if (ask_again) {
    for (std::string& build_id : modules_.AwaitedBuildIds()) {
      if (debug_files_->Find(build_id).has_value()) arrived.push_back(std::move(build_id));
    }
  }
  // One pass over the cached frames for every file that arrived: a burst of arrivals (every
  // library of the host, at start) must not walk them once per file.
  std::vector<FileIdentity> files;
  for (const std::string& build_id : arrived) {
    std::vector<FileIdentity> reloaded = modules_.DebugFileArrived(build_id);
    files.insert(files.end(), reloaded.begin(), reloaded.end());
  }
  if (files.empty()) return;
  const size_t named = frames_.Rename(files);
  debuginfod_frames_named_metric_->Increment(named);
  spdlog::debug("debuginfod: {} debug file(s) arrived for {} file(s) in use; {} frame(s) named",
                arrived.size(), files.size(), named);
}

absl::Status Agent::SetUpKubernetes() {
  const char* service_host = std::getenv("KUBERNETES_SERVICE_HOST");
  const KubeApiFlags& flags = options_.kube;
  const bool flags_given = flags.server || flags.token_file || flags.ca_file || flags.node_name;
  bool enabled = false;
  switch (options_.kubernetes) {
    case Options::Kubernetes::kOn:
      enabled = true;
      break;
    case Options::Kubernetes::kOff:
      enabled = false;
      break;
    case Options::Kubernetes::kAuto:  // in a pod, or pointed at an API server
      enabled = (service_host != nullptr && *service_host != '\0') || flags_given;
      break;
  }
  if (!enabled) return absl::OkStatus();
  auto config = ResolveKubeApiConfig(flags, [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
  });
  if (!config.ok()) return absl::InvalidArgumentError(config.status().message());
  pods_ = std::make_unique<PodIndex>(PodIndexLimits{.max_pods = options_.max_pods});
  auto watcher = PodWatcher::Create(*config, pods_.get());
  if (!watcher.ok()) return absl::InvalidArgumentError(watcher.status().message());
  pod_watcher_ = std::move(watcher).value();
  spdlog::info("watching the pods of node {} at {}", config->node_name, config->server);
  return absl::OkStatus();
}

absl::Status Agent::SetUpStatusEndpoint() {
  RETURN_IF_ERROR(AddProcessMetrics(metrics_));
  RETURN_IF_ERROR(AddHeapMetrics(metrics_));
  RETURN_IF_ERROR(RegisterFileOpenMetrics(metrics_));
  // The BPF program's counters, read when scraped.
  RETURN_IF_ERROR(RegisterBpfSampleMetrics(metrics_, [this] { return BpfStatsForMetrics(); }));
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
  aggregator_.Add(header.pid, process_name, thread, stack);
  // A burst of new binaries (the start-up's first samples name every running one) reads many
  // files' symbols and DWARF at once: their pages go every so many reads, not only each second.
  if (SymbolizationReads() - symbolization_reads_released_ >= kSymbolizationReadsPerRelease) {
    ReleaseFilePages();
  }
}

ResourceContext Agent::MakeResourceContext() {
  ResourceContext context;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) context.host_name = host;
  if (const char* service = std::getenv("OTEL_SERVICE_NAME")) context.service_name = service;
  if (const char* attributes = std::getenv("OTEL_RESOURCE_ATTRIBUTES")) {
    ParsedResourceAttributes parsed = ParseResourceAttributes(attributes);
    for (const std::string& error : parsed.errors) spdlog::warn("{}", error);
    context.attributes = std::move(parsed.attributes);
  }
  context.scope_version = EMBER_VERSION;
  return context;
}

ProcessMetadata Agent::MetadataOf(uint32_t pid) {
  ProcessMetadata metadata;
  [&] {
    const Process* process = processes_.Find(pid);
    // A process let go past --max-processes is read again, as its next sample would read it.
    if (process == nullptr && processes_.WasEvicted(pid)) process = processes_.Get(pid);
    if (process == nullptr) return;
    metadata.executable_path = process->executable_path;
    std::string_view path = metadata.executable_path;
    metadata.executable_name = std::string(path.substr(path.rfind('/') + 1));
    if (!process->container) return;
    metadata.container_id = process->container->id;
    if (pods_ == nullptr) return;
    std::optional<ContainerMetadata> pod =
        pods_->Lookup(process->container->id, process->container->pod_uid);
    if (!pod) return;
    metadata.service_name = pod->service_name;
    for (auto& [key, value] : KubernetesAttributes(*pod)) {
      metadata.attributes.push_back({std::move(key), std::move(value)});
    }
  }();
  return metadata;
}

void Agent::AttachProcessMetadata(IntervalProfile* profile) {
  for (const StackSample& sample : profile->samples) {
    if (profile->process_metadata.contains(sample.pid)) continue;
    profile->AttachProcessMetadata(sample.pid, MetadataOf(sample.pid));
  }
}

void Agent::ReportExporter() {
  if (exporter_ == nullptr) return;
  ExporterStats now = exporter_->stats();
  ExporterStats& was = exporter_reported_;
  if (now.dropped_queue_full > was.dropped_queue_full) {
    spdlog::warn("OTLP: {} interval(s) dropped, the queue was full while the endpoint was away",
                 now.dropped_queue_full - was.dropped_queue_full);
  }
  if (now.failed > was.failed) {
    spdlog::warn("OTLP: {} interval(s) rejected by the endpoint", now.failed - was.failed);
  }
  if (now.rejected_profiles > was.rejected_profiles) {
    spdlog::warn("OTLP: the endpoint rejected {} profile(s) in partial successes",
                 now.rejected_profiles - was.rejected_profiles);
  }
  was = now;
}

std::string Agent::NextPprofPath(absl::Time now) const {
  std::string stem = absl::StrCat(options_.output_dir, "/cpu-",
                                  absl::FormatTime("%Y%m%dT%H%M%SZ", now, absl::UTCTimeZone()));
  std::string path = stem + ".pb.gz";
  std::error_code error;
  // A second interval written within the same second (the loop catching up after a slow write):
  // "_2" sorts after ".pb.gz", so the files list in the order they were written.
  for (int n = 2; std::filesystem::exists(path, error); ++n) {
    path = absl::StrCat(stem, "_", n, ".pb.gz");
  }
  return path;
}

void Agent::SyncFailureMetrics() {
  symbolization_failure_metrics_->Sync(frames_.failures());
  proc_read_failure_metrics_->Sync(processes_.read_failures(), cgroups_.stats().read_failures);
  stacks_->runtimes().SyncMetrics();
}

void Agent::ExportInterval(IntervalSpan span, absl::Time now, bool last) {
  // Frames whose debug file arrived during the interval go out named.
  CollectDebugFiles(/*ask_again=*/true);
  const int64_t period_ns = 1'000'000'000LL / options_.sampling_hz;
  IntervalProfile profile = aggregator_.TakeInterval(
      absl::ToUnixNanos(span.start), absl::ToInt64Nanoseconds(span.length), period_ns);
  // Before exited processes are dropped, and before any writer: each reads the same metadata.
  AttachProcessMetadata(&profile);
  int64_t samples = 0;
  for (const StackSample& s : profile.samples) samples += s.count;
  if (samples > 0 && exporter_ != nullptr) {
    // Sent by the exporter's own thread; an interval too big for one request goes as several.
    for (const auto& request :
         BuildExportRequests(profile, resources_, options_.otlp_max_request_bytes)) {
      exporter_->Enqueue(request);
    }
  }
  if (samples > 0 && write_local_) {
    // A full or read-only disk loses this interval, not the agent: it keeps sampling.
    std::string path = NextPprofPath(now);
    if (absl::Status status = WritePprofFile(profile, path); status.ok()) {
      profiles_written_metric_->Increment();
      spdlog::info("wrote {} ({} samples, {} stacks)", path, samples, profile.samples.size());
    } else {
      write_failures_metric_->Increment();
      spdlog::error("interval of {} samples lost: {}", samples, std::string(status.message()));
    }
    flame_graph_.Add(profile);
    flame_graph_changed_ = true;
    flame_graph_nodes_metric_->Set(static_cast<double>(flame_graph_.nodes()));
  }
  // The page holds every interval so far, so writing it costs the whole graph (up to 200,000
  // nodes), not this interval: it is rewritten at most once a minute, and at the end.
  // Timed on the steady clock, like the export schedule: a wall clock step must not stop it.
  const auto started = std::chrono::steady_clock::now();
  if (flame_graph_changed_ && (last || !flame_graph_written_at_.has_value() ||
                               started - *flame_graph_written_at_ >= kFlameGraphRewrite)) {
    if (absl::Status status =
            flame_graph_.WriteHtml(options_.output_dir + "/flamegraph.html", "Ember CPU profile");
        !status.ok()) {
      write_failures_metric_->Increment();
      spdlog::error("flame graph not updated: {}", std::string(status.message()));
    } else {
      spdlog::debug("flame graph written ({} nodes) in {} ms", flame_graph_.nodes(),
                    MillisecondsSince(started));
    }
    flame_graph_changed_ = false;
    flame_graph_written_at_ = started;
  }
  ReportExporter();
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
  ReleaseFilePages();
  // What the caches freed goes back to the system rather than staying in the heap.
  TrimHeap();
}

void Agent::WireIntervalTurnover() {
  // In this order. The frame cache turns first: the kernel symbols may be replaced only where its
  // generation turns, as that drops every cached kernel frame. Exited processes go before the
  // caches that hold entries for them (unwinder address spaces, the runtimes' frame names, the
  // BPF unwind tables), so that what only they used counts as unused in this turn rather than
  // the next.
  interval_turnover_ = {
      [this] { frames_.NextGeneration(); },
      [this] { RefreshKernelSymbols(); },
      [this] { modules_.NextGeneration(); },
      [this] { cgroups_.NextGeneration(); },
      [this] { processes_.DropExited(); },  // tells the process table's subscribers
      [this] { unwinder_.NextGeneration(); },
      [this] { stacks_->runtimes().NextGeneration(); },
      [this] {
        if (bpf_unwind_ != nullptr) bpf_unwind_->NextGeneration();
      },
  };
}

void Agent::RefreshKernelSymbols() {
  if (!kallsyms_file_ || !kernel_symbols_refresh_) return;
  const std::optional<std::string> modules = ReadWholeFile(kModulesPath);
  const std::optional<absl::string_view> modules_text =
      modules ? std::optional<absl::string_view>(*modules) : std::nullopt;
  const uint64_t misses = frames_.stats().kernel_misses_past_image;
  const auto now = std::chrono::steady_clock::now();
  if (!kernel_symbols_refresh_->Check(modules_text, misses, now)) return;
  kernel_symbols_reads_metric_->Increment();
  absl::StatusOr<KernelSymbols> symbols = kallsyms_file_->Read();
  if (!symbols.ok()) {
    spdlog::warn("kernel symbols not read again (the table read before is kept): {}",
                 std::string(symbols.status().message()));
    return;
  }
  if (*symbols == *kernel_symbols_) return;
  spdlog::info("kernel symbols read again: {} text symbols ({} before), in {} ms", symbols->size(),
               kernel_symbols_->size(), MillisecondsSince(now));
  kernel_symbols_ = std::move(symbols).value();
  frames_.ReplaceKernelSymbols(&*kernel_symbols_);
}

void Agent::TrimHeap() {
  // mallinfo2 walks every free chunk of the heap under its lock (0.2 to 0.3 ms a call here, 3% of
  // the agent's CPU at an export every 10 s), so it is asked only when something may have left
  // much memory free: the agent grew by kFreeHeapKept since the last look (an interval's burst,
  // freed at its export), or its caches shrank by that much from their peak since then.
  const size_t resident = ResidentBytes();
  const size_t cache_bytes = modules_.bytes() + frames_.bytes() + unwinder_.row_cache_bytes() +
                             stacks_->runtimes().HeldBytes() + processes_.mapping_bytes();
  cache_bytes_peak_ = std::max(cache_bytes_peak_, cache_bytes);
  const bool grew = resident == 0 || resident > resident_at_heap_check_ + kFreeHeapKept;
  const bool caches_shrank = cache_bytes + kFreeHeapKept < cache_bytes_peak_;
  if (!grew && !caches_shrank) return;
  cache_bytes_peak_ = cache_bytes;
  // malloc's free bytes count trimmed pages too, so they are compared with what was free after
  // the last trim: comparing them with a fixed amount trimmed again at every export once a cache
  // had dropped that much (6 ms each, a third of an export, with every page handed back faulted
  // in again by the next). Free bytes taken into use since lower the mark: what is freed again
  // above it is resident.
  const size_t free_bytes = mallinfo2().fordblks;
  free_heap_after_trim_ = std::min(free_heap_after_trim_, free_bytes);
  if (free_bytes - free_heap_after_trim_ > kFreeHeapKept) {
    malloc_trim(0);
    free_heap_after_trim_ = mallinfo2().fordblks;
  }
  resident_at_heap_check_ = ResidentBytes();
}

void Agent::ReleaseFilePages(uint64_t min_reads) {
  // The mapped ELF files' pages: resident only while read, so RSS shows the agent's own memory
  // and what it reads now (the pages stay in the page cache for the next read).
  const ModuleCfi::RowStats rows = unwinder_.row_stats();
  const uint64_t symbolization_reads = SymbolizationReads();
  const uint64_t reads = symbolization_reads + rows.rows_read + rows.libdwfl_steps;
  file_pages_released_at_ = std::chrono::steady_clock::now();
  if (reads - file_reads_released_ < std::max<uint64_t>(min_reads, 1)) return;
  symbolization_reads_released_ = symbolization_reads;
  file_reads_released_ = reads;
  internal::FileMappingCheck file_mappings;  // reads /proc/self/maps only for files new since
  modules_.ReleasePages(file_mappings);
  unwinder_.ReleasePages(file_mappings);
}

absl::Status Agent::PollSamples(int timeout_ms) {
  known_processes_->OnPoll();
  return profiler_->Poll(timeout_ms).status();
}

absl::Status Agent::Run(const std::atomic<bool>& stop) {
  IntervalClock clock(interval_start_, std::chrono::steady_clock::now(), options_.export_interval,
                      options_.duration);
  while (!stop.load()) {
    loop_alive_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count());
    SyncFailureMetrics();
    CollectDebugFiles(/*ask_again=*/false);
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
    // Within an interval too, so that symbolizing many new binaries at once (at start-up, or a
    // burst of new processes) does not keep all their pages resident until its end.
    if (now.steady - file_pages_released_at_ >= kFilePagesReleasePeriod) {
      ReleaseFilePages(kFileReadsPerLoopRelease);
    }
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
               profiles_written_metric_->Value(), options_.output_dir,
               write_failures_metric_->Value());
  spdlog::info(
      "user stacks unwound with CFI: {} complete, {} truncated, {} failed; {} snapshot "
      "errors ({} with no stack mapping found)",
      stacks_->ends().complete, stacks_->ends().truncated, stacks_->ends().failed,
      stats.snapshot_errors, stats.snapshot_no_mapping);
  if (bpf_unwind_ != nullptr) {
    const BpfUnwindTablesStats tables = bpf_unwind_->stats();
    spdlog::info(
        "user stacks walked in BPF: {} whole, {} stopped short (the agent went on), {} of "
        "processes without tables; {} of {} CFI rows used by {} files ({} without rows, {} that "
        "did not fit, {} queued, {} sampled too rarely to build yet); {} tables built in {} ms, "
        "{} not built as their processes had exited",
        stats.unwind_complete, stats.unwind_stopped, stats.unwind_no_tables, tables.rows_used,
        tables.rows_capacity, tables.files_loaded, tables.files_without_rows, tables.out_of_room,
        tables.files_queued, tables.files_unwanted, tables.tables_built,
        std::chrono::duration_cast<std::chrono::milliseconds>(tables.build_time).count(),
        tables.dropped_exited);
  }
  stacks_->runtimes().LogSummary(stats);
  if (debug_files_ != nullptr) {
    const DebugFileFetcherStats fetched = debug_files_->stats();
    const auto count = [&fetched](FetchResult result) {
      return fetched.results[static_cast<size_t>(result)];
    };
    spdlog::info(
        "debuginfod: {} debug file(s) fetched, {} not found, {} error(s), {} timeout(s), {} "
        "refused; {} frame(s) named late; cache {} bytes in {} file(s), {} evicted",
        count(FetchResult::kOk), count(FetchResult::kNotFound), count(FetchResult::kError),
        count(FetchResult::kTimeout), count(FetchResult::kRefused),
        debuginfod_frames_named_metric_->Value(), fetched.cache_bytes, fetched.cache_files,
        fetched.evictions);
  }
  if (exporter_ != nullptr) {
    // What is still queued gets a last chance; cancelling the attempt in flight is gRPC's or
    // curl's work, kept off this thread's capabilities.
    OffTheSamplingThread([this] { exporter_->Shutdown(kExporterDrainTime); });
    ReportExporter();
    ExporterStats sent = exporter_->stats();
    spdlog::info(
        "OTLP: {} interval(s) sent ({} bytes), {} retried attempt(s), {} dropped with a full "
        "queue, {} rejected, {} unsent at exit",
        sent.intervals_sent, sent.bytes_sent, sent.retries, sent.dropped_queue_full, sent.failed,
        sent.dropped_at_shutdown);
  }
  if (samples_metric_->Value() == 0) {
    spdlog::warn("no samples were taken: nothing ran on the CPU for the selected processes");
  } else if (write_local_ && flame_graph_.total_samples() > 0) {
    std::error_code error;
    auto page = std::filesystem::absolute(options_.output_dir + "/flamegraph.html", error)
                    .lexically_normal();
    spdlog::info("flame graph: {}", page.string());
  }
  return absl::OkStatus();
}

}  // namespace ember
