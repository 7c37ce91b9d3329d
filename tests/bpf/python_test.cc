// Profiles CPython (issue 6): the fixture tests/fixtures/python/phases.py spends random-length
// phases in known nested functions, one of them called by the C function sorted(), and measures
// each phase's thread CPU time itself. Run under Debian's python3.11, under the default python3
// (when it is another interpreter) and under the pyenv builds of 3.8, 3.9, 3.10, 3.12 and 3.13,
// the agent's samples must carry the script's functions (qualified names, walked
// in BPF and named from the code objects) in the right nesting, spliced where
// _PyEval_EvalFrameDefault was, with the leaf shares the script measured.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "profiled_run.h"
#include "support/pprof_reader.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

// The script's call tree: each function's caller (qualified names, as CPython 3.11+ gives them).
const std::map<std::string, std::string> kCallerOf = {{"leaf_alpha", "middle_alpha"},
                                                      {"middle_alpha", "run_phase"},
                                                      {"Worker.leaf_beta", "Worker.beta"},
                                                      {"Worker.beta", "run_phase"},
                                                      {"leaf_gamma", "gamma"},
                                                      {"gamma", "run_phase"},
                                                      {"run_phase", "run_phases"},
                                                      {"run_phases", "main"},
                                                      {"main", "<module>"}};
const std::vector<std::string> kLeaves = {"leaf_alpha", "Worker.leaf_beta", "leaf_gamma"};

// 3.8-3.10 code objects have no qualified name: the method's frames are named without the class.
std::string Qualified(const std::string& name) {
  if (name == "leaf_beta" || name == "beta") return "Worker." + name;
  return name;
}

bool IsScriptFunction(const std::string& name) {
  return kCallerOf.contains(Qualified(name)) || name == "<module>";
}

// The interpreter a test parameter names: Debian's python3.11, or the python3 the tests' PATH
// finds (resolved through wrappers such as pyenv's shims); "" when there is none.
std::string InterpreterOf(const std::string& param) {
  if (param == "DebianPython311") return "/usr/bin/python3.11";
  if (absl::StartsWith(param, "Pyenv3")) {  // "Pyenv310": the newest pyenv build of 3.10
    const std::string minor = "3." + param.substr(6);
    std::string newest;
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator("/root/.pyenv/versions", error)) {
      const std::string name = entry.path().filename().string();
      std::string python = entry.path().string() + "/bin/python" + minor;
      if (absl::StartsWith(name, minor + ".") && std::filesystem::exists(python) &&
          python > newest) {
        newest = python;
      }
    }
    return newest;
  }
  RunResult result =
      RunProgram({"/usr/bin/env", "python3", "-c", "import sys; print(sys.executable)"});
  if (result.exit_code != 0) return "";
  return std::string(absl::StripAsciiWhitespace(result.output));
}

class PythonProfileTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    python_ = InterpreterOf(GetParam());
    // The project's machines carry pyenv's CPython builds in /root/.pyenv/versions; a missing
    // one is a failure, as a missing Debian python3.11 is.
    ASSERT_FALSE(python_.empty())
        << "no interpreter for " << GetParam()
        << " (python3 on PATH, or a pyenv build in /root/.pyenv/versions)";
    std::error_code error;
    if (std::string(GetParam()) != "DebianPython311" &&
        std::filesystem::equivalent(python_, "/usr/bin/python3.11", error)) {
      GTEST_SKIP() << "the default python3 is Debian's python3.11, tested as DebianPython311";
    }
  }
  static void SetUpTestSuite() { runs_ = new std::map<std::string, ProfiledRun>(); }
  static void TearDownTestSuite() {
    for (const auto& [python, run] : *runs_) std::filesystem::remove_all(run.output_dir);
    delete runs_;
  }
  // One profiled run per interpreter, shared by the tests of that interpreter.
  static const ProfiledRun& RunOf(const std::string& python) {
    auto it = runs_->find(python);
    if (it == runs_->end()) {
      it = runs_
               ->emplace(python, ProfileFixture({python, EMBER_PYTHON_FIXTURE, "8"}, 199, nullptr,
                                                SIGINT, {"--log-level", "debug"}))
               .first;
    }
    return it->second;
  }
  static std::map<std::string, ProfiledRun>* runs_;
  std::string python_;  // the interpreter under test
};
std::map<std::string, ProfiledRun>* PythonProfileTest::runs_ = nullptr;

// The script's functions of a sample, leaf first.
std::vector<std::string> ScriptFrames(const NamedSample& sample) {
  std::vector<std::string> out;
  for (const std::string& f : sample.functions) {
    if (IsScriptFunction(f)) out.push_back(Qualified(f));
    if (f == "<module>") break;  // below it, a native `main` is the interpreter's C function
  }
  return out;
}

// True when `frames` (leaf first) is a whole chain of the call tree from its leaf to <module>.
bool IsWholeChain(const std::vector<std::string>& frames) {
  if (frames.empty()) return false;
  for (size_t i = 0; i + 1 < frames.size(); ++i) {
    auto caller = kCallerOf.find(frames[i]);
    if (caller == kCallerOf.end() || caller->second != frames[i + 1]) return false;
  }
  return frames.back() == "<module>";
}

TEST_P(PythonProfileTest, SamplesCarryTheScriptsFunctionsInTheirNesting) {
  const ProfiledRun& run = RunOf(python_);
  ASSERT_NE(run.agent_log.find("walking its Python frames"), std::string::npos) << run.agent_log;
  std::vector<NamedSample> samples = SamplesOf(run.output_dir, run.pid);
  int64_t total = 0, in_leaf_chain = 0;
  std::map<std::string, int64_t> wrong;  // the stacks that were not, for the failure message
  for (const NamedSample& s : samples) {
    total += s.count;
    std::vector<std::string> frames = ScriptFrames(s);
    if (!frames.empty() && std::find(kLeaves.begin(), kLeaves.end(), frames[0]) != kLeaves.end() &&
        IsWholeChain(frames)) {
      in_leaf_chain += s.count;
    } else {
      wrong[absl::StrJoin(s.functions, ";")] += s.count;
    }
  }
  ExpectSamplesComplete(run, total);
  ASSERT_GT(total, 0) << run.agent_log;
  std::printf("%s: %.1f%% of %lld samples carry a leaf's whole chain up to <module>\n",
              python_.c_str(), 100.0 * in_leaf_chain / total, static_cast<long long>(total));
  std::string examples;
  int shown = 0;
  for (const auto& [stack, count] : wrong) {
    if (shown++ < 10) examples += std::to_string(count) + " x " + stack + "\n";
  }
  EXPECT_GE(static_cast<double>(in_leaf_chain) / total, 0.9) << examples << run.agent_log;
}

TEST_P(PythonProfileTest, LeafSharesMatchTheScriptsOwnAccounting) {
  const ProfiledRun& run = RunOf(python_);
  std::map<std::string, double> measured_ns = MeasuredCpuNs(run.fixture_output);
  ASSERT_EQ(measured_ns.size(), kLeaves.size()) << run.fixture_output;
  double measured_total = 0;
  for (const auto& [name, ns] : measured_ns) measured_total += ns;
  std::map<std::string, int64_t> counts;
  int64_t total = 0;
  for (const NamedSample& s : SamplesOf(run.output_dir, run.pid)) {
    total += s.count;
    std::vector<std::string> frames = ScriptFrames(s);
    if (!frames.empty()) counts[frames[0]] += s.count;  // the innermost Python function
  }
  ASSERT_GT(total, 0);
  for (const std::string& leaf : kLeaves) {
    double expected = measured_ns[leaf] / measured_total;
    double profiled = static_cast<double>(counts[leaf]) / total;
    std::printf("%s %s: profile %.1f%% (%lld of %lld samples), script's own measure %.1f%%\n",
                python_.c_str(), leaf.c_str(), 100 * profiled, static_cast<long long>(counts[leaf]),
                static_cast<long long>(total), 100 * expected);
    EXPECT_NEAR(profiled, expected, 0.05) << leaf;
  }
}

// leaf_gamma is sorted()'s key function: an eval call of its own, under sorted's native frames,
// which must stay between it and gamma.
TEST_P(PythonProfileTest, NativeFramesOfCFunctionsStayBetweenPythonFrames) {
  const ProfiledRun& run = RunOf(python_);
  int64_t gamma = 0, through_sort = 0;
  for (const NamedSample& s : SamplesOf(run.output_dir, run.pid)) {
    const auto& f = s.functions;
    auto leaf = std::find(f.begin(), f.end(), "leaf_gamma");
    auto caller = std::find(leaf, f.end(), "gamma");
    if (leaf == f.end() || caller == f.end()) continue;
    gamma += s.count;
    if (std::any_of(leaf + 1, caller, [](const std::string& n) {
          return absl::StrContains(n, "sort") && !IsScriptFunction(n);
        })) {
      through_sort += s.count;
    }
  }
  ASSERT_GT(gamma, 0) << run.agent_log;
  EXPECT_GE(static_cast<double>(through_sort) / gamma, 0.9) << through_sort << " of " << gamma;
}

TEST_P(PythonProfileTest, PythonFramesAreTypedCPythonWithFileAndLine) {
  const ProfiledRun& run = RunOf(python_);
  std::map<std::string, std::set<int>> types = FlameGraphTypes(run.output_dir + "/flamegraph.html");
  int checked = 0;
  for (const auto& [name, kinds] : types) {
    if (!IsScriptFunction(name)) continue;
    ++checked;
    constexpr int kCPython = 11;  // FlameGraph::NodeType::kCPython
    if (name == "main") {         // also the interpreter's C main in some builds
      EXPECT_TRUE(kinds.contains(kCPython)) << name;
    } else {
      EXPECT_EQ(kinds, std::set<int>{kCPython}) << name;
    }
  }
  EXPECT_GE(checked, 9) << "script frames in the flame graph";
  // pprof lines: the function's file is the script.
  bool file_seen = false;
  for (const std::string& file : PprofFilesIn(run.output_dir)) {
    auto profile = ReadPprofFile(file);
    ASSERT_TRUE(profile.ok());
    for (const auto& fn : profile->function()) {
      if (profile->string_table(fn.name()) == "leaf_alpha") {
        EXPECT_TRUE(absl::EndsWith(profile->string_table(fn.filename()), "/phases.py"));
        file_seen = true;
      }
    }
    for (const auto& loc : profile->location()) {
      for (const auto& line : loc.line()) {
        for (const auto& fn : profile->function()) {
          if (fn.id() == line.function_id() && profile->string_table(fn.name()) == "leaf_alpha") {
            EXPECT_GE(line.line(), 12);  // def leaf_alpha is on line 12, its body below
            EXPECT_LE(line.line(), 16);
          }
        }
      }
    }
  }
  EXPECT_TRUE(file_seen);
}

INSTANTIATE_TEST_SUITE_P(Interpreters, PythonProfileTest,
                         ::testing::Values("DebianPython311", "DefaultPython3", "Pyenv38",
                                           "Pyenv39", "Pyenv310", "Pyenv312", "Pyenv313"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

// CPython 3.7 (pyenv's build) is older than the layouts: the agent says so once and
// the process keeps its native stacks.
TEST(PythonUnsupportedTest, AnUnsupportedVersionIsLoggedOnceAndKeepsNativeStacks) {
  const std::string python = InterpreterOf("Pyenv37");
  ASSERT_FALSE(python.empty()) << "no pyenv build of 3.7 in /root/.pyenv/versions";
  ProfiledRun run = ProfileFixture({python, EMBER_PYTHON_FIXTURE, "3"}, 99);
  size_t lines = 0;
  for (size_t at = run.agent_log.find("is not supported"); at != std::string::npos;
       at = run.agent_log.find("is not supported", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u) << run.agent_log;
  EXPECT_EQ(run.agent_log.find("walking its Python frames"), std::string::npos) << run.agent_log;
  int64_t total = 0, script = 0, eval = 0;
  for (const NamedSample& s : SamplesOf(run.output_dir, run.pid)) {
    total += s.count;
    if (!ScriptFrames(s).empty()) script += s.count;
    if (std::find(s.functions.begin(), s.functions.end(), "_PyEval_EvalFrameDefault") !=
        s.functions.end()) {
      eval += s.count;
    }
  }
  ExpectSamplesComplete(run, total);
  EXPECT_EQ(script, 0);
  EXPECT_GE(static_cast<double>(eval) / std::max<int64_t>(total, 1), 0.9);
  std::filesystem::remove_all(run.output_dir);
}

// Threads (Debian's python3.11): each sampled thread is matched to its own thread state (by its fs
// base, whether or not it holds the GIL), so each sample carries its own thread's functions.
TEST(PythonThreadsTest, EachThreadCarriesItsOwnFunctions) {
  ProfiledRun run = ProfileFixture({"/usr/bin/python3.11", EMBER_PYTHON_THREADS_FIXTURE, "6"}, 199);
  const std::vector<std::string> worker = {"leaf_thread", "thread_loop", "Thread.run",
                                           "Thread._bootstrap_inner", "Thread._bootstrap"};
  const std::vector<std::string> main_thread = {"leaf_main", "main_loop", "main", "<module>"};
  const std::set<std::string> names = {
      "leaf_thread",       "thread_loop", "Thread.run", "Thread._bootstrap_inner",
      "Thread._bootstrap", "leaf_main",   "main_loop",  "main",
      "<module>"};
  int64_t total = 0, in_worker = 0, in_main = 0;
  std::map<std::string, int64_t> wrong;
  for (const NamedSample& s : SamplesOf(run.output_dir, run.pid)) {
    total += s.count;
    std::vector<std::string> frames;
    for (const std::string& f : s.functions) {
      if (names.contains(f)) frames.push_back(f);
      if (f == "<module>" || f == "Thread._bootstrap") break;
    }
    if (frames == worker) {
      in_worker += s.count;
    } else if (frames == main_thread) {
      in_main += s.count;
    } else {
      wrong[absl::StrJoin(s.functions, ";")] += s.count;
    }
  }
  ExpectSamplesComplete(run, total);
  ASSERT_GT(total, 0) << run.agent_log;
  std::printf("threads: %.1f%% in the workers' chain, %.1f%% in the main thread's, of %lld\n",
              100.0 * in_worker / total, 100.0 * in_main / total, static_cast<long long>(total));
  std::string examples;
  int shown = 0;
  for (const auto& [stack, count] : wrong) {
    if (shown++ < 10) examples += std::to_string(count) + " x " + stack + "\n";
  }
  EXPECT_GE(static_cast<double>(in_worker + in_main) / total, 0.9) << examples << run.agent_log;
  EXPECT_GE(static_cast<double>(in_worker) / total, 0.3);  // two of the three threads
  EXPECT_GE(static_cast<double>(in_main) / total, 0.15);
  std::filesystem::remove_all(run.output_dir);
}

// An application embedding CPython (tests/fixtures/profiled/embedded_python.c) loads libpython3.11
// with dlopen 1.5 s of CPU into its run, after the agent has read it and marked it known to the
// BPF side: the Python frames it then runs must still be walked (the mark is rewritten to say so).
TEST(PythonEmbeddedTest, AnInterpreterLoadedLaterIsWalked) {
  ProfiledRun run = ProfileFixture({EMBER_EMBEDDED_PYTHON_FIXTURE, "1.5", "6"}, 99);
  ASSERT_TRUE(absl::StrContains(run.agent_log, "walking its Python frames")) << run.agent_log;
  int64_t total = 0, native = 0, python = 0;
  std::map<std::string, int64_t> other;  // stacks of neither phase, for the failure message
  for (const NamedSample& s : SamplesOf(run.output_dir, run.pid)) {
    total += s.count;
    const auto has = [&](const char* name) {
      return std::find(s.functions.begin(), s.functions.end(), name) != s.functions.end();
    };
    if (has("embedded_native_spin")) {
      native += s.count;
    } else if (has("embedded_leaf") && has("embedded_loop")) {
      python += s.count;
    } else {
      other[absl::StrJoin(s.functions, ";")] += s.count;
    }
  }
  std::string examples;
  for (const auto& [stack, count] : other) {
    if (count * 50 >= total) examples += std::to_string(count) + " x " + stack + "\n";
  }
  ExpectSamplesComplete(run, total);
  ASSERT_GT(total, 0) << run.agent_log;
  std::printf("embedded: %.1f%% native phase, %.1f%% with the Python frames, of %lld\n",
              100.0 * native / total, 100.0 * python / total, static_cast<long long>(total));
  // 1.5 s native, 6 s Python. The agent reads a known process's samples at its 2 s drain, and
  // only then finds the new interpreter: up to 2.5 s of the Python phase keep native frames.
  EXPECT_GE(Share(native, total), 0.12);
  EXPECT_GE(Share(python, total), 0.3) << examples << run.agent_log;
  std::filesystem::remove_all(run.output_dir);
}

}  // namespace
}  // namespace ember::testing
