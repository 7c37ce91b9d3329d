// Profiles real programs with ember-agent (as root, with BPF) and checks the profiles against
// the programs' own CPU accounting, then reads them with Google's pprof and headless Chromium.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "profiled_run.h"
#include "support/pprof_reader.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

using std::chrono::seconds;

class PhasesProfileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    run_ = new ProfiledRun(ProfileFixture({EMBER_PHASES_BIN, "8"}, 199));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(run_->output_dir);
    delete run_;
  }
  static ProfiledRun* run_;
};
ProfiledRun* PhasesProfileTest::run_ = nullptr;

TEST_F(PhasesProfileTest, LeafSharesMatchTheProgramsOwnAccounting) {
  std::map<std::string, double> measured_ns = MeasuredCpuNs(run_->fixture_output);
  double measured_total = 0;
  for (const auto& [name, ns] : measured_ns) measured_total += ns;
  ASSERT_EQ(measured_ns.size(), 3u) << run_->fixture_output;

  std::vector<NamedSample> samples = SamplesOf(run_->output_dir, run_->pid);
  std::map<std::string, int64_t> leaf_counts;
  int64_t total = 0;
  for (const NamedSample& s : samples) {
    total += s.count;
    for (size_t i = 0; i < s.functions.size(); ++i) {
      if (IsKernelModule(s.modules[i])) continue;
      leaf_counts[s.functions[i]] += s.count;  // the innermost user frame
      break;
    }
  }
  ExpectSamplesComplete(*run_, total);
  ASSERT_GT(total, 0) << run_->agent_log;
  for (const auto& [leaf, leaf_ns] : measured_ns) {
    double measured_share = leaf_ns / measured_total;
    double profiled_share = static_cast<double>(leaf_counts[leaf]) / total;
    std::printf("%s: profile %.1f%% (%lld of %lld samples), program's own measure %.1f%%\n",
                leaf.c_str(), 100 * profiled_share, static_cast<long long>(leaf_counts[leaf]),
                static_cast<long long>(total), 100 * measured_share);
    EXPECT_NEAR(profiled_share, measured_share, 0.05)
        << leaf << ": profile " << leaf_counts[leaf] << "/" << total << " samples";
  }
}

TEST_F(PhasesProfileTest, StacksReachMainThroughTheCallChain) {
  std::vector<NamedSample> samples = SamplesOf(run_->output_dir, run_->pid);
  int64_t total = 0;
  int64_t reach_main = 0;
  int64_t full_chain = 0;
  for (const NamedSample& s : samples) {
    total += s.count;
    const auto& f = s.functions;
    auto main_it = std::find(f.begin(), f.end(), "main");
    if (main_it != f.end()) reach_main += s.count;
    // leaf_X <- run_phase <- run_phases <- main, in that order.
    auto leaf = std::find_if(f.begin(), f.end(),
                             [](const std::string& n) { return n.rfind("leaf_", 0) == 0; });
    if (leaf != f.end() && f.end() - leaf >= 4 && leaf[1] == "run_phase" &&
        leaf[2] == "run_phases" && leaf[3] == "main") {
      full_chain += s.count;
    }
    EXPECT_EQ(s.process, "phases");
    EXPECT_EQ(s.thread, "phases");
  }
  ASSERT_GT(total, 0);
  std::printf("reach main: %.1f%%, whole chain: %.1f%% of %lld samples\n",
              100.0 * reach_main / total, 100.0 * full_chain / total,
              static_cast<long long>(total));
  EXPECT_GE(static_cast<double>(reach_main) / total, 0.95)
      << reach_main << " of " << total << " samples reach main";
  EXPECT_GE(static_cast<double>(full_chain) / total, 0.9);
}

// main calls run_phases from RunPhasesMain (phase_driver.h), which the compiler inlined into main:
// the location of that call lists RunPhasesMain as an inlined line before main.
TEST_F(PhasesProfileTest, InlinedCallerIsALineOfTheCallersLocation) {
  int64_t through_main = 0;
  int64_t with_inline = 0;
  for (const NamedSample& s : SamplesOf(run_->output_dir, run_->pid)) {
    const auto& f = s.functions;
    auto run_phases = std::find(f.begin(), f.end(), "run_phases");
    if (run_phases == f.end() || run_phases + 1 == f.end() || run_phases[1] != "main") continue;
    through_main += s.count;
    const auto& l = s.lines;
    auto line = std::find(l.begin(), l.end(), "run_phases");
    if (l.end() - line >= 3 && line[1] == "RunPhasesMain" && line[2] == "main") {
      with_inline += s.count;
    }
  }
  ASSERT_GT(through_main, 0) << run_->agent_log;
  EXPECT_EQ(with_inline, through_main);
}

TEST_F(PhasesProfileTest, StartupIsPrintedAndUnderOneSecond) {
  std::smatch match;
  ASSERT_TRUE(std::regex_search(run_->agent_log, match,
                                std::regex(R"(attached to (\d+) CPUs in (\d+) ms)")))
      << run_->agent_log;
  EXPECT_EQ(std::stoi(match[1]), static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  EXPECT_LT(std::stoi(match[2]), 1000);
}

TEST_F(PhasesProfileTest, SigintFlushesEveryInterval) {
  // 8 s of work with 3 s intervals: two full intervals and the flushed last one, which holds the
  // fixture's last seconds up to its exit, just before the SIGINT.
  std::vector<std::string> files = PprofFilesIn(run_->output_dir);
  ASSERT_GE(files.size(), 3u) << run_->agent_log;
  int64_t total = 0;
  for (const NamedSample& s : SamplesOf(run_->output_dir, run_->pid)) total += s.count;
  ExpectSamplesComplete(*run_, total);
  absl::StatusOr<perftools::profiles::Profile> last = ReadPprofFile(files.back());
  ASSERT_TRUE(last.ok()) << last.status();
  int64_t in_last = 0;
  for (const NamedSample& s : NamedSamples(*last)) {
    if (s.pid == run_->pid) in_last += s.count;
  }
  // About 2 of the 8 s: without them the count above falls short.
  EXPECT_GT(in_last, 0) << files.back() << "\n" << run_->agent_log;
  std::printf("[   INFO   ] %lld of %lld samples in the flushed last interval\n",
              static_cast<long long>(in_last), static_cast<long long>(total));
  EXPECT_NE(run_->agent_log.find("flame graph: "), std::string::npos) << run_->agent_log;
}

TEST_F(PhasesProfileTest, GooglePprofReadsTheOutput) {
  ASSERT_FALSE(std::string(EMBER_PPROF_BIN).empty() ||
               std::string(EMBER_PPROF_BIN).ends_with("NOTFOUND"))
      << "Google's pprof is missing: run scripts/setup.sh";
  std::vector<std::string> files = PprofFilesIn(run_->output_dir);
  ASSERT_FALSE(files.empty());
  RunResult result = RunProgram({EMBER_PPROF_BIN, "-top", "-symbolize=none", files[0]});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  for (const char* name : {"leaf_alpha", "leaf_beta", "leaf_gamma"}) {
    EXPECT_NE(result.output.find(name), std::string::npos) << result.output;
  }
}

TEST_F(PhasesProfileTest, FlameGraphLoadsInChromiumWithTheFunctionNames) {
  RunResult result =
      RunProgram({"/bin/bash", EMBER_CHECK_FLAMEGRAPH, run_->output_dir + "/flamegraph.html",
                  "main", "run_phases", "leaf_alpha", "leaf_beta", "leaf_gamma"},
                 seconds(120));
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

TEST(KernelStackTest, ReadOfDevZeroShowsKernelThenWholeUserStack) {
  ProfiledRun run = ProfileFixture({EMBER_READ_ZERO_BIN, "4"}, 199, nullptr, SIGTERM);
  std::vector<NamedSample> samples = SamplesOf(run.output_dir, run.pid);
  const std::set<std::string> read_path = {"read_zero", "iov_iter_zero", "vfs_read", "ksys_read",
                                           "__x64_sys_read"};
  int64_t total = 0;
  int64_t in_read = 0;
  for (const NamedSample& s : samples) {
    total += s.count;
    // Leaf first: kernel frames of the read, then (never interleaved) libc's read(), which has
    // no frame pointer, so only DWARF unwinding of the saved user registers finds its caller,
    // then read_zero_loop and main.
    size_t first_user = 0;
    bool kernel_read = false;
    while (first_user < s.functions.size() && IsKernelModule(s.modules[first_user])) {
      if (read_path.count(s.functions[first_user])) kernel_read = true;
      ++first_user;
    }
    std::vector<std::string> user(s.functions.begin() + first_user, s.functions.end());
    auto loop = std::find(user.begin(), user.end(), "read_zero_loop");
    bool whole = kernel_read && loop != user.end() && loop != user.begin() &&
                 s.modules[first_user].find("libc.so") != std::string::npos &&
                 loop + 1 != user.end() && loop[1] == "main";
    if (whole) in_read += s.count;
  }
  std::filesystem::remove_all(run.output_dir);
  ExpectSamplesComplete(run, total);
  ASSERT_GT(total, 0) << run.agent_log;
  std::printf("kernel read() under libc read <- read_zero_loop <- main: %.1f%% of %lld samples\n",
              100.0 * in_read / total, static_cast<long long>(total));
  EXPECT_GE(static_cast<double>(in_read) / total, 0.9)
      << in_read << " of " << total << " samples show read() in the kernel under read_zero_loop";
}

TEST(DeletedBinaryTest, FramesOfABinaryDeletedAfterStartKeepTheirNames) {
  std::string dir = MakeTempDir();
  std::string copy = dir + "/phases-deleted";
  std::filesystem::copy_file(EMBER_PHASES_BIN, copy);
  std::filesystem::permissions(copy, std::filesystem::perms::owner_all);
  ProfiledRun run = ProfileFixture({copy, "3"}, 199, [&](pid_t pid) {
    // Delete the binary once the fixture runs it (its comm changes at exec).
    for (int i = 0; i < 200; ++i) {
      std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
      std::string name;
      if (std::getline(comm, name) && name == "phases-deleted") break;
      usleep(10000);
    }
    std::filesystem::remove(copy);
  });
  std::vector<NamedSample> samples = SamplesOf(run.output_dir, run.pid);
  std::filesystem::remove_all(run.output_dir);
  std::filesystem::remove_all(dir);
  int64_t total = 0;
  int64_t named = 0;
  for (const NamedSample& s : samples) {
    total += s.count;
    if (std::find(s.functions.begin(), s.functions.end(), "run_phases") != s.functions.end()) {
      named += s.count;
    }
  }
  ExpectSamplesComplete(run, total);
  ASSERT_GT(total, 0) << run.agent_log;
  EXPECT_GE(static_cast<double>(named) / total, 0.9) << named << " of " << total;
}

// System-wide, the agent samples every process but its own (its CPU is in its /metrics; sampling
// itself would have it symbolize its own frames); --profile-self puts its threads back.
TEST(SelfSamplingTest, AgentLeavesItsOwnProcessOutUnlessProfileSelf) {
  for (bool profile_self : {false, true}) {
    SCOPED_TRACE(profile_self ? "--profile-self" : "default");
    const std::string dir = MakeTempDir();
    ASSERT_FALSE(dir.empty());
    // A busy process beside it, which must be sampled either way. It waits for a byte on stdin,
    // then runs its phases for 2 s.
    Subprocess busy({EMBER_PHASES_BIN, "2"});
    busy.WriteStdin("g");
    // 997 Hz: reading kallsyms and symbolizing the machine's first samples after the attach give
    // tens of the agent's own samples.
    std::vector<std::string> argv = {EMBER_AGENT_BIN,
                                     "--sampling-hz",
                                     "997",
                                     "--duration",
                                     "3s",
                                     "--output-dir",
                                     dir,
                                     "--metrics-address",
                                     ""};
    if (profile_self) argv.push_back("--profile-self");
    Subprocess agent(argv);
    ASSERT_EQ(agent.Wait(seconds(60)), 0) << agent.output();
    EXPECT_EQ(busy.Wait(seconds(30)), 0) << busy.output();
    int64_t own = 0;
    int64_t of_busy = 0;
    for (const std::string& file : PprofFilesIn(dir)) {
      absl::StatusOr<perftools::profiles::Profile> profile = ReadPprofFile(file);
      ASSERT_TRUE(profile.ok()) << profile.status();
      for (const NamedSample& sample : NamedSamples(*profile)) {
        if (sample.pid == agent.pid()) own += sample.count;
        if (sample.pid == busy.pid()) of_busy += sample.count;
      }
    }
    EXPECT_GT(of_busy, 0) << agent.output();
    if (profile_self) {
      EXPECT_GT(own, 0) << agent.output();
    } else {
      EXPECT_EQ(own, 0) << agent.output();
    }
  }
}

TEST(AgentErrorsTest, WithoutPrivilegesSaysWhatIsMissing) {
  std::string dir = MakeTempDir();
  std::filesystem::permissions(dir, std::filesystem::perms::all);
  // A copy the unprivileged user can reach even when the checkout is in a 0700 home.
  std::string agent = dir + "/ember-agent";
  std::filesystem::copy_file(EMBER_AGENT_BIN, agent);
  std::filesystem::permissions(agent, std::filesystem::perms::all);
  RunResult result =
      RunProgram({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                  "--inh-caps=-all", agent, "--duration", "2s", "--output-dir", dir + "/out"});
  std::filesystem::remove_all(dir);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(result.output.rfind("ember-agent: missing capabilities CAP_BPF (", 0), 0u)
      << result.output;
  EXPECT_NE(result.output.find("; run as root or grant them"), std::string::npos) << result.output;
  EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
}

}  // namespace
}  // namespace ember::testing
