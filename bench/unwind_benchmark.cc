// Google Benchmark of DWARF unwinding of recorded user-stack snapshots (issue 3). It records real
// samples of tests/fixtures/unwind/cfi_chains with the BPF sampler, stops the fixture so that its
// mappings stay, and replays the records through DwarfUnwinder (and FrameResolver) as the agent
// does. Items per second are samples per second of one core's CPU time. Needs root; not a ctest.
//
//   sudo build/unwind_benchmark [--records=N] [Google Benchmark flags]
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/options.h"
#include "process/process_table.h"
#include "sampler/bpf_profiler.h"
#include "sampler/sample_record_layout.h"
#include "spdlog/spdlog.h"
#include "stacks/frame_resolver.h"
#include "symbolize/elf_module.h"
#include "unwind/dwarf_unwinder.h"

namespace ember {
namespace {

constexpr int kSamplingHz = 199;
constexpr size_t kDefaultRecords = 1000;
constexpr auto kRecordTimeout = std::chrono::seconds(60);
// Longer than any recording: the fixture is stopped and killed long before it would end.
constexpr char kFixtureSeconds[] = "600";

// The fixture, waiting for its start byte on a pipe. It gets SIGKILL when the benchmark dies, so
// an interrupted run leaves no stopped process behind.
class Fixture {
 public:
  static absl::StatusOr<std::unique_ptr<Fixture>> Start(const char* path) {
    int in[2];
    if (pipe2(in, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return absl::InternalError("fork failed");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      int null = open("/dev/null", O_WRONLY);
      dup2(in[0], 0);
      dup2(null, 1);
      execl(path, path, kFixtureSeconds, static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in[0]);
    return std::unique_ptr<Fixture>(new Fixture(pid, in[1]));
  }
  ~Fixture() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    close(stdin_fd_);
  }
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;

  pid_t pid() const { return pid_; }
  bool Go() { return write(stdin_fd_, "g", 1) == 1; }
  // Stops it and waits until it is stopped, so its maps and files stay for the replay.
  bool Stop() {
    int status = 0;
    return kill(pid_, SIGSTOP) == 0 && waitpid(pid_, &status, WUNTRACED) == pid_ &&
           WIFSTOPPED(status);
  }

 private:
  Fixture(pid_t pid, int stdin_fd) : pid_(pid), stdin_fd_(stdin_fd) {}
  pid_t pid_;
  int stdin_fd_;
};

// Recorded samples of the stopped fixture, and what the agent would know of it.
struct Replay {
  uint32_t pid = 0;
  ProcessTable processes;
  Process* process = nullptr;
  std::vector<ExecutableMapping> mappings;
  std::vector<std::vector<uint8_t>> records;  // raw ring-buffer records
  std::vector<SampleView> samples;            // the records that carry a snapshot, decoded
};

// Into `result`, reused from sample to sample as the agent does.
void UnwindInto(DwarfUnwinder& unwinder, const Replay& replay, const SampleView& sample,
                UnwindResult& result) {
  UserStack stack{.registers = sample.user_regs,
                  .stack = sample.user_stack,
                  .clamped = (sample.header->flags & EMBER_SAMPLE_SNAPSHOT_CLAMPED) != 0};
  unwinder.Unwind(
      replay.pid, replay.process->maps_version, [&] { return replay.mappings; }, stack, result);
}

UnwindResult Unwind(DwarfUnwinder& unwinder, const Replay& replay, const SampleView& sample) {
  UnwindResult result;
  UnwindInto(unwinder, replay, sample, result);
  return result;
}

absl::Status Record(size_t wanted, Replay* replay, Fixture* fixture) {
  replay->pid = fixture->pid();
  BpfProfilerConfig config{.sampling_hz = kSamplingHz,
                           .pids = {replay->pid},
                           .stack_snapshot_bytes = Options{}.stack_snapshot_bytes};
  auto profiler = BpfProfiler::Create(config, [&](const SampleView& s) {
    if (replay->records.size() >= wanted) return;
    const auto* begin = reinterpret_cast<const uint8_t*>(s.header);
    size_t size = sizeof(ember_sample) +
                  (s.kernel_ips.size() + s.user_ips.size()) * sizeof(uint64_t) +
                  s.user_stack.size();
    replay->records.emplace_back(begin, begin + size);
  });
  if (!profiler.ok()) return profiler.status();
  if (!fixture->Go()) return absl::InternalError("cannot start the fixture");
  const auto start = std::chrono::steady_clock::now();
  while (replay->records.size() < wanted &&
         std::chrono::steady_clock::now() - start < kRecordTimeout) {
    if (auto polled = (*profiler)->Poll(100); !polled.ok()) return polled.status();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!fixture->Stop()) return absl::InternalError("cannot stop the fixture");
  BpfStats stats = (*profiler)->ReadStats();
  profiler->reset();
  std::printf(
      "recorded %zu samples of cfi_chains (pid %u) at %d Hz with %u-byte snapshots in %.1f s"
      " (%llu lost, %llu snapshot errors, %llu clamped)\n",
      replay->records.size(), replay->pid, kSamplingHz, config.stack_snapshot_bytes, seconds,
      static_cast<unsigned long long>(stats.ring_buffer_full),
      static_cast<unsigned long long>(stats.snapshot_errors),
      static_cast<unsigned long long>(stats.snapshot_clamped));
  if (replay->records.empty()) return absl::InternalError("no samples of the fixture recorded");

  replay->process = replay->processes.Get(replay->pid);
  if (replay->process == nullptr) return absl::InternalError("cannot read the fixture's maps");
  replay->mappings = UnwindMappingsOf(replay->processes, *replay->process);
  for (const std::vector<uint8_t>& record : replay->records) {
    SampleView view;
    if (DecodeSample(record.data(), record.size(), &view) == DecodeResult::kOk &&
        !view.user_stack.empty()) {
      replay->samples.push_back(view);
    }
  }
  if (replay->samples.empty()) return absl::InternalError("no recorded sample has a snapshot");
  return absl::OkStatus();
}

// One pass over every sample with a fresh unwinder: how the unwinds end, as the agent counts.
void PrintUnwindEnds(Replay& replay) {
  DwarfUnwinder unwinder;
  ModuleCache modules;
  FrameResolver resolver(&replay.processes, &modules, nullptr);
  size_t ends[3] = {0, 0, 0};
  size_t frames = 0;
  size_t reach_main = 0;
  size_t snapshot_bytes = 0;
  for (const SampleView& sample : replay.samples) {
    snapshot_bytes += sample.user_stack.size();
    UnwindResult result = Unwind(unwinder, replay, sample);
    ++ends[static_cast<int>(result.end)];
    frames += result.frames.size();
    for (const UnwoundFrame& f : result.frames) {
      if (resolver.User(replay.process, f.pc, f.is_return_address)->function == "main") {
        ++reach_main;
        break;
      }
    }
  }
  const double n = static_cast<double>(replay.samples.size());
  std::printf(
      "replaying %zu samples with a snapshot (of %zu recorded): unwind ended kOutermost %.1f%%, "
      "kTruncated %.1f%%, kError %.1f%%; %.1f frames and %.0f snapshot bytes per sample; %.1f%% "
      "reach main\n",
      replay.samples.size(), replay.records.size(),
      100 * ends[static_cast<int>(UnwindEnd::kOutermost)] / n,
      100 * ends[static_cast<int>(UnwindEnd::kTruncated)] / n,
      100 * ends[static_cast<int>(UnwindEnd::kError)] / n, frames / n, snapshot_bytes / n,
      100 * reach_main / n);
  std::fflush(stdout);
}

// One DwarfUnwinder whose caches have seen every sample; each iteration unwinds one sample.
// state.range(0): 1 steps frames by the cached compact CFI rows (the default), 0 by libdwfl only.
void BM_UnwindWarm(benchmark::State& state, Replay& replay) {
  DwarfUnwinder unwinder(DwarfUnwinder::Limits{.compact_rows = state.range(0) != 0});
  for (const SampleView& sample : replay.samples) Unwind(unwinder, replay, sample);
  size_t next = 0;
  int64_t frames = 0;
  UnwindResult result;
  for (auto _ : state) {
    UnwindInto(unwinder, replay, replay.samples[next], result);
    frames += static_cast<int64_t>(result.frames.size());
    benchmark::DoNotOptimize(result);
    if (++next == replay.samples.size()) next = 0;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["frames/sample"] =
      static_cast<double>(frames) / static_cast<double>(state.iterations());
  const ModuleCfi::RowStats rows = unwinder.row_stats();
  state.counters["compact%"] =
      100.0 * static_cast<double>(rows.compact_steps) /
      static_cast<double>(std::max<uint64_t>(1, rows.compact_steps + rows.libdwfl_steps));
}

// As the agent does per sample: unwind, then resolve every frame (cached after the first sight).
void BM_UnwindAndSymbolizeWarm(benchmark::State& state, Replay& replay) {
  DwarfUnwinder unwinder;
  ModuleCache modules;
  FrameResolver resolver(&replay.processes, &modules, nullptr);
  UnwindResult result;
  auto unwind_and_resolve = [&](const SampleView& sample) {
    UnwindInto(unwinder, replay, sample, result);
    for (const UnwoundFrame& f : result.frames) {
      benchmark::DoNotOptimize(resolver.User(replay.process, f.pc, f.is_return_address));
    }
  };
  for (const SampleView& sample : replay.samples) unwind_and_resolve(sample);
  size_t next = 0;
  for (auto _ : state) {
    unwind_and_resolve(replay.samples[next]);
    if (++next == replay.samples.size()) next = 0;
  }
  state.SetItemsProcessed(state.iterations());
}

// Each iteration: a fresh DwarfUnwinder (no address space, no ELF image, no parsed CFI) unwinds
// the next state.range(0) samples, so the first-use cost is spread over that many. The page cache
// stays warm: this is Ember's caches going cold, not the disk's.
void BM_UnwindCold(benchmark::State& state, Replay& replay) {
  const auto batch = static_cast<size_t>(state.range(0));
  size_t next = 0;
  for (auto _ : state) {
    DwarfUnwinder unwinder;
    for (size_t i = 0; i < batch; ++i) {
      benchmark::DoNotOptimize(Unwind(unwinder, replay, replay.samples[next]));
      if (++next == replay.samples.size()) next = 0;
    }
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

}  // namespace
}  // namespace ember

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  size_t wanted = ember::kDefaultRecords;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--records=", 0) == 0) {
      if (!absl::SimpleAtoi(arg.substr(10), &wanted) || wanted == 0) {
        std::fprintf(stderr, "unwind_benchmark: --records: expected a positive number\n");
        return 2;
      }
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  if (geteuid() != 0) {
    std::fprintf(stderr,
                 "unwind_benchmark: needs root, to record samples with BPF: run it with sudo\n");
    return 1;
  }
  spdlog::set_level(spdlog::level::warn);

  auto fixture = ember::Fixture::Start(EMBER_CFI_CHAINS_BIN);
  if (!fixture.ok()) {
    std::fprintf(stderr, "unwind_benchmark: %s\n", std::string(fixture.status().message()).c_str());
    return 1;
  }
  ember::Replay replay;
  if (absl::Status status = ember::Record(wanted, &replay, fixture->get()); !status.ok()) {
    std::fprintf(stderr, "unwind_benchmark: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  ember::PrintUnwindEnds(replay);

  using benchmark::State;
  benchmark::RegisterBenchmark("BM_UnwindWarm",
                               [&](State& state) { ember::BM_UnwindWarm(state, replay); })
      ->ArgName("compact_rows")
      ->Arg(1)
      ->Arg(0);
  benchmark::RegisterBenchmark("BM_UnwindAndSymbolizeWarm", [&](State& state) {
    ember::BM_UnwindAndSymbolizeWarm(state, replay);
  });
  benchmark::RegisterBenchmark("BM_UnwindCold",
                               [&](State& state) { ember::BM_UnwindCold(state, replay); })
      ->Arg(1)
      ->Arg(10)
      ->Arg(100)
      ->Arg(1000);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;  // the fixture is killed on the way out
}
