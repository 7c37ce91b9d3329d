// Workloads built to bloat the agent: eight processes sharing one giant perf map, and four
// processes with fifteen thousand long-path mappings each. The agent keeps within its budgets,
// counts what it evicted or refused in /metrics, keeps naming the processes' code, and stops on
// time with exit 0.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "profiled_run.h"
#include "support/pprof_reader.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

using std::chrono::seconds;

// How long the workloads go on once the agent shows it met them (their perf maps read, their
// mappings counted), for their samples to be named and written.
constexpr int kRunOnSeconds = 8;

double MonotonicSeconds() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

// Workload processes forked from the test; killed and reaped if a test ends early.
class Workloads {
 public:
  Workloads()
      : stop_(static_cast<volatile int*>(
            mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0))) {}
  ~Workloads() {
    for (pid_t pid : pids_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    munmap(const_cast<int*>(stop_), 4096);
  }

  // Forks a process that runs `setup` (exit 2 when it returns false), then `spin` for a fifth
  // of its time until Stop, then exits 0. Running all the time, eight of them would starve the
  // agent of CPU on a small machine, as no real node is. Forked before the agent starts, so the
  // test has no other thread.
  pid_t Start(const std::function<bool()>& setup, void (*spin)(uint64_t)) {
    const pid_t pid = fork();
    if (pid == 0) {
      if (!setup()) _exit(2);
      constexpr double kLimit = 120;  // bounded even if the test dies without stopping it
      const double begin = MonotonicSeconds();
      while (*stop_ == 0 && MonotonicSeconds() - begin < kLimit) {
        const double slice = MonotonicSeconds();
        while (MonotonicSeconds() - slice < 0.002) spin(20000);
        usleep(8000);
      }
      _exit(0);
    }
    if (pid > 0) pids_.push_back(pid);
    return pid;
  }

  void Stop() { *stop_ = 1; }

  // Waits for every process to end (bounded); true when each exited 0.
  bool WaitAll(seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    bool ok = true;
    for (auto it = pids_.begin(); it != pids_.end();) {
      int status = 0;
      const pid_t done = waitpid(*it, &status, WNOHANG);
      if (done == *it) {
        ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
        it = pids_.erase(it);
      } else if (std::chrono::steady_clock::now() > deadline) {
        return false;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    return ok;
  }

  const std::vector<pid_t>& pids() const { return pids_; }

 private:
  volatile int* stop_;
  std::vector<pid_t> pids_;
};

// What one run of the agent showed: its /metrics page at the end, its peak RSS, how long it took
// to stop, and where its profiles are.
struct AgentRun {
  std::string metrics;
  uint64_t peak_rss_bytes = 0;
  double stop_seconds = 0;
  std::optional<int> exit_code;
  std::string output_dir;
  std::string log;
};

// Profiles `workloads` until /metrics shows `met` (bounded), then kRunOnSeconds more; reads the
// agent's metrics and peak RSS, stops the workloads, and then the agent with SIGINT.
AgentRun ProfileUntilTheyEnd(Workloads& workloads,
                             const std::function<bool(const std::string&)>& met,
                             const std::vector<std::string>& agent_args = {}) {
  AgentRun run;
  run.output_dir = MakeTempDir();
  EXPECT_FALSE(run.output_dir.empty());
  std::vector<std::string> argv = {EMBER_AGENT_BIN, "--sampling-hz",     "99", "--output-dir",
                                   run.output_dir,  "--export-interval", "1s", "--metrics-address",
                                   "127.0.0.1:0"};
  for (pid_t pid : workloads.pids()) {
    argv.push_back("--pid");
    argv.push_back(std::to_string(pid));
  }
  argv.insert(argv.end(), agent_args.begin(), agent_args.end());
  // With the chart's capabilities: the budgets must hold where the agent is deployed.
  Subprocess agent(WithTheChartsCapabilities(std::move(argv)));
  EXPECT_TRUE(agent.WaitForOutput("status endpoint", seconds(30))) << agent.output();
  const std::string endpoint = StatusEndpoint(agent.output());
  EXPECT_FALSE(endpoint.empty()) << agent.output();
  const auto deadline = std::chrono::steady_clock::now() + seconds(90);
  bool was_met = false;
  while (!endpoint.empty() && !was_met && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    was_met = met(HttpGet(endpoint + "/metrics").second);
  }
  EXPECT_TRUE(was_met) << "the agent did not get to the workloads in 90 s";
  std::this_thread::sleep_for(seconds(kRunOnSeconds));
  if (!endpoint.empty()) {
    auto [status, body] = HttpGet(endpoint + "/metrics");
    EXPECT_EQ(status, 200);
    run.metrics = body;
  }
  run.peak_rss_bytes = PeakRssBytes(agent.pid());
  workloads.Stop();
  EXPECT_TRUE(workloads.WaitAll(seconds(30))) << "a workload failed or hung";
  const auto stop = std::chrono::steady_clock::now();
  agent.Signal(SIGINT);
  run.exit_code = agent.Wait(seconds(30));
  run.stop_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stop).count();
  run.log = agent.output();
  return run;
}

double Metric(const AgentRun& run, const std::string& series) {
  std::optional<double> value = MetricValue(run.metrics, series);
  EXPECT_TRUE(value.has_value()) << series << " not in /metrics";
  return value.value_or(-1);
}

// The agent's own figures, for the log of a run.
void Report(const char* name, const AgentRun& run) {
  std::printf("%s: agent peak RSS %.1f MiB, stopped in %.2f s\n", name,
              static_cast<double>(run.peak_rss_bytes) / (1 << 20), run.stop_seconds);
  std::istringstream lines(run.metrics);
  for (std::string line; std::getline(lines, line);) {
    for (const char* prefix : {"ember_perf_map", "ember_mapping", "ember_samples_total",
                               "ember_heap", "process_resident"}) {
      if (line.rfind(prefix, 0) == 0) std::printf("  %s\n", line.c_str());
    }
  }
}

// Spins in code of this binary: samples land in a file-backed mapping.
__attribute__((noinline)) void SpinInOwnCode(uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) asm volatile("" : : "r"(i));
}

// --- Eight processes sharing one giant perf map ---

// x86-64: `mov rax, rdi; 1: dec rax; jnz 1b; ret` — a countdown loop, the "JIT code".
constexpr unsigned char kCountdown[] = {0x48, 0x89, 0xf8, 0x48, 0xff, 0xc8, 0x75, 0xfb, 0xc3};
// Where every process places it, so that one map names it in all of them: high, out of the way of
// AddressSanitizer's shadow memory in a sanitized build.
constexpr uint64_t kJitAddress = 0x500000000000;
constexpr int kPerfMapProcesses = 8;
constexpr char kJitName[] = "LazyCompile:*hostile_hot_loop /srv/app/hot.js:1:1";

bool PlaceJitCode() {
  void* code = mmap(reinterpret_cast<void*>(kJitAddress), 4096, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (code != reinterpret_cast<void*>(kJitAddress)) return false;
  std::memcpy(code, kCountdown, sizeof(kCountdown));
  return mprotect(code, 4096, PROT_READ | PROT_EXEC) == 0;
}

__attribute__((noinline)) void SpinInJitCode(uint64_t n) {
  reinterpret_cast<void (*)(uint64_t)>(kJitAddress)(n);
}

// `bytes` of entries elsewhere, then the one naming the hot loop (the newest: eviction keeps
// it).
void WritePerfMap(const std::string& path, uint64_t bytes) {
  std::ofstream map(path);
  uint64_t written = 0;
  for (uint64_t i = 0; written < bytes; ++i) {
    const std::string line = absl::StrFormat(
        "%x 80 LazyCompile:*generated_function_%07d /srv/app/node_modules/"
        "some-package/lib/module_%d.js:%d:%d\n",
        0x400000000000 + i * 0x100, i, i % 977, i % 4099, i % 83);
    map << line;
    written += line.size();
  }
  map << absl::StrFormat("%x 1000 %s\n", kJitAddress, kJitName);
}

// Eight processes running "JIT code" at kJitAddress, each with a perf map of `map_bytes`: all
// of them one file (hard links), or each its own. Profiled until `met`.
AgentRun ProfileJitProcesses(bool one_file, uint64_t map_bytes,
                             const std::function<bool(const std::string&)>& met,
                             const std::vector<std::string>& agent_args, std::vector<pid_t>* pids) {
  const std::string dir = MakeTempDir();
  EXPECT_FALSE(dir.empty());
  if (one_file) WritePerfMap(dir + "/shared.map", map_bytes);
  Workloads workloads;
  std::vector<std::string> maps;
  for (int i = 0; i < kPerfMapProcesses; ++i) {
    const pid_t pid = workloads.Start(PlaceJitCode, SpinInJitCode);
    EXPECT_GT(pid, 0);
    maps.push_back(absl::StrCat("/tmp/perf-", pid, ".map"));
    std::filesystem::remove(maps.back());
    if (one_file) {
      EXPECT_EQ(link((dir + "/shared.map").c_str(), maps.back().c_str()), 0) << maps.back();
    } else {
      WritePerfMap(maps.back(), map_bytes);
    }
  }
  *pids = workloads.pids();
  AgentRun run = ProfileUntilTheyEnd(workloads, met, agent_args);
  for (const std::string& path : maps) std::filesystem::remove(path);
  std::filesystem::remove_all(dir);
  return run;
}

// Every process's hot loop is named from its map: the newest entry outlives the evictions.
void ExpectJitNamed(const AgentRun& run, const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    int64_t named = 0;
    for (const NamedSample& sample : SamplesOf(run.output_dir, pid)) {
      if (!sample.functions.empty() && sample.functions.front() == kJitName) ++named;
    }
    EXPECT_GT(named, 0) << "pid " << pid << "\n"
                        << CommonStacks(
                               SamplesOf(run.output_dir, pid),
                               [](const NamedSample&) { return true; }, 5);
  }
}

TEST(HostileBudgetTest, EightProcessesSharingOneGiantPerfMap) {
#if !defined(__x86_64__)
  GTEST_FAIL() << "the JIT stand-in is x86-64 machine code";
#endif
  std::vector<pid_t> pids;
  // Some 87 MB of entries estimated: the map reaches its 64 MiB limit, once for all eight.
  AgentRun run = ProfileJitProcesses(
      /*one_file=*/true, uint64_t{60} << 20,
      [](const std::string& metrics) {
        return MetricValue(metrics, "ember_perf_map_entries_evicted_total").value_or(0) > 0;
      },
      {}, &pids);
  Report("8 processes x one 60 MB perf map", run);

  ASSERT_EQ(run.exit_code, 0) << run.log;
  EXPECT_LT(run.stop_seconds, 10) << run.log;
  // Read by each process for itself, the map took the agent over 540 MB and was still being
  // read after 90 s.
  EXPECT_LT(run.peak_rss_bytes, AgentPeakRssBound(uint64_t{300} << 20)) << run.log;
  EXPECT_GT(Metric(run, "ember_perf_map_entries_evicted_total"), 0) << run.metrics;
  // One copy, within one map's limit.
  EXPECT_LE(Metric(run, "ember_perf_map_bytes"), 64 << 20);
  EXPECT_GT(Metric(run, "ember_perf_map_bytes"), 16 << 20);
  ExpectJitNamed(run, pids);
  std::filesystem::remove_all(run.output_dir);
}

TEST(HostileBudgetTest, EightProcessesWithAPerfMapEachOverTheTotal) {
#if !defined(__x86_64__)
  GTEST_FAIL() << "the JIT stand-in is x86-64 machine code";
#endif
  std::vector<pid_t> pids;
  // Eight maps of 8 MB, some 11 MB estimated each, under limits scaled down from the defaults'
  // (64 MiB each, 256 MiB together) so that the test reads little: each map reaches its own
  // limit, and together they would hold twice the total.
  AgentRun run = ProfileJitProcesses(
      /*one_file=*/false, uint64_t{8} << 20,
      [](const std::string& metrics) {
        return MetricValue(metrics, "ember_perf_map_budget_evictions_total").value_or(0) > 0;
      },
      {"--max-perf-map-bytes=4MiB", "--max-perf-map-total-bytes=16MiB"}, &pids);
  Report("8 processes x own 8 MB perf map, 16 MiB in all", run);

  ASSERT_EQ(run.exit_code, 0) << run.log;
  EXPECT_LT(run.stop_seconds, 10) << run.log;
  EXPECT_LT(run.peak_rss_bytes, AgentPeakRssBound(uint64_t{200} << 20)) << run.log;
  EXPECT_GT(Metric(run, "ember_perf_map_budget_evictions_total"), 0) << run.metrics;
  EXPECT_GT(Metric(run, "ember_perf_map_entries_evicted_total"), 0);
  EXPECT_LE(Metric(run, "ember_perf_map_bytes"), 16 << 20);
  EXPECT_GT(Metric(run, "ember_perf_map_bytes"), 4 << 20);
  ExpectJitNamed(run, pids);
  std::filesystem::remove_all(run.output_dir);
}

// --- Four processes with fifteen thousand long-path mappings each ---

constexpr int kMappingProcesses = 4;
constexpr int kMappingsEach = 15000;
constexpr uint64_t kMappingBase = 0x510000000000;

// A file at a path of about 3000 bytes (twelve directories of 250), so that the maps file of each
// process is some 46 MB.
std::string MakeLongPathFile(const std::string& dir) {
  std::string path = dir;
  for (int i = 0; i < 12; ++i) {
    path += "/" + std::string(249, static_cast<char>('a' + i));
    if (mkdir(path.c_str(), 0755) != 0) return "";
  }
  path += "/libhostile.so";
  std::ofstream(path) << std::string(4096, '\0');
  return path;
}

std::string long_path_file;  // set before the workloads fork

bool MapManyTimes() {
  const int fd = open(long_path_file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  for (int i = 0; i < kMappingsEach; ++i) {
    // A page apart: mappings of one file at the same offset would not merge anyway; the gap
    // makes sure of it.
    void* want = reinterpret_cast<void*>(kMappingBase + uint64_t{0x2000} * i);
    if (mmap(want, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED_NOREPLACE, fd, 0) != want) {
      return false;
    }
  }
  close(fd);
  return true;
}

TEST(HostileBudgetTest, FourProcessesWithFifteenThousandLongPathMappings) {
  const std::string dir = MakeTempDir();
  ASSERT_FALSE(dir.empty());
  long_path_file = MakeLongPathFile(dir);
  ASSERT_FALSE(long_path_file.empty());
  ASSERT_GT(long_path_file.size(), 3000u);
  Workloads workloads;
  for (int i = 0; i < kMappingProcesses; ++i) {
    ASSERT_GT(workloads.Start(MapManyTimes, SpinInOwnCode), 0);
  }
  const std::vector<pid_t> pids = workloads.pids();
  // Every one is mapped before the agent reads it.
  std::this_thread::sleep_for(seconds(1));
  for (pid_t pid : pids) {
    std::ifstream maps(absl::StrCat("/proc/", pid, "/maps"));
    int lines = 0;
    for (std::string line; std::getline(maps, line);) lines += line.find("libhostile") != line.npos;
    ASSERT_EQ(lines, kMappingsEach) << "pid " << pid;
  }
  AgentRun run = ProfileUntilTheyEnd(workloads, [](const std::string& metrics) {
    return MetricValue(metrics, "ember_mapping_long_paths_total").value_or(0) >=
           kMappingProcesses * kMappingsEach;
  });
  Report("4 processes x 15000 long-path mappings", run);

  ASSERT_EQ(run.exit_code, 0) << run.log;
  EXPECT_LT(run.stop_seconds, 10) << run.log;
  // Kept whole, the mappings took the agent from 195 MB to 494 MB and rising.
  EXPECT_LT(run.peak_rss_bytes, AgentPeakRssBound(uint64_t{150} << 20)) << run.log;
  // Each read of each process's maps refuses every long path and drops what is over the count.
  EXPECT_GE(Metric(run, "ember_mapping_long_paths_total"), kMappingProcesses * kMappingsEach)
      << run.metrics;
  EXPECT_GE(Metric(run, "ember_mappings_dropped_total"),
            kMappingProcesses * (kMappingsEach - 4096));
  EXPECT_LE(Metric(run, "ember_mapping_bytes"), 64 << 20);

  // Their own code stays named: the program's mappings are kept first.
  for (pid_t pid : pids) {
    int64_t named = 0;
    for (const NamedSample& sample : SamplesOf(run.output_dir, pid)) {
      if (!sample.functions.empty() &&
          sample.functions.front().find("SpinInOwnCode") != std::string::npos) {
        ++named;
      }
    }
    EXPECT_GT(named, 0) << "pid " << pid << "\n"
                        << CommonStacks(
                               SamplesOf(run.output_dir, pid),
                               [](const NamedSample&) { return true; }, 5);
  }
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(run.output_dir);
}

}  // namespace
}  // namespace ember::testing
