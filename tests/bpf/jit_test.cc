// Profiles JIT-compiled code named from perf maps (issue 6): node 20 with --perf-basic-prof and
// Java 17 with its perf map written by `jcmd PID Compiler.perfmap`, each running a fixture
// (tests/fixtures/jit) that spends its time in nested functions, with its own accounting of how
// much in each leaf. Checks that the samples carry the script's function names in the right
// nesting, with the leaf shares the script measured, and that the frames are typed by runtime.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "profiled_run.h"
#include "support/pprof_reader.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

using std::chrono::seconds;

// The fixture function a frame stands for: "leafAlpha" from V8's "JS:*leafAlpha /path:1:2" (any
// tier mark), a HotSpot perf map's "void Phases.leafAlpha()" or the HotSpot walk's
// "Phases.leafAlpha"; "" for any other frame.
std::string ScriptFunction(const std::string& frame) {
  absl::string_view f = frame;
  if (absl::ConsumePrefix(&f, "JS:")) {
    if (!f.empty() && absl::string_view("*~^+").find(f[0]) != absl::string_view::npos) {
      f.remove_prefix(1);
    }
    return std::string(f.substr(0, f.find(' ')));
  }
  if (!absl::ConsumePrefix(&f, "Phases.")) {
    const size_t in_class = f.find(" Phases.");
    if (in_class == absl::string_view::npos) return "";
    f.remove_prefix(in_class + 8);
  }
  return std::string(f.substr(0, f.find('(')));
}

// The fixtures' call tree: each function's caller, up to runPhase.
const std::map<std::string, std::string> kCallerOf = {
    {"leafAlpha", "alphaOuter"}, {"alphaOuter", "runPhase"}, {"leafBeta", "betaInner"},
    {"betaInner", "betaOuter"},  {"betaOuter", "runPhase"},  {"leafGamma", "runPhase"},
    {"runPhase", "runPhases"}};
const std::vector<std::string> kLeaves = {"leafAlpha", "leafBeta", "leafGamma"};

struct JitRun {
  std::string dir;  // temp dir: pprof files, flamegraph.html, fixture files
  std::string agent_log;
  std::string fixture_output;
  int64_t pid = 0;
};

// Starts the fixture, waits for `ready_text` in its output (when not empty), calls `refresh`
// once, starts the agent, lets the fixture go and calls `refresh` about every second while it
// runs, then stops the agent. Failures are reported with EXPECT_*.
JitRun ProfileJitFixture(const std::vector<std::string>& argv, const std::string& dir, int hz,
                         const std::string& ready_text, const std::function<void(pid_t)>& refresh) {
  JitRun run;
  run.dir = dir;
  Subprocess fixture(argv);
  run.pid = fixture.pid();
  if (!ready_text.empty()) {
    EXPECT_TRUE(fixture.WaitForOutput(ready_text, seconds(60))) << fixture.output();
  }
  if (refresh) refresh(fixture.pid());
  Subprocess agent({EMBER_AGENT_BIN, "--pid", std::to_string(fixture.pid()), "--sampling-hz",
                    std::to_string(hz), "--export-interval", "3s", "--output-dir", dir,
                    "--metrics-address", "127.0.0.1:0"});
  EXPECT_TRUE(agent.WaitForOutput("attached to", seconds(15))) << agent.output();
  // The runtime's start-up and warm-up ran before the agent: only what follows is sampled.
  const std::optional<double> cpu_at_attach = ProcessCpuSeconds(fixture.pid());
  fixture.WriteStdin("g");

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread refresher([&] {
    std::unique_lock<std::mutex> lock(mu);
    while (refresh && !cv.wait_for(lock, seconds(1), [&] { return done; })) {
      lock.unlock();
      refresh(run.pid);
      lock.lock();
    }
  });
  EXPECT_EQ(fixture.Wait(seconds(120)), 0) << fixture.output();
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
  refresher.join();
  run.fixture_output = fixture.output();
  agent.Signal(SIGINT);
  EXPECT_EQ(agent.Wait(seconds(30)), 0) << agent.output();
  run.agent_log = agent.output();
  std::filesystem::remove(absl::StrCat("/tmp/perf-", run.pid, ".map"));
  ExpectNoSampleLost(run.agent_log);
  // Every thread of the runtime (compiler, GC), not only the workload's, is in the count.
  int64_t samples = 0;
  for (const NamedSample& s : SamplesOf(dir, run.pid)) samples += s.count;
  EXPECT_TRUE(cpu_at_attach.has_value() && fixture.cpu_time().has_value());
  if (cpu_at_attach && fixture.cpu_time()) {
    ExpectSamplesForCpuTime(samples, fixture.cpu_time()->count() / 1e6 - *cpu_at_attach, hz,
                            run.agent_log);
  }
  return run;
}

// "name number" lines of the fixture's output (others, like "ready", are skipped).
std::map<std::string, double> LeafNs(const std::string& output) {
  std::map<std::string, double> ns;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string name;
    double value = 0;
    std::string rest;
    if (fields >> name >> value && !(fields >> rest)) ns[name] = value;
  }
  return ns;
}

// Script functions of a sample, leaf first, each with its frame's index.
std::vector<std::pair<size_t, std::string>> ScriptFrames(const NamedSample& s) {
  std::vector<std::pair<size_t, std::string>> frames;
  for (size_t i = 0; i < s.functions.size(); ++i) {
    std::string name = ScriptFunction(s.functions[i]);
    if (!name.empty()) frames.emplace_back(i, std::move(name));
  }
  return frames;
}

// True when the sample's script frames are whole from its innermost one out to runPhase: each
// the direct caller of the one before, with no unnamed frame between them.
bool NestedUpToRunPhase(const NamedSample& s) {
  auto frames = ScriptFrames(s);
  if (frames.empty()) return false;
  for (size_t k = 0; k < frames.size(); ++k) {
    if (frames[k].second == "runPhase") return true;
    auto caller = kCallerOf.find(frames[k].second);
    if (caller == kCallerOf.end() || k + 1 == frames.size()) return false;
    if (frames[k + 1].second != caller->second || frames[k + 1].first != frames[k].first + 1) {
      return false;
    }
  }
  return false;
}

// As NestedUpToRunPhase, but a function may be an unnamed "[anon]" frame in its place: code whose
// record the runtime has not written out yet (V8 writes its jitdump through a stdio buffer).
// Every function between the leaf and runPhase is there, named or not, and nothing else.
bool NestedUpToRunPhaseOrUnwritten(const NamedSample& s) {
  auto frames = ScriptFrames(s);
  if (frames.empty()) return false;
  for (size_t k = 0; k < frames.size(); ++k) {
    if (frames[k].second == "runPhase") return true;
    if (k + 1 == frames.size()) return false;
    // Walk the call chain from this function up to the next named frame, one frame per step.
    std::string expected = frames[k].second;
    size_t index = frames[k].first;
    while (true) {
      auto caller = kCallerOf.find(expected);
      if (caller == kCallerOf.end()) return false;
      expected = caller->second;
      ++index;
      if (index == frames[k + 1].first) {
        if (frames[k + 1].second != expected) return false;
        break;
      }
      if (index >= s.functions.size() || s.functions[index] != "[anon]") return false;
    }
  }
  return false;
}

// The leaf a sample ran in, by name anywhere in its stack; "" when none.
std::string LeafOf(const NamedSample& s) {
  for (const auto& [index, name] : ScriptFrames(s)) {
    if (std::find(kLeaves.begin(), kLeaves.end(), name) != kLeaves.end()) return name;
  }
  return "";
}

// The analysis both runtimes share.
class JitProfileTest : public ::testing::Test {
 protected:
  // Samples of the thread that ran the phases: the thread name with the most runPhase samples,
  // less node's V8 worker threads (compiler, GC), which have the main thread's name ("node") but
  // are told by their outermost native frames, which need no perf map.
  static std::vector<NamedSample> WorkloadSamples(const JitRun& run) {
    std::vector<NamedSample> all = SamplesOf(run.dir, run.pid);
    std::map<std::string, int64_t> by_thread;
    for (const NamedSample& s : all) {
      for (const std::string& f : s.functions) {
        if (ScriptFunction(f) == "runPhase") by_thread[s.thread] += s.count;
      }
    }
    std::string thread;
    int64_t most = 0;
    for (const auto& [name, count] : by_thread) {
      if (count > most) most = count, thread = name;
    }
    std::vector<NamedSample> workload;
    for (NamedSample& s : all) {
      const bool v8_worker = std::any_of(
          s.functions.begin(), s.functions.end(),
          [](const std::string& f) { return absl::StrContains(f, "PlatformWorkerThread"); });
      if (s.thread == thread && !v8_worker) workload.push_back(std::move(s));
    }
    return workload;
  }

  static void CheckNesting(
      const std::vector<NamedSample>& samples, int64_t min_samples,
      const std::function<bool(const NamedSample&)>& nested_up_to_run_phase = NestedUpToRunPhase) {
    int64_t total = 0, nested = 0, reach_run_phases = 0;
    for (const NamedSample& s : samples) {
      total += s.count;
      if (nested_up_to_run_phase(s)) nested += s.count;
      for (const std::string& f : s.functions) {
        if (ScriptFunction(f) == "runPhases") {
          reach_run_phases += s.count;
          break;
        }
      }
    }
    ASSERT_GE(total, min_samples) << "too few samples of the workload";
    std::printf(
        "named and nested up to runPhase: %.1f%% of %lld workload samples; runPhases "
        "named in %.1f%%\n",
        100 * Share(nested, total), static_cast<long long>(total),
        100 * Share(reach_run_phases, total));
    std::printf("most common other stacks:\n%s",
                CommonStacks(
                    samples, [&](const NamedSample& s) { return !nested_up_to_run_phase(s); }, 3)
                    .c_str());
    EXPECT_GE(Share(nested, total), 0.90)
        << nested << " of " << total << "; most common other stacks:\n"
        << CommonStacks(
               samples, [&](const NamedSample& s) { return !nested_up_to_run_phase(s); }, 5);
  }

  static void CheckLeafShares(const std::vector<NamedSample>& samples, const std::string& output) {
    std::map<std::string, double> measured = LeafNs(output);
    ASSERT_EQ(measured.size(), 3u) << output;
    double measured_total = 0;
    for (const auto& [name, ns] : measured) measured_total += ns;
    std::map<std::string, int64_t> counts;
    int64_t in_leaves = 0;
    for (const NamedSample& s : samples) {
      std::string leaf = LeafOf(s);
      if (leaf.empty()) continue;
      counts[leaf] += s.count;
      in_leaves += s.count;
    }
    ASSERT_GT(in_leaves, 0);
    for (const std::string& leaf : kLeaves) {
      ASSERT_TRUE(measured.count(leaf)) << output;
      const double expected = measured[leaf] / measured_total;
      const double profiled = Share(counts[leaf], in_leaves);
      std::printf(
          "%s: profile %.1f%% (%lld of %lld samples in leaves), script's own measure "
          "%.1f%%\n",
          leaf.c_str(), 100 * profiled, static_cast<long long>(counts[leaf]),
          static_cast<long long>(in_leaves), 100 * expected);
      EXPECT_NEAR(profiled, expected, 0.05) << leaf;
    }
  }

  static void CheckFrameTypes(const JitRun& run, int type) {
    std::map<std::string, std::set<int>> types = FlameGraphTypes(run.dir + "/flamegraph.html");
    int checked = 0;
    for (const auto& [name, kinds] : types) {
      if (ScriptFunction(name).empty()) continue;
      ++checked;
      EXPECT_EQ(kinds, std::set<int>{type}) << name;
    }
    EXPECT_GE(checked, 6) << "script frames in the flame graph";
  }
};

class NodeJitTest : public JitProfileTest {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = MakeTempDir();
    run_ = new JitRun(
        ProfileJitFixture({EMBER_NODE_BIN, "--perf-basic-prof", "--interpreted-frames-native-stack",
                           "--no-turbo-inlining", "--logfile=" + dir + "/v8.log",
                           "--no-logfile-per-isolate", EMBER_JIT_FIXTURES "/phases.js", "8"},
                          dir, 499, "", nullptr));
    samples_ = new std::vector<NamedSample>(WorkloadSamples(*run_));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(run_->dir);
    delete samples_;
    delete run_;
  }
  static JitRun* run_;
  static std::vector<NamedSample>* samples_;
};
JitRun* NodeJitTest::run_ = nullptr;
std::vector<NamedSample>* NodeJitTest::samples_ = nullptr;

TEST_F(NodeJitTest, SamplesCarryTheScriptsFunctionsNested) {
  EXPECT_TRUE(absl::StrContains(run_->agent_log, "naming JIT code from /tmp/perf-"))
      << run_->agent_log;
  CheckNesting(*samples_, 200);
}

TEST_F(NodeJitTest, LeafSharesMatchTheScriptsOwnAccounting) {
  CheckLeafShares(*samples_, run_->fixture_output);
}

TEST_F(NodeJitTest, FramesAreTypedV8js) { CheckFrameTypes(*run_, /*kV8Js=*/8); }

// The same script under node --perf-prof, which writes a jitdump (jit-PID.dump in its working
// directory, announced by mapping it) and no perf map: the agent names V8's code from the jitdump.
class NodeJitdumpTest : public JitProfileTest {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = MakeTempDir();
    // env execs node in the temp dir, keeping the pid: the jitdump lands there. V8 writes the
    // jitdump through a stdio buffer: code compiled since its last 8 KiB stays unnamed until
    // it is written, so the fixture compiles its functions, and code that pushes their records
    // out, before the agent attaches.
    run_ = new JitRun(ProfileJitFixture(
        {"/usr/bin/env", "-C", dir, EMBER_NODE_BIN, "--perf-prof",
         "--interpreted-frames-native-stack", "--no-turbo-inlining", "--logfile=" + dir + "/v8.log",
         "--no-logfile-per-isolate", EMBER_JIT_FIXTURES "/phases.js", "8", "warm"},
        dir, 499, "ready\n", nullptr));
    samples_ = new std::vector<NamedSample>(WorkloadSamples(*run_));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(run_->dir);
    delete samples_;
    delete run_;
  }
  static JitRun* run_;
  static std::vector<NamedSample>* samples_;
};
JitRun* NodeJitdumpTest::run_ = nullptr;
std::vector<NamedSample>* NodeJitdumpTest::samples_ = nullptr;

TEST_F(NodeJitdumpTest, SamplesCarryTheScriptsFunctionsFromTheJitdump) {
  const std::string dump = absl::StrCat(run_->dir, "/jit-", run_->pid, ".dump");
  EXPECT_TRUE(absl::StrContains(run_->agent_log, "naming JIT code from " + dump))
      << run_->agent_log;
  EXPECT_FALSE(absl::StrContains(run_->agent_log, "naming JIT code from /tmp/perf-"))
      << "node wrote a perf map: the names may not be the jitdump's\n"
      << run_->agent_log;
  // Every script frame of the hot leaves is the jitdump's.
  int64_t leaf_frames = 0;
  for (const NamedSample& s : *samples_) {
    for (size_t i = 0; i < s.functions.size(); ++i) {
      const std::string name = ScriptFunction(s.functions[i]);
      if (std::find(kLeaves.begin(), kLeaves.end(), name) == kLeaves.end()) continue;
      leaf_frames += s.count;
      EXPECT_EQ(s.modules[i], dump) << s.functions[i];
    }
  }
  EXPECT_GE(leaf_frames, 200);
  int64_t total = 0, named = 0;
  for (const NamedSample& s : *samples_) {
    total += s.count;
    if (NestedUpToRunPhase(s)) named += s.count;
  }
  std::printf("every frame up to runPhase named: %.1f%%\n", 100 * Share(named, total));
  CheckNesting(*samples_, 200, NestedUpToRunPhaseOrUnwritten);
}

TEST_F(NodeJitdumpTest, LeafSharesMatchTheScriptsOwnAccounting) {
  CheckLeafShares(*samples_, run_->fixture_output);
}

TEST_F(NodeJitdumpTest, FramesAreTypedV8js) { CheckFrameTypes(*run_, /*kV8Js=*/8); }

class JavaJitTest : public JitProfileTest {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = MakeTempDir();
    const std::string classes = dir + "/classes";
    RunResult javac = RunProgram(
        {EMBER_JAVAC_BIN, "-d", classes, EMBER_JIT_FIXTURES "/Phases.java"}, seconds(120));
    EXPECT_EQ(javac.exit_code, 0) << javac.output;
    // The JVM writes its perf map when asked, so the test asks once its methods are compiled and
    // then every second: code compiled later gets its name at the next write.
    // Once the fixture is done, a last jcmd may find the JVM gone: only the first must work.
    bool first = true;
    auto write_perf_map = [&first](pid_t pid) {
      RunResult jcmd =
          RunProgram({EMBER_JCMD_BIN, std::to_string(pid), "Compiler.perfmap"}, seconds(30));
      if (first) {
        EXPECT_EQ(jcmd.exit_code, 0) << jcmd.output;
      }
      first = false;
    };
    run_ = new JitRun(ProfileJitFixture(
        {EMBER_JAVA_BIN, "-XX:+PreserveFramePointer", "-XX:CompileCommand=quiet",
         "-XX:CompileCommand=dontinline,Phases::*", "-cp", classes, "Phases", "8", "2"},
        dir, 499, "ready\n", write_perf_map));
    samples_ = new std::vector<NamedSample>(WorkloadSamples(*run_));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(run_->dir);
    delete samples_;
    delete run_;
  }
  static JitRun* run_;
  static std::vector<NamedSample>* samples_;
};
JitRun* JavaJitTest::run_ = nullptr;
std::vector<NamedSample>* JavaJitTest::samples_ = nullptr;

// The JVM writes a perf map, and the agent reads it, but the HotSpot walk names the frames it
// stepped (README, "Java: HotSpot frames"): its names, with source lines, win over the map's.
TEST_F(JavaJitTest, SamplesCarryTheProgramsMethodsNested) {
  EXPECT_TRUE(absl::StrContains(run_->agent_log, "naming JIT code from /tmp/perf-"))
      << run_->agent_log;
  CheckNesting(*samples_, 200);
  int64_t walk_named = 0;
  int64_t map_named = 0;
  for (const NamedSample& s : *samples_) {
    for (const std::string& frame : s.lines) {
      if (ScriptFunction(frame).empty()) continue;
      (absl::StartsWith(frame, "Phases.") ? walk_named : map_named) += s.count;
    }
  }
  std::printf("fixture frames named by the HotSpot walk: %lld, by the perf map: %lld\n",
              static_cast<long long>(walk_named), static_cast<long long>(map_named));
  EXPECT_GT(walk_named, 20 * map_named);
}

TEST_F(JavaJitTest, LeafSharesMatchTheProgramsOwnAccounting) {
  CheckLeafShares(*samples_, run_->fixture_output);
}

TEST_F(JavaJitTest, FramesAreTypedJvm) { CheckFrameTypes(*run_, /*kJvm=*/9); }

}  // namespace
}  // namespace ember::testing
