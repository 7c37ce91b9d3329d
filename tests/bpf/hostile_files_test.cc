// Hostile files (issue 31): a workload controls the paths of the files it maps and what sits at
// them. With the Helm chart's capabilities (no CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE, so no
// /proc/PID/map_files), the agent opens a file by its path under the process's root: a FIFO put
// there, a .gnu_debuglink naming a FIFO or a path out of the directory, a container's library
// swapped for a link to a host file must neither stall its loop nor get a host file read for the
// container. The agent ends on time, keeps sampling, and counts each refusal on /metrics.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "profiled_run.h"
#include "runc_container.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;

const std::string kPhases = EMBER_PHASES_BIN;
const std::string kSpinLib = EMBER_SPIN_LIB;
const std::string kSpinLoader = EMBER_SPIN_LOADER_BIN;

class TempDir {
 public:
  TempDir() : path_(MakeTempDir()) {}
  ~TempDir() {
    std::error_code error;
    fs::remove_all(path_, error);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The agent on `pids` at 99 Hz, 1 s intervals, for at most `duration_s`. (Only the test's
// processes: on a shared machine every process may include other suites' giant perf maps.)
struct ChartAgent {
  ChartAgent(const std::string& output_dir, int duration_s, const std::vector<pid_t>& pids) {
    std::vector<std::string> argv = {EMBER_AGENT_BIN,
                                     "--sampling-hz",
                                     "99",
                                     "--export-interval",
                                     "1s",
                                     "--duration",
                                     absl::StrCat(duration_s, "s"),
                                     "--output-dir",
                                     output_dir,
                                     "--metrics-address",
                                     "127.0.0.1:0"};
    for (pid_t pid : pids) {
      argv.push_back("--pid");
      argv.push_back(std::to_string(pid));
    }
    process = std::make_unique<Subprocess>(WithTheChartsCapabilities(std::move(argv)));
    ready = process->WaitForOutput("status endpoint", seconds(30));
    endpoint = StatusEndpoint(process->output());
  }
  std::string Metrics() const { return HttpGet(endpoint + "/metrics").second; }
  // SIGINT, as a container runtime stops it: the agent writes its last interval and exits 0 in
  // a few seconds. Its peak RSS is read first, while it runs.
  std::optional<int> Stop() {
    peak_rss = PeakRssBytes(process->pid());
    process->Signal(SIGINT);
    return process->Wait(seconds(15));
  }
  // Nothing here is big: profiling a few processes, the agent stays near 60 MB.
  void ExpectStayedSmall() const {
    EXPECT_GT(peak_rss, 0u);
    EXPECT_LT(peak_rss, AgentPeakRssBound(uint64_t{256} << 20))
        << "agent peak RSS " << (peak_rss >> 10) << " kB";
  }

  std::unique_ptr<Subprocess> process;
  uint64_t peak_rss = 0;
  bool ready = false;
  std::string endpoint;
};

double Refusals(const std::string& metrics, const std::string& reason) {
  return MetricValue(metrics,
                     absl::StrCat("ember_file_open_refusals_total{reason=\"", reason, "\"}"))
      .value_or(-1);
}

bool Named(const std::string& dir, int64_t pid, const std::string& function) {
  for (const NamedSample& s : SamplesOf(dir, pid)) {
    if (std::find(s.functions.begin(), s.functions.end(), function) != s.functions.end()) {
      return true;
    }
  }
  return false;
}

int64_t Total(const std::vector<NamedSample>& samples) {
  int64_t total = 0;
  for (const NamedSample& s : samples) total += s.count;
  return total;
}

bool WaitUntil(milliseconds timeout, const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(100));
  }
  return true;
}

void Run(const std::vector<std::string>& argv) {
  RunResult result = RunProgram(argv, seconds(30));
  ASSERT_EQ(result.exit_code, 0) << absl::StrJoin(argv, " ") << "\n" << result.output;
}

// A copy of the spin library without DWARF whose .gnu_debuglink section names `link` (any
// bytes, as a hostile binary may carry), so the agent looks for its debug file.
void WriteWithDebugLink(const std::string& to, const std::string& link, const TempDir& dir) {
  std::string section = link;
  section.push_back('\0');
  while (section.size() % 4 != 0) section.push_back('\0');
  section.append("\x12\x34\x56\x78", 4);  // a CRC no file has
  const std::string blob = dir / (fs::path(to).filename().string() + ".section");
  std::ofstream(blob, std::ios::binary) << section;
  Run({"/usr/bin/objcopy", "--strip-debug", "--add-section", ".gnu_debuglink=" + blob, kSpinLib,
       to});
}

TEST(HostileFilesTest, FifosAtLibraryAndDebugLinkPathsNeitherStallNorCount) {
  TempDir dir;
  TempDir out;
  // (a) a library unlinked after it was mapped and a FIFO put at its path; (b) the same with a
  // Python interpreter's name, which the agent inspects as one.
  const std::string unlinked = dir / "libspin-unlinked.so";
  const std::string python = dir / "libpython3.11.so";
  // (c) libraries without DWARF whose .gnu_debuglink names a FIFO next to them, a path up out of
  // their directory, and an absolute path.
  const std::string fifo_link = dir / "libspin-fifo-link.so";
  const std::string up_link = dir / "libspin-up-link.so";
  const std::string absolute_link = dir / "libspin-absolute-link.so";
  fs::copy_file(kSpinLib, unlinked);
  fs::copy_file(kSpinLib, python);
  ASSERT_NO_FATAL_FAILURE(WriteWithDebugLink(fifo_link, "spin-fifo.debug", dir));
  ASSERT_NO_FATAL_FAILURE(WriteWithDebugLink(up_link, "../../../../etc/passwd", dir));
  ASSERT_NO_FATAL_FAILURE(WriteWithDebugLink(absolute_link, "/etc/passwd", dir));
  ASSERT_EQ(mkfifo((dir / "spin-fifo.debug").c_str(), 0600), 0);

  Subprocess steady({kPhases, "30"});
  steady.WriteStdin("g");
  std::vector<std::unique_ptr<Subprocess>> loaders;
  for (const std::string& library : {unlinked, python, fifo_link, up_link, absolute_link}) {
    loaders.push_back(
        std::make_unique<Subprocess>(std::vector<std::string>{kSpinLoader, library, "4"}));
    ASSERT_TRUE(loaders.back()->WaitForOutput("loaded", seconds(10))) << loaders.back()->output();
  }
  for (const std::string& library : {unlinked, python}) {
    fs::remove(library);
    ASSERT_EQ(mkfifo(library.c_str(), 0600), 0);
  }

  constexpr int kDuration = 30;  // an upper bound: the test stops it with SIGINT
  std::vector<pid_t> pids = {steady.pid()};
  for (auto& loader : loaders) pids.push_back(loader->pid());
  ChartAgent agent(out.path(), kDuration, pids);
  ASSERT_TRUE(agent.ready) << agent.process->output();
  const auto started = std::chrono::steady_clock::now();
  for (auto& loader : loaders) loader->WriteStdin("g");
  // The libraries with a bad debuglink still name their code from their own symbol table; the
  // steady fixture is named throughout.
  auto all_named = [&] {
    return Named(out.path(), steady.pid(), "run_phases") &&
           Named(out.path(), loaders[2]->pid(), "spin_lib_first") &&
           Named(out.path(), loaders[3]->pid(), "spin_lib_first") &&
           Named(out.path(), loaders[4]->pid(), "spin_lib_first");
  };
  WaitUntil(seconds(15), all_named);
  const std::string metrics = agent.Metrics();
  const std::optional<int> exit_code = agent.Stop();
  const auto stopped = std::chrono::steady_clock::now();
  const std::string& log = agent.process->output();
  EXPECT_TRUE(Named(out.path(), steady.pid(), "run_phases")) << log;
  for (int i : {2, 3, 4}) {
    EXPECT_TRUE(Named(out.path(), loaders[i]->pid(), "spin_lib_first"))
        << "loader " << i << " unnamed\n"
        << log;
  }
  ASSERT_EQ(exit_code, 0) << log;
  EXPECT_LT(stopped - started, seconds(kDuration - 5)) << "it ran to --duration: SIGINT unheard";
  agent.ExpectStayedSmall();

  // Each FIFO at a mapped path is refused by the ELF reader, the unwinder or the Python check:
  // at least one refusal for each of the three FIFOs; both bad links are refused by name.
  EXPECT_GE(Refusals(metrics, "not_regular"), 3) << metrics;
  EXPECT_GE(Refusals(metrics, "bad_debuglink"), 2) << metrics;
  // The processes at the FIFOs kept being sampled, their library's frames unnamed.
  for (int i : {0, 1}) {
    std::vector<NamedSample> samples = SamplesOf(out.path(), loaders[i]->pid());
    EXPECT_GT(Total(samples), 0) << "no sample of loader " << i << "\n" << log;
    EXPECT_FALSE(Named(out.path(), loaders[i]->pid(), "spin_lib_first"));
  }
}

const std::vector<std::string> kBusyLoop = {"/bin/busybox", "sh", "-c", "while :; do :; done"};

// (d) A container swaps its binary, after it was mapped, for an absolute link to a host file: a
// big ELF with C++ symbols (the agent itself), where the host's namespace would resolve it. Under
// the container's root the link names the container's own file at that path, not the mapped one.
TEST(HostileFilesTest, AContainersLinkToAHostFileIsNotFollowedOutOfItsRoot) {
  TempDir dir;
  TempDir out;
  const std::string id = RandomContainerId();
  std::unique_ptr<RuncContainer> container = RuncContainer::Start(
      dir / "container", id, KubepodsCgroupPath(RandomPodUid(), id), kBusyLoop);
  ASSERT_NE(container, nullptr);
  const std::string rootfs = dir / "container/bundle/rootfs";
  const std::string host_file = fs::canonical(EMBER_AGENT_BIN).string();
  fs::remove(rootfs + "/bin/busybox");  // the running binary: mapped, now unlinked
  fs::create_symlink(host_file, rootfs + "/bin/busybox");
  // The container's own file at the host file's path: another file than the one it mapped.
  fs::create_directories(fs::path(rootfs + host_file).parent_path());
  std::ofstream(rootfs + host_file) << "not the mapped binary";

  ChartAgent agent(out.path(), 30, {container->pid()});
  ASSERT_TRUE(agent.ready) << agent.process->output();
  // A few intervals sampled and symbolized.
  WaitUntil(seconds(10), [&] { return Total(SamplesOf(out.path(), container->pid())) > 20; });
  const std::string metrics = agent.Metrics();
  const std::optional<int> exit_code = agent.Stop();
  const std::string& log = agent.process->output();
  ASSERT_EQ(exit_code, 0) << log;
  agent.ExpectStayedSmall();
  EXPECT_GT(Total(SamplesOf(out.path(), container->pid())), 20) << log;
  EXPECT_GE(Refusals(metrics, "identity_mismatch"), 1) << metrics;
  // No frame of the container is named from the host file (C++ symbols; busybox has none).
  for (const NamedSample& s : SamplesOf(out.path(), container->pid())) {
    for (const std::string& function : s.functions) {
      EXPECT_FALSE(absl::StrContains(function, "::")) << function;
    }
  }
}

}  // namespace
}  // namespace ember::testing
