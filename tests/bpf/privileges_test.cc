// ember-agent run as nobody with only the capabilities docs/capabilities.md lists: it profiles a
// root process, keeps only what symbolization needs and on its sampling thread alone (every
// network thread holds none), runs under its own seccomp filter, and names any required
// capability it lacks.
#include <linux/capability.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "profiled_run.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

constexpr int kCapCheckpointRestore = 40;
constexpr uint64_t kKeptAsNobody = (1ull << CAP_SYS_PTRACE) | (1ull << CAP_DAC_READ_SEARCH);

// Whether this process holds `cap` in its permitted set.
bool Holds(int cap) {
  std::ifstream status("/proc/self/status");
  std::string line;
  uint64_t permitted = 0;
  while (std::getline(status, line)) {
    if (line.rfind("CapPrm:", 0) == 0 && !absl::SimpleHexAtoi(line.substr(7), &permitted)) {
      permitted = 0;
    }
  }
  return (permitted >> cap) & 1;
}

// The set docs/capabilities.md documents, which the Helm chart and the systemd unit grant
// (setpriv's names). CAP_SYS_RESOURCE only matters before Linux 5.11, and some hosts (the project
// machine) withhold it even from root: it is granted only where the test holds it.
std::vector<std::string> Documented() {
  std::vector<std::string> caps = {"bpf",    "perfmon", "sys_ptrace", "dac_read_search",
                                   "syslog", "setpcap"};
  if (Holds(CAP_SYS_RESOURCE)) caps.push_back("sys_resource");
  return caps;
}

// A directory user nobody can enter, with a copy of the agent it can run (the build tree may sit
// in a directory only root can read).
class AgentCopy {
 public:
  AgentCopy() : dir_(MakeTempDir()) {
    fs::permissions(dir_, fs::perms::owner_all | fs::perms::others_exec | fs::perms::group_exec);
    agent_ = dir_ + "/ember-agent";
    fs::copy_file(EMBER_AGENT_BIN, agent_);
    fs::permissions(agent_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);
    fs::create_directory(out());
    fs::permissions(out(), fs::perms::all);
  }
  ~AgentCopy() { fs::remove_all(dir_); }
  // An output directory the agent can write as nobody.
  std::string out() const { return dir_ + "/out"; }

  // setpriv running the agent as nobody with exactly `caps` (inheritable, ambient, bounding).
  std::vector<std::string> AsNobodyWith(const std::vector<std::string>& caps) const {
    std::string set = "-all";
    for (const std::string& cap : caps) set += ",+" + cap;
    return {"/usr/bin/setpriv",  "--reuid=65534",         "--regid=65534",         "--clear-groups",
            "--inh-caps=" + set, "--ambient-caps=" + set, "--bounding-set=" + set, agent_};
  }

 private:
  std::string dir_;
  std::string agent_;
};

std::vector<std::string> Without(std::vector<std::string> caps, const std::string& cap) {
  caps.erase(std::find(caps.begin(), caps.end(), cap));
  return caps;
}

// The "Key:\tvalue" lines of a /proc/.../status file.
std::map<std::string, std::string> StatusFields(const std::string& path) {
  std::map<std::string, std::string> fields;
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    size_t value = line.find_first_not_of(" \t", colon + 1);
    fields[line.substr(0, colon)] = value == std::string::npos ? "" : line.substr(value);
  }
  return fields;
}

uint64_t Hex(const std::string& text) {
  uint64_t value = 0;
  EXPECT_TRUE(absl::SimpleHexAtoi(text, &value)) << text;
  return value;
}

// Only the main thread of `pid` (the sampling loop) holds `kept`, in its effective and permitted
// sets; every other thread (the network I/O) holds nothing in either. Every thread has the
// bounding set cut to `kept`, nothing inheritable or ambient, no_new_privs and the agent's
// seccomp filter. Returns how many threads other than the main one there were.
int ExpectOnlySamplingThreadKeeps(pid_t pid, uint64_t kept) {
  int others = 0;
  std::string names;
  for (const fs::directory_entry& task :
       fs::directory_iterator(absl::StrCat("/proc/", pid, "/task"))) {
    std::map<std::string, std::string> status = StatusFields(task.path().string() + "/status");
    const std::string tid = task.path().filename().string();
    SCOPED_TRACE(absl::StrCat("thread ", tid, " (", status["Name"], ")"));
    const bool sampling = tid == std::to_string(pid);
    if (!sampling) {
      ++others;
      names += " " + status["Name"];
    }
    EXPECT_EQ(Hex(status["CapEff"]), sampling ? kept : 0u);
    EXPECT_EQ(Hex(status["CapPrm"]), sampling ? kept : 0u);
    EXPECT_EQ(Hex(status["CapBnd"]), kept);
    EXPECT_EQ(Hex(status["CapInh"]), 0u);
    EXPECT_EQ(Hex(status["CapAmb"]), 0u);
    EXPECT_EQ(status["NoNewPrivs"], "1");
    EXPECT_EQ(status["Seccomp"], "2");
    EXPECT_GE(std::atoi(status["Seccomp_filters"].c_str()), 1);
  }
  std::printf("main thread and %d others checked:%s\n", others, names.c_str());
  return others;
}

int64_t CountWith(const std::vector<NamedSample>& samples, const std::string& function) {
  int64_t count = 0;
  for (const NamedSample& s : samples) {
    if (std::find(s.functions.begin(), s.functions.end(), function) != s.functions.end()) {
      count += s.count;
    }
  }
  return count;
}

TEST(PrivilegesTest, NobodyWithTheDocumentedCapabilitiesProfilesARootProcess) {
  AgentCopy copy;
  AgentLaunch launch{
      .argv = copy.AsNobodyWith(Documented()),
      .output_dir_perms = fs::perms::all,
      .once_dropped = [](pid_t agent) {
        EXPECT_EQ(StatusFields(absl::StrCat("/proc/", agent, "/status"))["Uid"].substr(0, 5),
                  "65534");
        // At least the status endpoint's thread besides the sampling one.
        EXPECT_GE(ExpectOnlySamplingThreadKeeps(agent, kKeptAsNobody), 1);
      }};
  ProfiledRun run = ProfileFixture({EMBER_PHASES_BIN, "3"}, 199, nullptr, SIGINT, {}, launch);
  std::vector<NamedSample> samples = SamplesOf(run.output_dir, run.pid);
  fs::remove_all(run.output_dir);
  int64_t total = 0;
  for (const NamedSample& s : samples) total += s.count;
  ExpectSamplesComplete(run, total);
  ASSERT_GT(total, 0) << run.agent_log;
  // The root fixture's own frames: its maps (CAP_SYS_PTRACE) and binary (CAP_DAC_READ_SEARCH
  // through /proc/PID/root) were read by nobody.
  for (const char* name : {"leaf_alpha", "leaf_beta", "leaf_gamma", "run_phases"}) {
    EXPECT_GT(CountWith(samples, name), 0) << name << "\n" << run.agent_log;
  }
  EXPECT_GE(static_cast<double>(CountWith(samples, "main")) / total, 0.9) << run.agent_log;
  EXPECT_NE(run.agent_log.find(
                "capabilities: kept CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE; dropped CAP_SETPCAP, "),
            std::string::npos)
      << run.agent_log;
  EXPECT_NE(run.agent_log.find("CAP_SYSLOG, CAP_PERFMON, CAP_BPF\n"), std::string::npos)
      << run.agent_log;
  EXPECT_EQ(run.agent_log.find(" warning "), std::string::npos) << run.agent_log;
}

// Root, with an OTLP exporter (gRPC, then OTLP/HTTP through curl) and the Kubernetes pod watcher
// (curl) besides the status endpoint (libmicrohttpd): their threads, and those gRPC starts once it
// sends, hold no capability. Nothing listens on port 9 (discard): the exporter and the watcher
// retry; an interval of 1 s has them try before the threads are read.
void RootKeepsCapabilitiesOnTheSamplingThreadOnly(const std::string& protocol) {
  SCOPED_TRACE(protocol);
  AgentLaunch launch{.once_dropped = [](pid_t agent) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    // The main thread, the exporter's, the pod watcher's and the status endpoint's at least.
    EXPECT_GE(ExpectOnlySamplingThreadKeeps(agent, kKeptAsNobody | (1ull << kCapCheckpointRestore)),
              3);
  }};
  ProfiledRun run =
      ProfileFixture({EMBER_PHASES_BIN, "1"}, 99, nullptr, SIGINT,
                     {"--otlp-endpoint", "http://127.0.0.1:9", "--otlp-protocol", protocol,
                      "--export-interval", "1s", "--kube-api-server", "https://127.0.0.1:9",
                      "--kube-ca-file", "", "--kube-token-file", "", "--node-name", "node-a"},
                     launch);
  std::vector<NamedSample> samples = SamplesOf(run.output_dir, run.pid);
  fs::remove_all(run.output_dir);
  EXPECT_GT(CountWith(samples, "run_phases"), 0) << run.agent_log;
  EXPECT_NE(run.agent_log.find("capabilities: kept CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, "
                               "CAP_CHECKPOINT_RESTORE; dropped CAP_CHOWN"),
            std::string::npos)
      << run.agent_log;
  EXPECT_NE(run.agent_log.find("OTLP export: "), std::string::npos) << run.agent_log;
}

TEST(PrivilegesTest, RootKeepsCapabilitiesOnTheSamplingThreadOnlyWithGrpc) {
  RootKeepsCapabilitiesOnTheSamplingThreadOnly("grpc");
}

TEST(PrivilegesTest, RootKeepsCapabilitiesOnTheSamplingThreadOnlyWithHttp) {
  RootKeepsCapabilitiesOnTheSamplingThreadOnly("http/protobuf");
}

TEST(PrivilegesTest, EachMissingRequiredCapabilityIsOneLineAndExitCode1) {
  AgentCopy copy;
  const std::map<std::string, std::string> names = {{"bpf", "CAP_BPF"},
                                                    {"perfmon", "CAP_PERFMON"},
                                                    {"sys_ptrace", "CAP_SYS_PTRACE"},
                                                    {"dac_read_search", "CAP_DAC_READ_SEARCH"}};
  for (const auto& [cap, name] : names) {
    std::vector<std::string> argv = copy.AsNobodyWith(Without(Documented(), cap));
    for (const char* arg : {"--duration", "2s", "--metrics-address", ""}) argv.push_back(arg);
    argv.push_back("--output-dir");
    argv.push_back(copy.out());
    RunResult result = RunProgram(argv, seconds(30));
    SCOPED_TRACE(name);
    EXPECT_EQ(result.exit_code, 1) << result.output;
    EXPECT_EQ(result.output.rfind("ember-agent: missing capability " + name + " (needed to ", 0),
              0u)
        << result.output;
    EXPECT_NE(result.output.find("; run as root or grant it"), std::string::npos) << result.output;
    EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
    for (const auto& [other_cap, other] : names) {
      if (other == name) continue;
      EXPECT_EQ(result.output.find(other + " "), std::string::npos) << result.output;
    }
  }
}

TEST(PrivilegesTest, WithoutSyslogItWarnsAndRuns) {
  AgentCopy copy;
  std::vector<std::string> argv = copy.AsNobodyWith(Without(Documented(), "syslog"));
  for (const char* arg : {"--duration", "2s", "--metrics-address", ""}) argv.push_back(arg);
  argv.push_back("--output-dir");
  argv.push_back(copy.out());
  RunResult result = RunProgram(argv, seconds(30));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("warning capability CAP_SYSLOG not held: kernel frames stay "
                               "unnamed"),
            std::string::npos)
      << result.output;
}

}  // namespace
}  // namespace ember::testing
