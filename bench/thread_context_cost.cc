// What reading the OpenTelemetry thread context costs the BPF program per sample
// (docs/benchmarks.md, "Thread context"): one profiler on one busy helper process whose main
// thread has a record and whose second thread has none, its context_procs entry set and removed in
// alternate windows, so both conditions share the machine's state; per condition the program's
// phase times (bpf/phase_times.h) per sample. Needs root and a build configured with
// -DEMBER_BPF_PHASE_TIMES=ON.
//
//   thread_context_cost [--model exe|gd] [--hz 999] [--window-ms 1000] [--rounds 20]
//
// exe: the variable in the executable (an offset from the thread pointer); gd: in a library
// reached by general dynamic (through the thread's DTV).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "context/tls_location.h"
#include "phase_times.h"
#include "process/process_table.h"
#include "runtimes/process_memory.h"
#include "sampler/bpf_profiler.h"
#include "support/subprocess.h"

namespace {

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "thread_context_cost: %s\nusage: thread_context_cost [--model exe|gd] [--hz 999] "
               "[--window-ms 1000] [--rounds 20]\n",
               why.c_str());
  return 2;
}

struct Totals {
  std::vector<uint64_t> sums = std::vector<uint64_t>(EMBER_PHASE_COUNT);
  void Add(const std::vector<uint64_t>& before, const std::vector<uint64_t>& after) {
    for (size_t i = 0; i < sums.size(); ++i) sums[i] += after[i] - before[i];
  }
};

// Every timed phase (ns) of bpf/phase_times.h; counts are left out.
constexpr int kTimedPhases[] = {
    EMBER_PHASE_HEADER,    EMBER_PHASE_TIMER,  EMBER_PHASE_KERNEL_STACK, EMBER_PHASE_USER_REGS,
    EMBER_PHASE_STACK_END, EMBER_PHASE_WALK,   EMBER_PHASE_SNAPSHOT,     EMBER_PHASE_PYTHON,
    EMBER_PHASE_CONTEXT,   EMBER_PHASE_WAKEUP, EMBER_PHASE_OUTPUT};

void Print(const char* name, const Totals& totals) {
  const double samples = static_cast<double>(totals.sums[EMBER_PHASE_SAMPLES]);
  if (samples == 0) {
    std::printf("%-16s no samples\n", name);
    return;
  }
  uint64_t all = 0;
  for (int phase : kTimedPhases) all += totals.sums[phase];
  std::printf(
      "%-16s %8.0f samples  %6.0f ns a sample in all  context phase %5.0f ns a sample "
      "(%5.0f ns a read, %.0f reads)  records of %4.0f bytes\n",
      name, samples, all / samples, totals.sums[EMBER_PHASE_CONTEXT] / samples,
      totals.sums[EMBER_PHASE_CONTEXT_READS] > 0
          ? static_cast<double>(totals.sums[EMBER_PHASE_CONTEXT]) /
                static_cast<double>(totals.sums[EMBER_PHASE_CONTEXT_READS])
          : 0.0,
      static_cast<double>(totals.sums[EMBER_PHASE_CONTEXT_READS]),
      totals.sums[EMBER_PHASE_RECORD_BYTES] / samples);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "exe";
  int hz = 999, window_ms = 1000, rounds = 20;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return Usage(flag + ": expected a value");
    const std::string value = argv[i + 1];
    if (flag == "--model") {
      if (value != "exe" && value != "gd") return Usage("--model: exe or gd, not '" + value + "'");
      model = value;
      continue;
    }
    char* end = nullptr;
    const long number = std::strtol(value.c_str(), &end, 10);
    if (*end != '\0' || number <= 0 || number > 100000) {
      return Usage(flag + ": expected a positive whole number, not '" + value + "'");
    }
    if (flag == "--hz") {
      hz = static_cast<int>(number);
    } else if (flag == "--window-ms") {
      window_ms = static_cast<int>(number);
    } else if (flag == "--rounds") {
      rounds = static_cast<int>(number);
    } else {
      return Usage("unknown flag " + flag);
    }
  }
  const std::string helper_path =
      std::string(EMBER_TLS_HELPERS) + (model == "exe" ? "/exe_gcc_bfd" : "/user_gd_gcc_bfd");
  const int run_ms = 2 * rounds * window_ms + 5000;
  if (run_ms > 55000) return Usage("--rounds x --window-ms: the helper runs at most 55 s");
  ember::testing::Subprocess helper({helper_path, "spin", std::to_string(run_ms)});
  if (!helper.WaitForOutput("ready", std::chrono::seconds(20))) {
    std::fprintf(stderr, "thread_context_cost: %s did not start: %s\n", helper_path.c_str(),
                 helper.output().c_str());
    return 1;
  }
  const uint32_t pid = helper.pid();
  ember::ProcessTable table("/proc");
  ember::Process* process = table.Get(pid);
  ember::ProcessMemoryReader memory(pid);
  if (process == nullptr) return 1;
  absl::StatusOr<ember::context::TlsLocation> location =
      ember::context::FindThreadContextTls(*process, memory);
  if (!location.ok()) {
    std::fprintf(stderr, "thread_context_cost: %s\n",
                 std::string(location.status().message()).c_str());
    return 1;
  }
  ember::BpfProfilerConfig config{.sampling_hz = hz, .pids = {pid}};
  absl::StatusOr<std::unique_ptr<ember::BpfProfiler>> profiler =
      ember::BpfProfiler::Create(config, [](const ember::SampleView&) {});
  if (!profiler.ok()) {
    std::fprintf(stderr, "thread_context_cost: %s\n",
                 std::string(profiler.status().message()).c_str());
    return 1;
  }
  ember::BpfProfiler& bpf = **profiler;
  if (!bpf.ReadPhaseSums().has_value()) {
    return Usage("no phase_ns map: configure the build with -DEMBER_BPF_PHASE_TIMES=ON");
  }
  bpf.MarkProcessKnown(pid);
  std::printf("thread_context_cost: model %s (%s), %d Hz, %d rounds of 2 x %d ms\n", model.c_str(),
              ember::context::TlsModelName(location->model), hz, rounds, window_ms);
  Totals with, without;
  for (int round = 0; round < 2 * rounds; ++round) {
    const bool reading = round % 2 == 0;
    if (reading) {
      if (!bpf.SetThreadContextProcess(pid, location->config).ok()) return 1;
    } else {
      bpf.RemoveThreadContextProcess(pid);
    }
    // The first samples after a change may have started before it.
    if (!bpf.Poll(50).ok()) return 1;
    const std::vector<uint64_t> before = *bpf.ReadPhaseSums();
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(window_ms);
    while (std::chrono::steady_clock::now() < end) {
      if (!bpf.Poll(100).ok()) return 1;
    }
    (reading ? with : without).Add(before, *bpf.ReadPhaseSums());
  }
  const ember::BpfStats stats = bpf.ReadStats();
  Print("with context", with);
  Print("without", without);
  std::printf("reads: %llu ok, %llu none, %llu other\n",
              static_cast<unsigned long long>(stats.context_ok),
              static_cast<unsigned long long>(stats.context_none),
              static_cast<unsigned long long>(stats.context_invalid + stats.context_read_failed +
                                              stats.context_no_tls_block));
  helper.Signal(SIGKILL);
  return 0;
}
