// The agent under faults it must ride out, end to end: its output directory's file system full
// for a while, and its profiling loop stalled long enough for the ring buffer to fill and for
// /readyz and then /healthz to say so. It keeps running, counts what it lost in /metrics, and
// afterwards goes on as before.
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "profiled_run.h"
#include "support/pprof_reader.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Polls /metrics until `series` reaches at least `at_least`, for up to `timeout`; its last value.
std::optional<double> WaitForMetric(const std::string& endpoint, const std::string& series,
                                    double at_least, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::optional<double> value;
  while (true) {
    value = MetricValue(HttpGet(endpoint + "/metrics").second, series);
    if ((value && *value >= at_least) || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(200));
  }
  return value;
}

// The samples the agent said it could not write: "interval of N samples lost: ..." lines.
int64_t SamplesInLostIntervals(const std::string& agent_log) {
  static const std::regex kLost(R"(interval of (\d+) samples lost: )");
  int64_t lost = 0;
  for (auto it = std::sregex_iterator(agent_log.begin(), agent_log.end(), kLost);
       it != std::sregex_iterator(); ++it) {
    lost += std::stoll((*it)[1]);
  }
  return lost;
}

// A tmpfs of 1 MiB mounted on a fresh directory for the test's life, and a file that fills it.
class SmallFilesystem {
 public:
  SmallFilesystem() : dir_(MakeTempDir()) {
    mounted_ = !dir_.empty() && mount("tmpfs", dir_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
                                      "size=1m,mode=0700") == 0;
  }
  ~SmallFilesystem() {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
    std::filesystem::remove_all(dir_);
  }
  bool mounted() const { return mounted_; }
  const std::string& dir() const { return dir_; }
  // Writes a filler file until the file system has no block left: true when it is full.
  bool Fill() {
    int fd = open(filler().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    std::vector<char> block(4096, 'x');
    ssize_t written = 0;
    while ((written = write(fd, block.data(), block.size())) > 0) {
    }
    const bool full = written < 0 && errno == ENOSPC;
    close(fd);
    return full;
  }
  void Free() { std::filesystem::remove(filler()); }

 private:
  std::string filler() const { return dir_ + "/filler"; }
  std::string dir_;
  bool mounted_ = false;
};

// A full disk loses the intervals that come due meanwhile, each counted, and nothing else: the
// agent keeps sampling, leaves no partial file, writes again once there is room, and accounts
// for every sample either in a file or in a "lost" line.
TEST(FullDiskTest, IntervalsLostWhileTheDiskIsFullAreCountedAndWritingResumes) {
  SmallFilesystem disk;
  ASSERT_TRUE(disk.mounted()) << "mounting a tmpfs: " << strerror(errno);
  constexpr int kHz = 99;
  Subprocess fixture({EMBER_PHASES_BIN, "9"});
  Subprocess agent({EMBER_AGENT_BIN, "--pid", std::to_string(fixture.pid()), "--sampling-hz",
                    std::to_string(kHz), "--export-interval", "1s", "--output-dir", disk.dir(),
                    "--metrics-address", "127.0.0.1:0"});
  ASSERT_TRUE(agent.WaitForOutput("status endpoint: ", seconds(15))) << agent.output();
  const std::string endpoint = StatusEndpoint(agent.output());
  ASSERT_FALSE(endpoint.empty()) << agent.output();
  ASSERT_TRUE(disk.Fill());
  fixture.WriteStdin("g");
  // Three intervals come due on the full disk.
  const std::optional<double> failures =
      WaitForMetric(endpoint, "ember_output_write_failures_total", 3, seconds(20));
  EXPECT_GE(failures.value_or(0), 3) << agent.output();
  EXPECT_EQ(HttpGet(endpoint + "/healthz").first, 200);
  disk.Free();
  const std::optional<double> written_before =
      MetricValue(HttpGet(endpoint + "/metrics").second, "ember_pprof_files_written_total");
  EXPECT_EQ(fixture.Wait(seconds(60)), 0) << fixture.output();
  agent.Signal(SIGINT);
  ASSERT_EQ(agent.Wait(seconds(30)), 0) << agent.output();
  const std::string log = agent.output();
  ExpectNoSampleLost(log);

  // Written again once there was room: the intervals after, the last one and the flame graph.
  std::vector<std::string> files = PprofFilesIn(disk.dir());
  EXPECT_GE(files.size(), static_cast<size_t>(written_before.value_or(0)) + 2) << log;
  EXPECT_TRUE(std::filesystem::exists(disk.dir() + "/flamegraph.html")) << log;
  // Nothing half written is left: every file there is a whole profile (SamplesOf reads each).
  for (const auto& entry : std::filesystem::directory_iterator(disk.dir())) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(absl::EndsWith(name, ".pb.gz") || name == "flamegraph.html") << name;
  }
  int64_t in_files = 0;
  for (const NamedSample& s : SamplesOf(disk.dir(), fixture.pid())) in_files += s.count;
  const int64_t in_lost_intervals = SamplesInLostIntervals(log);
  EXPECT_GT(in_lost_intervals, 0) << log;
  std::smatch done;
  ASSERT_TRUE(std::regex_search(log, done, std::regex(R"((\d+) write failure\(s\))"))) << log;
  EXPECT_GE(std::stoi(done[1]), 3) << log;
  ASSERT_TRUE(fixture.cpu_time().has_value());
  ExpectSamplesForCpuTime(in_files + in_lost_intervals, fixture.cpu_time()->count() / 1e6, kHz,
                          log);
}

// Stops the agent's profiling loop (its main thread) with ptrace while its other threads, the
// status endpoint's among them, go on; resumes it when destroyed.
class StoppedThread {
 public:
  explicit StoppedThread(pid_t tid) : tid_(tid) {
    if (ptrace(PTRACE_SEIZE, tid_, nullptr, nullptr) != 0) return;
    int status = 0;
    stopped_ = ptrace(PTRACE_INTERRUPT, tid_, nullptr, nullptr) == 0 &&
               waitpid(tid_, &status, __WALL) == tid_ && WIFSTOPPED(status);
  }
  ~StoppedThread() { Resume(); }
  bool stopped() const { return stopped_; }
  void Resume() {
    if (tid_ > 0) ptrace(PTRACE_DETACH, tid_, nullptr, nullptr);
    tid_ = -1;
  }

 private:
  pid_t tid_;
  bool stopped_ = false;
};

// Waits for a byte on stdin, then spins for 20 s at the bottom of 400 nested shell function
// calls: bash's C stack is a few hundred KiB deep there.
const std::vector<std::string> kDeepStackSpin = {
    "/bin/bash", "-c",
    "read -r -n1 go; f() { if [ \"$1\" -gt 0 ]; then f $(($1 - 1)); else "
    "end=$((SECONDS + 20)); while [ $SECONDS -lt $end ]; do :; done; fi; }; f 400"};

// A busy process per CPU, sampled while the loop stands still: the ring buffer fills and the
// kernel side drops what does not fit, which the agent counts once it runs again. The ring is
// sized for 2.5 s of samples at a budget per record (a quarter of the snapshot limit); these
// records are four times that (no BPF unwinding, so each carries a 64 KiB snapshot of the deep
// stack), so it fills within a second of their CPU time. Meanwhile /readyz fails after 15 s of
// stall and /healthz after 60 s; both pass again once the loop runs.
TEST(StalledLoopTest, ProbesFailAndTheFullRingBufferIsCountedThenTheAgentGoesOn) {
  constexpr int kHz = 19;
  const long cpus = std::max(2L, sysconf(_SC_NPROCESSORS_ONLN));
  std::vector<std::unique_ptr<Subprocess>> busy;
  for (long i = 0; i < cpus; ++i) busy.push_back(std::make_unique<Subprocess>(kDeepStackSpin));
  const std::string dir = MakeTempDir();
  std::vector<std::string> argv = {EMBER_AGENT_BIN,
                                   "--sampling-hz",
                                   std::to_string(kHz),
                                   "--export-interval",
                                   "2s",
                                   "--bpf-unwind-rows",
                                   "0",
                                   "--stack-snapshot-bytes",
                                   "65536",
                                   "--output-dir",
                                   dir,
                                   "--metrics-address",
                                   "127.0.0.1:0"};
  for (const auto& process : busy) {
    argv.push_back("--pid");
    argv.push_back(std::to_string(process->pid()));
  }
  Subprocess agent(argv);
  ASSERT_TRUE(agent.WaitForOutput("status endpoint: ", seconds(15))) << agent.output();
  const std::string endpoint = StatusEndpoint(agent.output());
  ASSERT_FALSE(endpoint.empty()) << agent.output();
  EXPECT_EQ(HttpGet(endpoint + "/healthz").first, 200);
  EXPECT_EQ(HttpGet(endpoint + "/readyz").first, 200);

  const auto stalled_at = std::chrono::steady_clock::now();
  {
    StoppedThread loop(agent.pid());
    ASSERT_TRUE(loop.stopped()) << "ptrace: " << strerror(errno);
    for (const auto& process : busy) process->WriteStdin("g");
    for (const auto& process : busy) EXPECT_EQ(process->Wait(seconds(60)), 0) << process->output();
    std::this_thread::sleep_until(stalled_at + seconds(17));
    auto [ready, ready_body] = HttpGet(endpoint + "/readyz");
    EXPECT_EQ(ready, 503) << ready_body;
    EXPECT_TRUE(absl::StrContains(ready_body, "the profiling loop has not run for")) << ready_body;
    EXPECT_EQ(HttpGet(endpoint + "/healthz").first, 200) << "liveness allows 60 s";
    std::this_thread::sleep_until(stalled_at + seconds(62));
    auto [live, live_body] = HttpGet(endpoint + "/healthz");
    EXPECT_EQ(live, 503) << live_body;
    EXPECT_TRUE(absl::StrContains(live_body, "the profiling loop has not run for")) << live_body;
  }
  // Counted at the next export, 2 s on.
  const std::optional<double> lost =
      WaitForMetric(endpoint, "ember_samples_lost_total", 1, seconds(15));
  EXPECT_GT(lost.value_or(0), 0) << agent.output();
  EXPECT_EQ(HttpGet(endpoint + "/healthz").first, 200);
  EXPECT_EQ(HttpGet(endpoint + "/readyz").first, 200);
  agent.Signal(SIGINT);
  ASSERT_EQ(agent.Wait(seconds(30)), 0) << agent.output();
  const std::string log = agent.output();
  EXPECT_TRUE(absl::StrContains(log, "samples lost: ring buffer full")) << log;
  std::optional<AgentDone> done = AgentDoneLine(log);
  ASSERT_TRUE(done.has_value()) << log;
  EXPECT_EQ(static_cast<double>(done->lost), lost.value_or(-1)) << log;
  // Every sample the kernel took is in a file or counted lost.
  int64_t in_files = 0;
  double cpu_seconds = 0;
  for (const auto& process : busy) {
    for (const NamedSample& s : SamplesOf(dir, process->pid())) in_files += s.count;
    ASSERT_TRUE(process->cpu_time().has_value());
    cpu_seconds += process->cpu_time()->count() / 1e6;
  }
  std::printf("[   INFO   ] %lld samples written, %lld lost\n", static_cast<long long>(in_files),
              static_cast<long long>(done->lost));
  ExpectSamplesForCpuTime(in_files + done->lost, cpu_seconds, kHz, log);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ember::testing
