// Stripped binaries named through a debuginfod server (issue 32): a GCC -O2 -g program stripped
// of its symbols and DWARF, whose debug file only a real `debuginfod` serves. The server runs in
// a network namespace of its own that has only a loopback interface, and the agent joins it
// (nsenter): it is reachable from nowhere else. The same binary profiled with --debuginfod-urls ""
// keeps unnamed frames, so the names come from the server.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "profiled_run.h"
#include "support/pprof_reader.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

using std::chrono::seconds;

constexpr char kFixtureDir[] = EMBER_DEBUGINFOD_FIXTURE_DIR;
constexpr char kBinaryName[] = "phases_stripped";
constexpr int kPort = 8002;
constexpr int kHz = 99;
const std::set<std::string> kLeaves = {"leaf_alpha", "leaf_beta", "leaf_gamma"};

std::string Binary() { return absl::StrCat(kFixtureDir, "/", kBinaryName); }

std::string ServerUrl() { return absl::StrCat("http://127.0.0.1:", kPort); }

std::string BuildIdOf(const std::string& path) {
  RunResult readelf = RunProgram({EMBER_READELF_BIN, "-n", path}, seconds(30));
  std::smatch match;
  static const std::regex kBuildId(R"(Build ID: ([0-9a-f]+))");
  return std::regex_search(readelf.output, match, kBuildId) ? match[1].str() : "";
}

// The network namespace of process `pid`, once it is not this process's own (it unshares its
// own after it starts); "" when that does not happen within 10 s.
std::string NetworkNamespaceOf(pid_t pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/ns/net");
  struct stat own;
  if (stat("/proc/self/ns/net", &own) != 0) return "";
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    struct stat other;
    if (stat(path.c_str(), &other) == 0 && other.st_ino != own.st_ino) return path;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "";
}

// Runs `work` on a thread that has joined the network namespace at `path`.
void InNetworkNamespace(const std::string& path, const std::function<void()>& work) {
  std::thread thread([&] {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << "cannot open " << path << ": " << std::strerror(errno);
    const int joined = setns(fd, CLONE_NEWNET);
    close(fd);
    ASSERT_EQ(joined, 0) << "setns: " << std::strerror(errno);
    work();
  });
  thread.join();
}

// Requests for the fixture's debug file the server answered, from its log.
int DebugFileRequests(const std::string& server_log, const std::string& build_id) {
  int requests = 0;
  const std::string path = absl::StrCat("GET /buildid/", build_id, "/debuginfo 200");
  for (size_t at = server_log.find(path); at != std::string::npos;
       at = server_log.find(path, at + 1)) {
    ++requests;
  }
  return requests;
}

// Every function name of the fixture binary's locations in the run's profiles, with the
// file:line of each of their lines.
std::map<std::string, std::set<std::string>> LinesOfFixtureFunctions(const std::string& dir) {
  std::map<std::string, std::set<std::string>> lines;
  for (const std::string& path : PprofFilesIn(dir)) {
    absl::StatusOr<perftools::profiles::Profile> profile = ReadPprofFile(path);
    if (!profile.ok()) continue;
    auto str = [&](int64_t index) { return profile->string_table(static_cast<int>(index)); };
    std::map<uint64_t, const perftools::profiles::Function*> functions;
    for (const auto& function : profile->function()) functions[function.id()] = &function;
    std::set<uint64_t> fixture_mappings;
    for (const auto& mapping : profile->mapping()) {
      if (absl::EndsWith(str(mapping.filename()), kBinaryName))
        fixture_mappings.insert(mapping.id());
    }
    for (const auto& location : profile->location()) {
      if (!fixture_mappings.contains(location.mapping_id())) continue;
      for (const auto& line : location.line()) {
        auto function = functions.find(line.function_id());
        if (function == functions.end()) continue;
        lines[str(function->second->name())].insert(
            absl::StrCat(str(function->second->filename()), ":", line.line()));
      }
    }
  }
  return lines;
}

// The status files of the threads of `pid` called `name`.
std::vector<std::string> ThreadsNamed(pid_t pid, const std::string& name) {
  std::vector<std::string> threads;
  // readdir, not directory_iterator: a thread that ends during the walk (the agent's short-lived
  // start-up threads) must not end it.
  DIR* tasks = opendir(absl::StrCat("/proc/", pid, "/task").c_str());
  if (tasks == nullptr) return threads;
  while (dirent* task = readdir(tasks)) {
    if (task->d_name[0] == '.') continue;
    const std::string dir = absl::StrCat("/proc/", pid, "/task/", task->d_name);
    std::ifstream comm(dir + "/comm");
    std::string thread_name;
    if (!std::getline(comm, thread_name) || thread_name != name) continue;
    std::ifstream status(dir + "/status");
    threads.emplace_back(std::istreambuf_iterator<char>(status), std::istreambuf_iterator<char>());
  }
  closedir(tasks);
  return threads;
}

class DebuginfodTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const char* tool : {EMBER_DEBUGINFOD_BIN, EMBER_UNSHARE_BIN, EMBER_NSENTER_BIN,
                             EMBER_IP_BIN, EMBER_READELF_BIN}) {
      // scripts/setup.sh installs them (debuginfod: Debian's package of that name).
      ASSERT_TRUE(*tool != '\0' && access(tool, X_OK) == 0)
          << "missing tool (debuginfod, unshare, nsenter, ip or readelf): '" << tool << "'";
    }
    build_id_ = new std::string(BuildIdOf(Binary()));
    ASSERT_FALSE(build_id_->empty()) << Binary() << " has no build id";
    const std::string state = MakeTempDir();
    ASSERT_FALSE(state.empty());
    // debuginfod scans the fixture directory (the stripped binary and its debug file) into its
    // own database; `ip` brings up the namespace's loopback interface, its only one.
    server_ = new Subprocess(
        {EMBER_UNSHARE_BIN, "--net", "--", "/bin/sh", "-c",
         absl::StrCat(EMBER_IP_BIN, " link set lo up && exec ", EMBER_DEBUGINFOD_BIN, " -p ", kPort,
                      " -d ", state, "/debuginfod.sqlite -t 0 -g 0 -F ", kFixtureDir)});
    const std::string netns = NetworkNamespaceOf(server_->pid());
    if (netns.empty()) server_->Wait(seconds(1));
    ASSERT_FALSE(netns.empty()) << "debuginfod did not start in a network namespace of its own:\n"
                                << server_->output();
    // Until it has indexed the debug file, bounded.
    bool served = false;
    InNetworkNamespace(netns, [&] {
      const std::string url = absl::StrCat(ServerUrl(), "/buildid/", *build_id_, "/debuginfo");
      const auto deadline = std::chrono::steady_clock::now() + seconds(60);
      while (!served && std::chrono::steady_clock::now() < deadline) {
        served = HttpGet(url).first == 200;
        if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    });
    server_->WaitForOutput("\n", std::chrono::milliseconds(100));
    ASSERT_TRUE(served) << "debuginfod did not serve the debug file within 60 s:\n"
                        << server_->output();
    const int requests_before = DebugFileRequests(server_->output(), *build_id_);

    AgentLaunch in_server_namespace{
        .argv = {EMBER_NSENTER_BIN, absl::StrCat("--net=", netns), "--", EMBER_AGENT_BIN}};
    // Once the agent has started all its threads: which are the fetchers, and what they hold.
    in_server_namespace.once_dropped = [](pid_t agent) {
      fetcher_threads_ = new std::vector<std::string>(ThreadsNamed(agent, "debuginfod"));
    };
    named_ = new ProfiledRun(ProfileFixture(
        {Binary(), "6"}, kHz, nullptr, SIGINT,
        {"--debuginfod-urls", ServerUrl(), "--debuginfod-cache-dir", state + "/cache"},
        in_server_namespace));
    server_->WaitForOutput("never printed", std::chrono::milliseconds(500));
    named_requests_ = DebugFileRequests(server_->output(), *build_id_) - requests_before;
    in_server_namespace.once_dropped = nullptr;
    unnamed_ = new ProfiledRun(
        ProfileFixture({Binary(), "4"}, kHz, nullptr, SIGINT,
                       {"--debuginfod-urls", "", "--debuginfod-cache-dir", state + "/cache_off"},
                       in_server_namespace));
    server_->WaitForOutput("never printed", std::chrono::milliseconds(500));
    unnamed_requests_ =
        DebugFileRequests(server_->output(), *build_id_) - requests_before - named_requests_;
    server_log_ = new std::string(server_->output());
    delete server_;  // kills it
    server_ = nullptr;
  }
  static void TearDownTestSuite() {
    delete server_;
    delete named_;
    delete unnamed_;
    delete build_id_;
    delete server_log_;
    delete fetcher_threads_;
  }

  static inline Subprocess* server_ = nullptr;
  static inline std::string* build_id_ = nullptr;
  static inline std::string* server_log_ = nullptr;
  static inline ProfiledRun* named_ = nullptr;
  static inline ProfiledRun* unnamed_ = nullptr;
  // The /proc/PID/task/TID/status of each fetcher thread of the named run.
  static inline std::vector<std::string>* fetcher_threads_ = nullptr;
  static inline int named_requests_ = 0;
  static inline int unnamed_requests_ = 0;
};

TEST_F(DebuginfodTest, FramesAreNamedWithTheirLinesFromTheServersDebugFile) {
  ASSERT_NE(named_, nullptr);
  const std::vector<NamedSample> samples = SamplesOf(named_->output_dir, named_->pid);
  int64_t total = 0;
  int64_t in_leaves = 0;
  int64_t reach_main = 0;
  int64_t unnamed_fixture_frames = 0;
  std::map<std::string, int64_t> leaf_counts;
  for (const NamedSample& s : samples) {
    total += s.count;
    if (!s.functions.empty() && kLeaves.contains(s.functions[0])) {
      in_leaves += s.count;
      leaf_counts[s.functions[0]] += s.count;
    }
    if (std::find(s.functions.begin(), s.functions.end(), "main") != s.functions.end()) {
      reach_main += s.count;
    }
    for (size_t i = 0; i < s.functions.size(); ++i) {
      if (absl::EndsWith(s.modules[i], kBinaryName) &&
          absl::StartsWith(s.functions[i], absl::StrCat(kBinaryName, "+0x"))) {
        unnamed_fixture_frames += s.count;
      }
    }
  }
  ExpectSamplesComplete(*named_, total);
  std::printf("%lld samples: %.1f%% in the three leaves, %.1f%% reach main\n",
              static_cast<long long>(total), 100 * Share(in_leaves, total),
              100 * Share(reach_main, total));
  // Every frame of the binary is named: those symbolized before the debug file arrived too.
  EXPECT_EQ(unnamed_fixture_frames, 0) << CommonStacks(
                                              samples, [](const NamedSample&) { return true; }, 10)
                                       << named_->agent_log;
  EXPECT_GE(Share(in_leaves, total), 0.9) << CommonStacks(
      samples, [](const NamedSample&) { return true; }, 10);
  EXPECT_GE(Share(reach_main, total), 0.98) << CommonStacks(
      samples, [](const NamedSample&) { return true; }, 10);

  // The leaves' shares are the program's own measure of them.
  std::map<std::string, double> measured_ns = MeasuredCpuNs(named_->fixture_output);
  ASSERT_EQ(measured_ns.size(), 3u) << named_->fixture_output;
  double measured_total = 0;
  for (const auto& [leaf, ns] : measured_ns) measured_total += ns;
  for (const auto& [leaf, ns] : measured_ns) {
    const double profiled = Share(leaf_counts[leaf], in_leaves);
    std::printf("%s: profile %.1f%%, program's own measure %.1f%%\n", leaf.c_str(), 100 * profiled,
                100 * ns / measured_total);
    EXPECT_NEAR(profiled, ns / measured_total, 0.05) << leaf;
  }

  // With the file and line of the fixture's source, from the debug file's DWARF.
  const std::map<std::string, std::set<std::string>> lines =
      LinesOfFixtureFunctions(named_->output_dir);
  for (const std::string function : {"leaf_alpha", "leaf_beta", "leaf_gamma", "run_phase"}) {
    auto found = lines.find(function);
    ASSERT_NE(found, lines.end()) << function << " is not in the profile";
    for (const std::string& line : found->second) {
      const std::string file = function == "run_phase" ? "phase_driver.h:" : "phases.c:";
      EXPECT_TRUE(absl::StrContains(line, file)) << function << " at " << line;
      EXPECT_FALSE(absl::EndsWith(line, ":0")) << function << " at " << line;
    }
  }
}

TEST_F(DebuginfodTest, TheDebugFileIsFetchedOnceAndFramesSeenBeforeAreNamedLate) {
  ASSERT_NE(named_, nullptr);
  EXPECT_EQ(named_requests_, 1) << *server_log_;
  std::smatch match;
  static const std::regex kSummary(
      R"(debuginfod: (\d+) debug file\(s\) fetched, \d+ not found, (\d+) error\(s\), (\d+) )"
      R"(timeout\(s\), (\d+) refused; (\d+) frame\(s\) named late; cache (\d+) bytes)");
  ASSERT_TRUE(std::regex_search(named_->agent_log, match, kSummary)) << named_->agent_log;
  EXPECT_EQ(std::stoll(match[1]), 1) << named_->agent_log;
  EXPECT_EQ(std::stoll(match[2]) + std::stoll(match[3]) + std::stoll(match[4]), 0)
      << named_->agent_log;
  // The first frames were symbolized while the file was on its way, and named when it came.
  EXPECT_GE(std::stoll(match[5]), 1) << named_->agent_log;
  EXPECT_GT(std::stoll(match[6]), 0) << named_->agent_log;
}

// The fetchers talk to the network: like the OTLP and pod-watch threads, they hold no capability.
TEST_F(DebuginfodTest, TheFetcherThreadsHoldNoCapability) {
  ASSERT_NE(fetcher_threads_, nullptr);
  EXPECT_EQ(fetcher_threads_->size(), 2u) << "--debuginfod-max-fetches is 2 by default";
  for (const std::string& status : *fetcher_threads_) {
    for (const char* set : {"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000",
                            "CapInh:\t0000000000000000", "Seccomp:\t2"}) {
      EXPECT_TRUE(absl::StrContains(status, set)) << set << " not in\n" << status;
    }
  }
}

TEST_F(DebuginfodTest, WithTheServerOffTheSameBinarysFramesStayUnnamed) {
  ASSERT_NE(unnamed_, nullptr);
  EXPECT_EQ(unnamed_requests_, 0) << *server_log_;
  EXPECT_FALSE(absl::StrContains(unnamed_->agent_log, "debuginfod:")) << unnamed_->agent_log;
  const std::vector<NamedSample> samples = SamplesOf(unnamed_->output_dir, unnamed_->pid);
  int64_t total = 0;
  int64_t unnamed_leaves = 0;
  for (const NamedSample& s : samples) {
    total += s.count;
    for (const std::string& function : s.functions) {
      EXPECT_FALSE(kLeaves.contains(function) || function == "run_phase" || function == "main")
          << function << " named without the debug file";
    }
    if (!s.functions.empty() && absl::EndsWith(s.modules[0], kBinaryName) &&
        absl::StartsWith(s.functions[0], absl::StrCat(kBinaryName, "+0x"))) {
      unnamed_leaves += s.count;
    }
  }
  ExpectSamplesComplete(*unnamed_, total);
  EXPECT_GE(Share(unnamed_leaves, total), 0.9) << CommonStacks(
      samples, [](const NamedSample&) { return true; }, 10);
}

}  // namespace
}  // namespace ember::testing
