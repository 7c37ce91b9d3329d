// Profiles Java with no JVM flag (issue 34): the fixture tests/fixtures/java (ember.fixture.Phases)
// spends random-length phases in known nested methods on its main thread and measures each
// phase's thread CPU time itself. It runs on every JDK the project's machines get (11 and 21 from
// scripts/setup.sh's .cache/jdks, Debian's 17, the machines' Temurin 25) in three modes: the
// default (interpreter, C1 and C2, with inlining), interpreted only (-Xint) and compiled only
// (-Xcomp). The agent's samples of that thread must carry the fixture's methods nested in their
// order down to main and on into the JVM's native frames that called it, with the leaf shares
// the fixture measured.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "profiled_run.h"
#include "support/pprof_reader.h"

namespace ember::testing {
namespace {

constexpr char kClass[] = "ember.fixture.Phases";

// The fixture's call tree: each method's caller.
const std::map<std::string, std::string> kCallerOf = {
    {"leafAlpha", "alphaOuter"}, {"alphaOuter", "runPhase"}, {"leafBeta", "betaInner"},
    {"betaInner", "betaOuter"},  {"betaOuter", "runPhase"},  {"leafGamma", "runPhase"},
    {"runPhase", "runPhases"},   {"runPhases", "main"}};
const std::vector<std::string> kLeaves = {"leafAlpha", "leafBeta", "leafGamma"};

// The fixture's method a frame names, "" for any other frame. Accepts the class written with dots
// or slashes and followed by '.', "::" or ";::" (a JVM signature's "Lember/fixture/Phases;"), with
// or without a return type before it and a parameter list after the method.
std::string FixtureMethod(const std::string& frame) {
  std::string name = frame;
  std::replace(name.begin(), name.end(), '/', '.');
  const size_t at = name.find(kClass);
  if (at == std::string::npos) return "";
  size_t begin = at + sizeof(kClass) - 1;
  while (begin < name.size() && (name[begin] == '.' || name[begin] == ':' || name[begin] == ';')) {
    ++begin;
  }
  size_t end = begin;
  while (end < name.size() && (absl::ascii_isalnum(name[end]) || name[end] == '_')) ++end;
  std::string method = name.substr(begin, end - begin);
  return kCallerOf.contains(method) || method == "main" ? method : "";
}

// The fixture's main thread: the JVM names its own threads ("C2 CompilerThre", "GC Thread#0",
// ...) and the launcher's two threads keep the process's name; the first of them only waits.
bool OnMainThread(const NamedSample& s) { return s.thread == "java"; }

// The fixture's methods of a sample, leaf first, inlined ones included (pprof's lines).
std::vector<std::string> FixtureFrames(const NamedSample& s) {
  std::vector<std::string> out;
  for (const std::string& line : s.lines) {
    std::string method = FixtureMethod(line);
    if (!method.empty()) out.push_back(method);
  }
  return out;
}

// True when the sample's fixture methods are one whole chain from a leaf to main, and below main
// the native frames that entered Java (JavaCalls::call_helper in libjvm) and the launcher's
// JavaMain follow in that order.
bool NamedDownToTheJvm(const NamedSample& s) {
  std::vector<std::string> frames = FixtureFrames(s);
  if (frames.empty() || std::find(kLeaves.begin(), kLeaves.end(), frames[0]) == kLeaves.end()) {
    return false;
  }
  for (size_t i = 0; i + 1 < frames.size(); ++i) {
    auto caller = kCallerOf.find(frames[i]);
    if (caller == kCallerOf.end() || caller->second != frames[i + 1]) return false;
  }
  if (frames.back() != "main") return false;
  auto main = std::find_if(s.lines.begin(), s.lines.end(),
                           [](const std::string& l) { return FixtureMethod(l) == "main"; });
  auto helper = std::find_if(main, s.lines.end(), [](const std::string& l) {
    return absl::StrContains(l, "JavaCalls::call_helper");
  });
  // From the first fixture frame down to the entry into Java, every frame is named: a frame the
  // walk stepped but did not name would read "[anon]".
  auto first = std::find_if(s.lines.begin(), s.lines.end(),
                            [](const std::string& l) { return !FixtureMethod(l).empty(); });
  if (std::any_of(first, helper, [](const std::string& l) {
        return absl::StartsWith(l, "[anon") || absl::StrContains(l, "[truncated]");
      })) {
    return false;
  }
  return std::any_of(helper, s.lines.end(),
                     [](const std::string& l) { return absl::StrContains(l, "JavaMain"); });
}

// Frames as the failure messages show them: name and the file it was found in.
std::vector<std::string> FramesWithModules(const NamedSample& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.functions.size(); ++i) {
    std::string module =
        i < s.modules.size() ? std::filesystem::path(s.modules[i]).filename().string() : "";
    out.push_back(absl::StrCat(s.functions[i].substr(0, 60), " [", module, "]"));
  }
  return out;
}

struct Jdk {
  const char* name;  // the test parameter: JDK and mode, e.g. "Jdk17Xint"
  const char* home;
  const char* mode;  // "" (the default), "-Xint" or "-Xcomp"
};

void PrintTo(const Jdk& jdk, std::ostream* os) { *os << jdk.name; }

class HotSpotProfileTest : public ::testing::TestWithParam<Jdk> {
 protected:
  static void SetUpTestSuite() { runs_ = new std::map<std::string, ProfiledRun>(); }
  static void TearDownTestSuite() {
    for (const auto& [name, run] : *runs_) std::filesystem::remove_all(run.output_dir);
    delete runs_;
  }
  // One profiled run per JDK and mode, shared by its tests. A JDK scripts/setup.sh did not
  // install fails here.
  static const ProfiledRun& RunOf(const Jdk& jdk) {
    auto it = runs_->find(jdk.name);
    if (it == runs_->end()) {
      const std::string java = std::string(jdk.home) + "/bin/java";
      EXPECT_TRUE(std::filesystem::exists(java)) << java << ": run scripts/setup.sh";
      std::vector<std::string> argv = {java};
      if (*jdk.mode != '\0') argv.push_back(jdk.mode);
      // 10 s of phases at 99 Hz after 1 s of warm-up, which overlaps the agent's start.
      for (const char* arg :
           {"-cp", EMBER_JAVA_FIXTURE_CLASSES, "ember.fixture.Phases", "10", "1"}) {
        argv.push_back(arg);
      }
      it = runs_->emplace(jdk.name, ProfileFixture(argv, 99)).first;
    }
    return it->second;
  }
  static std::map<std::string, ProfiledRun>* runs_;
};
std::map<std::string, ProfiledRun>* HotSpotProfileTest::runs_ = nullptr;

TEST_P(HotSpotProfileTest, SamplesNameTheFixturesMethodsNestedDownToTheJvm) {
  const ProfiledRun& run = RunOf(GetParam());
  std::vector<NamedSample> samples = SamplesOf(run.output_dir, run.pid);
  int64_t total = 0, main_thread = 0, named = 0;
  for (const NamedSample& s : samples) {
    total += s.count;
    if (!OnMainThread(s)) continue;
    main_thread += s.count;
    if (NamedDownToTheJvm(s)) named += s.count;
  }
  ExpectSamplesComplete(run, total);
  ASSERT_GT(main_thread, 0) << run.agent_log;
  std::printf(
      "%s: %.1f%% of %lld main-thread samples (of %lld) name a leaf's whole chain down to "
      "main, JavaCalls::call_helper and JavaMain\n",
      GetParam().name, 100 * Share(named, main_thread), static_cast<long long>(main_thread),
      static_cast<long long>(total));
  std::string common = CommonStacks(samples, OnMainThread, 6, FramesWithModules);
  std::printf("%s: most common main-thread stacks, leaf first:\n%s", GetParam().name,
              common.c_str());
  EXPECT_GE(Share(named, main_thread), 0.9)
      << CommonStacks(
             samples, [](const NamedSample& s) { return OnMainThread(s) && !NamedDownToTheJvm(s); },
             10, FramesWithModules)
      << run.agent_log;
}

TEST_P(HotSpotProfileTest, LeafSharesMatchTheFixturesOwnAccounting) {
  const ProfiledRun& run = RunOf(GetParam());
  std::map<std::string, double> measured_ns = MeasuredCpuNs(run.fixture_output);
  ASSERT_EQ(measured_ns.size(), kLeaves.size()) << run.fixture_output;
  double measured_total = 0;
  for (const auto& [name, ns] : measured_ns) measured_total += ns;
  std::map<std::string, int64_t> counts;
  int64_t total = 0;
  for (const NamedSample& s : SamplesOf(run.output_dir, run.pid)) {
    if (!OnMainThread(s)) continue;
    total += s.count;
    std::vector<std::string> frames = FixtureFrames(s);
    if (!frames.empty()) counts[frames[0]] += s.count;  // the innermost of the fixture's methods
  }
  ASSERT_GT(total, 0) << run.agent_log;
  for (const std::string& leaf : kLeaves) {
    double expected = measured_ns[leaf] / measured_total;
    double profiled = Share(counts[leaf], total);
    std::printf("%s %s: profile %.1f%% (%lld of %lld samples), fixture's own measure %.1f%%\n",
                GetParam().name, leaf.c_str(), 100 * profiled, static_cast<long long>(counts[leaf]),
                static_cast<long long>(total), 100 * expected);
    EXPECT_NEAR(profiled, expected, 0.05) << leaf;
  }
}

// The checks themselves, on stacks written here: a whole chain passes, and each way of breaking
// it (a method out of order, a missing caller, no native frames below main) does not.
NamedSample StackOf(std::vector<std::string> lines) {
  NamedSample s;
  s.lines = lines;
  s.functions = std::move(lines);
  s.thread = "java";
  s.count = 1;
  return s;
}

TEST(HotSpotStackCheckTest, OnlyAWholeChainDownToTheJvmCounts) {
  const std::vector<std::string> native = {
      "StubRoutines (1)",
      "JavaCalls::call_helper(JavaValue*, methodHandle const&, JavaCallArguments*, "
      "JavaThread*)",
      "jni_CallStaticVoidMethod",
      "JavaMain",
      "ThreadJavaMain",
      "start_thread"};
  auto with_native = [&](std::vector<std::string> java) {
    java.insert(java.end(), native.begin(), native.end());
    return StackOf(java);
  };
  EXPECT_TRUE(NamedDownToTheJvm(
      with_native({"ember.fixture.Phases.leafBeta", "ember.fixture.Phases.betaInner",
                   "ember.fixture.Phases.betaOuter", "ember.fixture.Phases.runPhase",
                   "ember.fixture.Phases.runPhases", "ember.fixture.Phases.main"})));
  // Signatures and the JVM's own spelling of the class are names of the same methods.
  EXPECT_TRUE(NamedDownToTheJvm(with_native(
      {"void ember.fixture.Phases.leafGamma()", "long ember/fixture/Phases::runPhase(int, long)",
       "Lember/fixture/Phases;::runPhases",
       "void ember.fixture.Phases.main(java.lang.String[])"})));
  EXPECT_FALSE(NamedDownToTheJvm(
      with_native({"ember.fixture.Phases.leafBeta", "ember.fixture.Phases.betaOuter",
                   "ember.fixture.Phases.betaInner", "ember.fixture.Phases.runPhase",
                   "ember.fixture.Phases.runPhases", "ember.fixture.Phases.main"})));
  EXPECT_FALSE(NamedDownToTheJvm(
      with_native({"ember.fixture.Phases.leafAlpha", "ember.fixture.Phases.runPhase",
                   "ember.fixture.Phases.runPhases", "ember.fixture.Phases.main"})));
  EXPECT_FALSE(NamedDownToTheJvm(
      with_native({"ember.fixture.Phases.runPhase", "ember.fixture.Phases.runPhases",
                   "ember.fixture.Phases.main"})));
  EXPECT_FALSE(NamedDownToTheJvm(
      StackOf({"ember.fixture.Phases.leafGamma", "ember.fixture.Phases.runPhase",
               "ember.fixture.Phases.runPhases", "ember.fixture.Phases.main", "[truncated]"})));
  EXPECT_FALSE(NamedDownToTheJvm(with_native({"[anon]", "[anon]", "[anon]"})));
  // Every frame between the leaf and the entry into Java is named.
  EXPECT_FALSE(NamedDownToTheJvm(
      with_native({"ember.fixture.Phases.leafBeta", "[anon]", "ember.fixture.Phases.betaInner",
                   "ember.fixture.Phases.betaOuter", "ember.fixture.Phases.runPhase",
                   "ember.fixture.Phases.runPhases", "ember.fixture.Phases.main"})));
  EXPECT_FALSE(NamedDownToTheJvm(
      with_native({"ember.fixture.Phases.leafBeta", "ember.fixture.Phases.betaInner",
                   "ember.fixture.Phases.betaOuter", "ember.fixture.Phases.runPhase",
                   "ember.fixture.Phases.runPhases", "ember.fixture.Phases.main", "[truncated]"})));
  // Below main, both the entry into Java and the launcher's thread.
  const std::vector<std::string> chain = {
      "ember.fixture.Phases.leafGamma", "ember.fixture.Phases.runPhase",
      "ember.fixture.Phases.runPhases", "ember.fixture.Phases.main"};
  std::vector<std::string> no_helper = chain, no_launcher = chain;
  no_helper.insert(no_helper.end(), {"[anon]", "JavaMain", "start_thread"});
  no_launcher.insert(no_launcher.end(), {"JavaCalls::call_helper", "[truncated]"});
  EXPECT_FALSE(NamedDownToTheJvm(StackOf(no_helper)));
  EXPECT_FALSE(NamedDownToTheJvm(StackOf(no_launcher)));
  EXPECT_EQ(FixtureMethod("other.Phases.leafAlpha"), "");
  EXPECT_EQ(FixtureMethod("ember.fixture.Phases.leafAlphaX"), "");
}

// Every JDK in each mode; the homes come from CMake (tests/bpf/CMakeLists.txt).
const Jdk kJdks[] = {
    {"Jdk11Default", EMBER_JDK11_HOME, ""},     {"Jdk11Xint", EMBER_JDK11_HOME, "-Xint"},
    {"Jdk11Xcomp", EMBER_JDK11_HOME, "-Xcomp"}, {"Jdk17Default", EMBER_JDK17_HOME, ""},
    {"Jdk17Xint", EMBER_JDK17_HOME, "-Xint"},   {"Jdk17Xcomp", EMBER_JDK17_HOME, "-Xcomp"},
    {"Jdk21Default", EMBER_JDK21_HOME, ""},     {"Jdk21Xint", EMBER_JDK21_HOME, "-Xint"},
    {"Jdk21Xcomp", EMBER_JDK21_HOME, "-Xcomp"}, {"Jdk25Default", EMBER_JDK25_HOME, ""},
    {"Jdk25Xint", EMBER_JDK25_HOME, "-Xint"},   {"Jdk25Xcomp", EMBER_JDK25_HOME, "-Xcomp"}};
INSTANTIATE_TEST_SUITE_P(Jdks, HotSpotProfileTest, ::testing::ValuesIn(kJdks),
                         [](const ::testing::TestParamInfo<Jdk>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace ember::testing
