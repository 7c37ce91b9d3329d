// JVMs as a node runs them (issue 34), under one agent with the Helm chart's capabilities: a JVM
// started before the agent and one started after it (exec'd by a process --pid names), of two JDKs
// (17 and 25) running at once; a short-lived JVM; a JVM in a runc container whose JDK exists only
// under the container's root; and a JVM whose libjvm.so was replaced on disk by garbage after it
// mapped it (a JDK upgraded under a running JVM: without CAP_SYS_ADMIN the agent cannot open the
// mapped file through map_files). Each is named, or counted by outcome in /metrics, and the agent
// neither crashes nor floods its log.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "profiled_run.h"
#include "runc_container.h"
#include "support/pprof_reader.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

constexpr int kHz = 99;
constexpr char kPhases[] = "ember.fixture.Phases";
// The libraries Temurin's java, libjvm.so and libjava.so need, for the container's root.
const std::vector<std::string> kContainerLibraries = {"libc.so.6",       "libdl.so.2", "libm.so.6",
                                                      "libpthread.so.0", "librt.so.1", "libz.so.1"};

// The fixture's method a frame names (its leaves, their callers, main), "" for any other frame.
std::string FixtureMethod(const std::string& frame) {
  const size_t at = frame.find(kPhases);
  if (at == std::string::npos) return "";
  size_t begin = at + sizeof(kPhases) - 1;
  while (begin < frame.size() && (frame[begin] == '.' || frame[begin] == ':')) ++begin;
  size_t end = begin;
  while (end < frame.size() && (std::isalnum(static_cast<unsigned char>(frame[end])) != 0)) ++end;
  return frame.substr(begin, end - begin);
}

bool IsLeaf(const std::string& method) {
  return method == "leafAlpha" || method == "leafBeta" || method == "leafGamma";
}

// A main-thread sample whose innermost fixture method is a leaf and whose outermost is main.
bool NamedFromLeafToMain(const NamedSample& s) {
  std::vector<std::string> methods;
  for (const std::string& line : s.lines) {
    std::string method = FixtureMethod(line);
    if (!method.empty()) methods.push_back(method);
  }
  return !methods.empty() && IsLeaf(methods.front()) && methods.back() == "main";
}

bool AnyFixtureFrame(const NamedSample& s) {
  return std::any_of(s.lines.begin(), s.lines.end(),
                     [](const std::string& l) { return !FixtureMethod(l).empty(); });
}

// The fixture's main thread (the JVM names its own threads; the launcher's keep "java") once the
// VM runs Java: not while it creates the VM (a JVM read before then has no Java frames yet) nor
// while it tears it down.
bool OnMainThread(const NamedSample& s) {
  return s.thread == "java" &&
         std::none_of(s.functions.begin(), s.functions.end(), [](const std::string& f) {
           return f == "JNI_CreateJavaVM" || f == "jni_DestroyJavaVM";
         });
}

int64_t Total(const std::vector<NamedSample>& samples,
              const std::function<bool(const NamedSample&)>& pick = nullptr) {
  int64_t total = 0;
  for (const NamedSample& s : samples) {
    if (!pick || pick(s)) total += s.count;
  }
  return total;
}

// The modules of the frames that name the fixture's methods.
std::vector<std::string> FixtureModules(const std::vector<NamedSample>& samples) {
  std::vector<std::string> modules;
  for (const NamedSample& s : samples) {
    for (size_t i = 0; i < s.functions.size() && i < s.modules.size(); ++i) {
      if (!FixtureMethod(s.functions[i]).empty()) modules.push_back(s.modules[i]);
    }
  }
  std::sort(modules.begin(), modules.end());
  modules.erase(std::unique(modules.begin(), modules.end()), modules.end());
  return modules;
}

std::string ThreadAndFrames(const NamedSample& s, size_t limit) {
  std::vector<std::string> frames = {s.thread + ":"};
  for (size_t i = 0; i < s.functions.size() && i < limit; ++i) {
    std::string module = i < s.modules.size() ? fs::path(s.modules[i]).filename().string() : "";
    frames.push_back(absl::StrCat(s.functions[i].substr(0, 50), " [", module, "]"));
  }
  return absl::StrJoin(frames, " <- ");
}

std::string CommonOf(const std::vector<NamedSample>& samples) {
  return CommonStacks(
      samples, [](const NamedSample&) { return true; }, 8,
      [](const NamedSample& s) { return std::vector<std::string>{ThreadAndFrames(s, 12)}; });
}

// The agent's log lines that name process `pid`.
std::vector<std::string> LinesAbout(const std::string& log, int64_t pid) {
  std::vector<std::string> lines;
  const std::string needle = absl::StrCat("process ", pid, " ");
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, needle)) lines.emplace_back(line);
  }
  return lines;
}

// Waits (bounded) until process `pid` maps a file whose path ends in `suffix`.
bool WaitForMapping(pid_t pid, const std::string& suffix, seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream maps(absl::StrCat("/proc/", pid, "/maps"));
    std::string line;
    while (std::getline(maps, line)) {
      if (line.ends_with(suffix)) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Waits (bounded) until process `pid` is gone or a zombie; its CPU time last seen alive.
double WaitForExit(pid_t pid, seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  double cpu = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    std::optional<double> now = ProcessCpuSeconds(pid);
    if (!now) break;
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string text;
    std::getline(stat, text);
    const size_t close = text.rfind(')');
    if (close == std::string::npos || close + 2 >= text.size() || text[close + 2] == 'Z') break;
    cpu = *now;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return cpu;
}

// A copy of `jdk` at `to` made of hard links, except its libjvm.so: a file of its own (a new
// inode), so that the agent cannot know it from the original's reading.
bool LinkJdkWithOwnLibjvm(const std::string& jdk, const std::string& to) {
  RunResult linked = RunProgram({"/bin/cp", "-al", jdk, to});
  EXPECT_EQ(linked.exit_code, 0) << linked.output;
  std::error_code error;
  fs::remove(to + "/lib/server/libjvm.so", error);
  fs::copy_file(jdk + "/lib/server/libjvm.so", to + "/lib/server/libjvm.so", error);
  EXPECT_FALSE(error) << error.message();
  return linked.exit_code == 0 && !error;
}

// Everything the suite's one agent run produced.
struct Lifecycle {
  std::string dir;
  std::string agent_log;
  std::string metrics;  // /metrics, scraped once every JVM has exited
  std::optional<int> agent_exit;
  int64_t before = 0, after = 0, short_lived = 0, unreadable = 0, contained = 0;
  double short_lived_cpu = 0, unreadable_cpu = 0;
  uint64_t agent_peak_rss = 0;
  std::string container_id;
};

Lifecycle RunAll() {
  Lifecycle run;
  run.dir = MakeTempDir();
  const std::string classes = EMBER_JAVA_FIXTURE_CLASSES;
  const std::string jdk17 = EMBER_JDK17_HOME, jdk25 = EMBER_JDK25_HOME;
  auto phases = [&](const std::string& java, const char* seconds, const char* warm_up) {
    return std::vector<std::string>{java, "-cp", classes, kPhases, seconds, warm_up};
  };

  // The JVM whose libjvm goes: a JDK 17 of its own, started now, its libjvm.so replaced once
  // mapped.
  const std::string copied = run.dir + "/jdk17";
  if (!LinkJdkWithOwnLibjvm(jdk17, copied)) return run;
  // The container's root: the JDK 25 and the libraries it needs, the fixture, its stdin.
  const std::string rootfs = run.dir + "/container/bundle/rootfs";
  std::error_code error;
  fs::create_directories(rootfs + "/lib/x86_64-linux-gnu", error);
  fs::create_directories(rootfs + "/lib64", error);
  if (!LinkJdkWithOwnLibjvm(jdk25, rootfs + "/jdk")) return run;
  for (const std::string& library : kContainerLibraries) {
    fs::copy_file(fs::canonical("/lib/x86_64-linux-gnu/" + library, error),
                  rootfs + "/lib/x86_64-linux-gnu/" + library, error);
    EXPECT_FALSE(error) << library << ": " << error.message();
  }
  fs::copy_file(fs::canonical("/lib64/ld-linux-x86-64.so.2", error),
                rootfs + "/lib64/ld-linux-x86-64.so.2", error);
  fs::copy(classes, rootfs + "/classes", fs::copy_options::recursive, error);
  EXPECT_FALSE(error) << error.message();

  Subprocess before(phases(jdk17 + "/bin/java", "8", "0.3"));
  Subprocess unreadable(phases(copied + "/bin/java", "8", "0.3"));
  run.before = before.pid();
  run.unreadable = unreadable.pid();
  EXPECT_TRUE(WaitForMapping(unreadable.pid(), copied + "/lib/server/libjvm.so", seconds(20)));
  const std::string garbage = run.dir + "/garbage";
  std::ofstream(garbage) << std::string(8192, 'x');
  fs::rename(garbage, copied + "/lib/server/libjvm.so", error);
  EXPECT_FALSE(error) << error.message();
  // The JVMs started after the agent: processes that exist before it (so that its --pid names
  // them and it samples nothing else of a busy machine) and exec java once told. A JDK 25 beside
  // the 17, its heap touched page by page before the VM creates its interpreter: the JVM runs for
  // a while with libjvm mapped but its code cache not ready, so the agent meets it not ready and
  // must read it again (profiling it needs no flag; the flags only widen that window). A JVM gone
  // within a second. The container's, which waits for /go to appear in its root.
  auto exec_when_told = [](std::vector<std::string> argv) {
    argv.insert(argv.begin(), {"/bin/sh", "-c", "read line && exec \"$@\"", "sh"});
    return argv;
  };
  std::vector<std::string> after_argv = phases(jdk25 + "/bin/java", "6", "0");
  after_argv.insert(after_argv.begin() + 1, {"-Xms512m", "-XX:+AlwaysPreTouch"});
  Subprocess after(exec_when_told(after_argv));
  run.after = after.pid();
  Subprocess short_lived(exec_when_told(phases(jdk17 + "/bin/java", "0.2", "0")));
  run.short_lived = short_lived.pid();
  run.container_id = RandomContainerId();
  std::unique_ptr<RuncContainer> container = RuncContainer::Start(
      run.dir + "/container", run.container_id,
      KubepodsCgroupPath(RandomPodUid(), run.container_id),
      {"/bin/busybox", "sh", "-c",
       absl::StrCat("until /bin/busybox test -e /go; do /bin/busybox sleep 0.05; done; ",
                    "exec /jdk/bin/java -cp /classes ", kPhases, " 5 0 </go")});
  EXPECT_NE(container, nullptr);
  if (container != nullptr) run.contained = container->pid();

  std::vector<std::string> agent_argv = {
      EMBER_AGENT_BIN, "--sampling-hz",  std::to_string(kHz), "--export-interval", "2s",
      "--output-dir",  run.dir + "/out", "--metrics-address", "127.0.0.1:0"};
  for (int64_t pid : {run.before, run.unreadable, run.after, run.short_lived, run.contained}) {
    if (pid == 0) continue;
    agent_argv.push_back("--pid");
    agent_argv.push_back(std::to_string(pid));
  }
  Subprocess agent(WithTheChartsCapabilities(agent_argv));
  const bool ready = agent.WaitForOutput("status endpoint", seconds(30));
  EXPECT_TRUE(ready) << agent.output();
  const std::string endpoint = StatusEndpoint(agent.output());
  // Its CPU time while sampled: from here to its exit.
  const double unreadable_cpu_before = ProcessCpuSeconds(unreadable.pid()).value_or(0);
  before.WriteStdin("g");
  unreadable.WriteStdin("g");
  after.WriteStdin("go\ng");
  short_lived.WriteStdin("go\ng");
  std::ofstream(rootfs + "/go.new") << "g";
  fs::rename(rootfs + "/go.new", rootfs + "/go", error);
  EXPECT_FALSE(error) << error.message();

  EXPECT_EQ(short_lived.Wait(seconds(30)), 0) << short_lived.output();
  if (short_lived.cpu_time()) run.short_lived_cpu = short_lived.cpu_time()->count() / 1e6;
  EXPECT_EQ(after.Wait(seconds(60)), 0) << after.output();
  EXPECT_EQ(before.Wait(seconds(60)), 0) << before.output();
  EXPECT_EQ(unreadable.Wait(seconds(60)), 0) << unreadable.output();
  if (unreadable.cpu_time()) {
    run.unreadable_cpu = unreadable.cpu_time()->count() / 1e6 - unreadable_cpu_before;
  }
  if (container != nullptr) WaitForExit(container->pid(), seconds(60));
  // One more interval, so every sample taken is exported and counted.
  std::this_thread::sleep_for(seconds(3));
  if (!endpoint.empty()) run.metrics = HttpGet(endpoint + "/metrics").second;
  run.agent_peak_rss = PeakRssBytes(agent.pid());
  agent.Signal(SIGINT);
  run.agent_exit = agent.Wait(seconds(30));
  run.agent_log = agent.output();
  return run;
}

class HotSpotLifecycleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { run_ = new Lifecycle(RunAll()); }
  static void TearDownTestSuite() {
    if (!run_->dir.empty()) fs::remove_all(run_->dir);
    delete run_;
  }
  static std::vector<NamedSample> SamplesOfPid(int64_t pid) {
    return SamplesOf(run_->dir + "/out", pid);
  }
  static double Metric(const std::string& outcome) {
    return MetricValue(run_->metrics,
                       absl::StrCat("ember_hotspot_processes_total{outcome=\"", outcome, "\"}"))
        .value_or(-1);
  }
  // One "runs HotSpot MAJOR." line for the process, and most of its main thread's samples named
  // from a leaf down to main, the frames' module being `libjvm`.
  static void ExpectNamed(int64_t pid, int major, const std::string& libjvm) {
    const std::vector<std::string> lines = LinesAbout(run_->agent_log, pid);
    EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                            [&](const std::string& l) {
                              return absl::StrContains(l,
                                                       absl::StrCat("runs HotSpot ", major, "."));
                            }),
              1)
        << absl::StrJoin(lines, "\n");
    std::vector<NamedSample> samples = SamplesOfPid(pid);
    const int64_t main_thread = Total(samples, OnMainThread);
    const int64_t named = Total(
        samples, [](const NamedSample& s) { return OnMainThread(s) && NamedFromLeafToMain(s); });
    std::printf(
        "process %lld (JDK %d): %lld samples, %lld on the main thread, %.1f%% of them "
        "named from a leaf to main\n",
        static_cast<long long>(pid), major, static_cast<long long>(Total(samples)),
        static_cast<long long>(main_thread), 100 * Share(named, main_thread));
    ASSERT_GT(main_thread, 20) << run_->agent_log;
    // Most, not all: a sample whose BPF walk stopped in Java code and whose stack snapshot could
    // not be read ("[anon] <- [truncated]") has nothing to step; the HotSpot profile tests hold
    // the share of named samples to its bound on a quieter run.
    EXPECT_GE(Share(named, main_thread), 0.5) << CommonOf(samples);
    EXPECT_EQ(FixtureModules(samples), std::vector<std::string>{libjvm});
  }
  static Lifecycle* run_;
};
Lifecycle* HotSpotLifecycleTest::run_ = nullptr;

TEST_F(HotSpotLifecycleTest, TheAgentRanToItsEndWithoutLosingSamples) {
  EXPECT_EQ(run_->agent_exit, 0) << run_->agent_log;
  ExpectNoSampleLost(run_->agent_log);
  ASSERT_FALSE(run_->metrics.empty()) << run_->agent_log;
  std::printf("agent's peak RSS: %.1f MiB\n",
              static_cast<double>(run_->agent_peak_rss) / (1 << 20));
  for (absl::string_view line : absl::StrSplit(run_->metrics, '\n')) {
    if (absl::StartsWith(line, "ember_hotspot_processes") || absl::StrContains(line, "snapshot") ||
        absl::StartsWith(line, "ember_stacks_unwound")) {
      std::printf("%s\n", std::string(line).c_str());
    }
  }
}

TEST_F(HotSpotLifecycleTest, JvmsStartedBeforeAndAfterTheAgentOfTwoJdksAreNamed) {
  // Their Java frames' module is libjvm.so as the process maps it.
  ExpectNamed(run_->before, 17, EMBER_JDK17_HOME "/lib/server/libjvm.so");
  ExpectNamed(run_->after, 25, EMBER_JDK25_HOME "/lib/server/libjvm.so");
  // Before, after and the container's; the short-lived one's too, or as not_ready, or not at all
  // when gone before its maps were read.
  EXPECT_GE(Metric("supported"), 3) << run_->metrics;
  EXPECT_LE(Metric("supported") + Metric("not_ready"), 4) << run_->metrics;
  EXPECT_EQ(Metric("unsupported"), 0) << run_->metrics;
  EXPECT_EQ(Metric("unreadable_process"), 0) << run_->metrics;
}

// A JVM gone within a second may be gone before the agent reads its maps (its samples then carry
// "[process exited]", counted as a failed /proc read), or before its VM was initialised (not_ready
// once its exit is told); samples read once it was ready name its methods. Either way every
// sample is kept and the JVM is never taken for a failure.
TEST_F(HotSpotLifecycleTest, AShortLivedJvmIsNamedOrCounted) {
  std::vector<NamedSample> samples = SamplesOfPid(run_->short_lived);
  const int64_t total = Total(samples);
  const int64_t named = Total(samples, AnyFixtureFrame);
  const int64_t exited = Total(samples, [](const NamedSample& s) {
    return std::find(s.functions.begin(), s.functions.end(), "[process exited]") !=
           s.functions.end();
  });
  std::printf(
      "short-lived JVM: %.2f s of CPU, %lld samples, %lld name the fixture, %lld [process "
      "exited]\n",
      run_->short_lived_cpu, static_cast<long long>(total), static_cast<long long>(named),
      static_cast<long long>(exited));
  // Kept: a few dozen samples at most scatter too widely for ExpectSamplesForCpuTime's bound.
  EXPECT_GT(total, 0) << run_->agent_log;
  EXPECT_GE(static_cast<double>(total), 0.5 * run_->short_lived_cpu * kHz) << run_->agent_log;
  if (exited > 0) {
    EXPECT_GE(
        MetricValue(run_->metrics, "ember_proc_read_failures_total{file=\"stat\"}").value_or(0), 1)
        << run_->metrics;
  }
  const std::vector<std::string> lines = LinesAbout(run_->agent_log, run_->short_lived);
  std::printf("short-lived JVM's log: %s\n", lines.empty() ? "(none)" : lines[0].c_str());
  EXPECT_LE(lines.size(), 1u) << absl::StrJoin(lines, "\n");
  for (const std::string& line : lines) {
    EXPECT_TRUE(absl::StrContains(line, "runs HotSpot 17.")) << line;
  }
  // Seen ready (one line), or gone before: never a failure, in the log or in /metrics.
  EXPECT_EQ(Metric("unreadable_process"), 0) << run_->metrics;
  EXPECT_EQ(Metric("unsupported"), 0) << run_->metrics;
  std::printf("not_ready: %.0f\n", Metric("not_ready"));
}

TEST_F(HotSpotLifecycleTest, AJvmInAContainerIsReadThroughItsRoot) {
  ASSERT_NE(run_->contained, 0);
  // The log names libjvm as the process maps it; no such file is on the host, so the agent read
  // it (and named the JVM's frames) through the process's root.
  const std::string libjvm = "/jdk/lib/server/libjvm.so";
  ASSERT_FALSE(std::filesystem::exists(libjvm)) << "the host must not have " << libjvm;
  const std::vector<std::string> lines = LinesAbout(run_->agent_log, run_->contained);
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [&](const std::string& l) {
    return absl::StrContains(l, "runs HotSpot 25.") &&
           absl::StrContains(l, absl::StrCat("(", libjvm, ")"));
  })) << absl::StrJoin(lines, "\n");
  ExpectNamed(run_->contained, 25, "/jdk/lib/server/libjvm.so");
  for (const NamedSample& s : SamplesOfPid(run_->contained)) {
    auto label = s.labels.find("container.id");
    ASSERT_NE(label, s.labels.end()) << ThreadAndFrames(s, 8);
    EXPECT_EQ(label->second, run_->container_id);
  }
}

TEST_F(HotSpotLifecycleTest, AJvmWhoseLibjvmCannotBeReadIsCountedOnceAndKeepsItsNativeFrames) {
  EXPECT_EQ(Metric("unreadable_libjvm"), 1) << run_->metrics;
  const std::vector<std::string> lines = LinesAbout(run_->agent_log, run_->unreadable);
  ASSERT_EQ(lines.size(), 1u) << absl::StrJoin(lines, "\n");
  EXPECT_TRUE(absl::StrContains(lines[0], "not walked (unreadable_libjvm)")) << lines[0];
  std::vector<NamedSample> samples = SamplesOfPid(run_->unreadable);
  const int64_t total = Total(samples);
  // Native code it runs outside libjvm (libc, libjava, the launcher) is still named.
  const int64_t native = Total(samples, [](const NamedSample& s) {
    return std::any_of(s.functions.begin(), s.functions.end(), [](const std::string& f) {
      return f == "start_thread" || f == "JavaMain" || f == "clone3";
    });
  });
  std::printf("JVM with its libjvm.so replaced: %lld samples, %lld with named native frames\n",
              static_cast<long long>(total), static_cast<long long>(native));
  ExpectSamplesForCpuTime(total, run_->unreadable_cpu, kHz, run_->agent_log, 0.8);
  EXPECT_GT(native, 0) << CommonOf(samples);
  EXPECT_EQ(Total(samples, AnyFixtureFrame), 0) << CommonOf(samples);
}

}  // namespace
}  // namespace ember::testing
