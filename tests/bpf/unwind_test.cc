// Profiles a program built without frame pointers (tests/fixtures/unwind/cfi_chains.c), by GCC
// and by clang linked with LLD, and checks that the agent unwinds it with DWARF CFI: through a
// 17-frame chain, a short one, and libc's qsort, back to main, with leaf shares that match the
// program's own CPU accounting (issue 3); and a Rust release build (tests/fixtures/unwind/burn.rs)
// with both symbol manglings, whose frames must carry demangled names (issue 32).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "profiled_run.h"
#include "support/pprof_reader.h"

namespace ember::testing {
namespace {

// Where every phase of the fixture is entered from: run_phase <- run_phases <- main.
const std::vector<std::string> kRunPhaseChain = {"run_phase", "run_phases", "main"};

// Index of the innermost frame that is neither kernel nor marker; functions.size() if none.
size_t LeafIndex(const NamedSample& s) {
  for (size_t i = 0; i < s.functions.size(); ++i) {
    if (!IsKernelModule(s.modules[i])) return i;
  }
  return s.functions.size();
}

std::string LeafOf(const NamedSample& s) {
  size_t leaf = LeafIndex(s);
  return leaf < s.functions.size() ? s.functions[leaf] : "";
}

// True if functions[from...] starts with `chain`.
bool ChainAt(const std::vector<std::string>& functions, size_t from,
             const std::vector<std::string>& chain) {
  return from + chain.size() <= functions.size() &&
         std::equal(chain.begin(), chain.end(), functions.begin() + from);
}

// The most common stacks among `samples` that `bad` picks, user frames from the leaf outwards,
// so that a failure shows where unwinding stopped.
std::string CommonBadStacks(const std::vector<NamedSample>& samples,
                            const std::function<bool(const NamedSample&)>& bad) {
  return CommonStacks(samples, bad, 3, [](const NamedSample& s) {
    return std::vector<std::string>(s.functions.begin() + LeafIndex(s), s.functions.end());
  });
}

// Samples whose leaf is `leaf`, and how many of them continue with exactly `callers`.
struct ChainCount {
  int64_t with_leaf = 0;
  int64_t whole = 0;
};

ChainCount CountChain(const std::vector<NamedSample>& samples, const std::string& leaf,
                      const std::vector<std::string>& callers) {
  ChainCount count;
  for (const NamedSample& s : samples) {
    size_t i = LeafIndex(s);
    if (i == s.functions.size() || s.functions[i] != leaf) continue;
    count.with_leaf += s.count;
    if (ChainAt(s.functions, i + 1, callers)) count.whole += s.count;
  }
  return count;
}

// At least 95% of the samples whose leaf is `leaf` continue with exactly `callers`.
void ExpectChainWhole(const std::vector<NamedSample>& samples, const std::string& leaf,
                      const std::vector<std::string>& callers) {
  ChainCount count = CountChain(samples, leaf, callers);
  std::printf("%s: whole %zu-frame chain in %.1f%% of %lld samples\n", leaf.c_str(),
              callers.size() + 1, 100 * Share(count.whole, count.with_leaf),
              static_cast<long long>(count.with_leaf));
  ASSERT_GT(count.with_leaf, 0);
  EXPECT_GE(Share(count.whole, count.with_leaf), 0.95)
      << count.whole << " of " << count.with_leaf << "; most common " << leaf << " stacks:\n"
      << CommonBadStacks(samples, [&](const NamedSample& s) { return LeafOf(s) == leaf; });
}

// At least 98% of `samples` (`total` in all) have main on their stack.
void ExpectSamplesReachMain(const std::vector<NamedSample>& samples, int64_t total) {
  auto misses_main = [](const NamedSample& s) {
    return std::find(s.functions.begin(), s.functions.end(), "main") == s.functions.end();
  };
  int64_t reach_main = 0;
  for (const NamedSample& s : samples) {
    if (!misses_main(s)) reach_main += s.count;
  }
  std::printf("reach main: %.1f%% (%lld of %lld samples)\n", 100 * Share(reach_main, total),
              static_cast<long long>(reach_main), static_cast<long long>(total));
  EXPECT_GE(Share(reach_main, total), 0.98)
      << reach_main << " of " << total << " samples reach main; most common of the others:\n"
      << CommonBadStacks(samples, misses_main);
}

// The leaf shares of the fixture's measured functions (`leaves`: the name it prints -> the
// function the profile names) are within 3 points of its own accounting. The program measures
// those functions only, so their shares are of them alone in both: the rest (its loop and clock
// reads, start-up) is in the profile's total, not in its measure.
void ExpectLeafSharesMatch(const ProfiledRun& run, const std::vector<NamedSample>& samples,
                           const std::map<std::string, std::string>& leaves) {
  std::map<std::string, double> measured_ns = MeasuredCpuNs(run.fixture_output);
  ASSERT_EQ(measured_ns.size(), leaves.size()) << run.fixture_output;
  double measured_total = 0;
  for (const auto& [name, ns] : measured_ns) measured_total += ns;
  std::map<std::string, int64_t> leaf_counts;
  for (const NamedSample& s : samples) leaf_counts[LeafOf(s)] += s.count;
  int64_t in_measured = 0;
  for (const auto& [printed, function] : leaves) in_measured += leaf_counts[function];
  for (const auto& [printed, function] : leaves) {
    ASSERT_EQ(measured_ns.count(printed), 1u) << run.fixture_output;
    const double measured_share = measured_ns[printed] / measured_total;
    const double profiled_share = Share(leaf_counts[function], in_measured);
    std::printf("%s: profile %.1f%% (%lld of %lld samples), program's own measure %.1f%%\n",
                function.c_str(), 100 * profiled_share,
                static_cast<long long>(leaf_counts[function]), static_cast<long long>(in_measured),
                100 * measured_share);
    EXPECT_NEAR(profiled_share, measured_share, 0.03)
        << function << ": profile " << leaf_counts[function] << "/" << in_measured
        << " samples; most common leaves:\n"
        << CommonStacks(
               samples, [](const NamedSample&) { return true; }, 5,
               [](const NamedSample& s) { return std::vector<std::string>{LeafOf(s)}; });
  }
}

// Tests of one fixture run per parameter, made once and shared by the parameter's tests.
// `Param` names the run (`name`), the program (`fixture`) and the agent's extra flags
// (`agent_args`).
template <typename Param>
class SharedRunTest : public ::testing::TestWithParam<Param> {
 protected:
  struct Run {
    ProfiledRun run;
    std::vector<NamedSample> samples;
  };
  static const Run& RunOf(const Param& param) {
    static std::map<std::string, Run>* runs = new std::map<std::string, Run>();
    auto it = runs->find(param.name);
    if (it == runs->end()) {
      Run r;
      r.run = ProfileFixture({param.fixture, "8"}, 199, nullptr, SIGINT, param.agent_args);
      r.samples = SamplesOf(r.run.output_dir, r.run.pid);
      std::filesystem::remove_all(r.run.output_dir);
      it = runs->emplace(param.name, std::move(r)).first;
    }
    return it->second;
  }
  void SetUp() override {
    const Run& r = RunOf(this->GetParam());
    run_ = &r.run;
    samples_ = &r.samples;
    total_ = 0;
    for (const NamedSample& s : *samples_) {
      ASSERT_EQ(s.functions.size(), s.modules.size());
      total_ += s.count;
    }
    ASSERT_GT(total_, 0) << run_->agent_log;
  }

  const ProfiledRun* run_ = nullptr;
  const std::vector<NamedSample>* samples_ = nullptr;
  int64_t total_ = 0;
};

// The two ways the agent unwinds code without frame pointers: walked in BPF by the CFI rows it
// loads (the default, with the snapshot for what that walk leaves), and from the snapshot alone;
// each on the GCC build and on the clang + LLD one, whose segments' file offsets and addresses
// differ.
struct UnwindMode {
  const char* name;
  std::vector<std::string> agent_args;
  const char* fixture = EMBER_CFI_CHAINS_BIN;
};
const UnwindMode kWalkInBpf = {"WalkInBpf", {}};
const UnwindMode kSnapshotOnly = {"SnapshotOnly", {"--bpf-unwind-rows", "0"}};
const UnwindMode kLldWalkInBpf = {"ClangLldWalkInBpf", {}, EMBER_CFI_CHAINS_LLD_BIN};
const UnwindMode kLldSnapshotOnly = {
    "ClangLldSnapshotOnly", {"--bpf-unwind-rows", "0"}, EMBER_CFI_CHAINS_LLD_BIN};

void PrintTo(const UnwindMode& mode, std::ostream* out) { *out << mode.name; }

class CfiUnwindTest : public SharedRunTest<UnwindMode> {};

TEST_P(CfiUnwindTest, EverySampleIsThere) { ExpectSamplesComplete(*run_, total_); }

TEST_P(CfiUnwindTest, SamplesReachMain) { ExpectSamplesReachMain(*samples_, total_); }

TEST_P(CfiUnwindTest, LeafSharesMatchTheProgramsOwnAccounting) {
  ExpectLeafSharesMatch(*run_, *samples_,
                        {{"compare_items", "compare_items"},
                         {"leaf_deep", "leaf_deep"},
                         {"leaf_shallow", "leaf_shallow"}});
}

TEST_P(CfiUnwindTest, DeepChainIsWhole) {
  // leaf_deep <- deep_16 <- ... <- deep_01 <- run_phase <- run_phases <- main.
  std::vector<std::string> callers;
  for (int i = 16; i >= 1; --i) callers.push_back(absl::StrCat(i < 10 ? "deep_0" : "deep_", i));
  callers.insert(callers.end(), kRunPhaseChain.begin(), kRunPhaseChain.end());
  ExpectChainWhole(*samples_, "leaf_deep", callers);
}

TEST_P(CfiUnwindTest, ShallowChainIsWhole) {
  std::vector<std::string> callers = {"shallow_caller"};
  callers.insert(callers.end(), kRunPhaseChain.begin(), kRunPhaseChain.end());
  ExpectChainWhole(*samples_, "leaf_shallow", callers);
}

TEST_P(CfiUnwindTest, QsortComparatorUnwindsThroughLibc) {
  // compare_items <- one or more libc frames (qsort's merge sort) <- sort_phase <- run_phase <-
  // run_phases <- main. Debian's libc has no frame pointers, only CFI.
  std::vector<std::string> callers = {"sort_phase"};
  callers.insert(callers.end(), kRunPhaseChain.begin(), kRunPhaseChain.end());
  int64_t with_leaf = 0;
  int64_t whole = 0;
  for (const NamedSample& s : *samples_) {
    size_t i = LeafIndex(s);
    if (i == s.functions.size() || s.functions[i] != "compare_items") continue;
    with_leaf += s.count;
    size_t j = i + 1;
    while (j < s.functions.size() && s.modules[j].find("libc.so") != std::string::npos) ++j;
    if (j > i + 1 && ChainAt(s.functions, j, callers)) whole += s.count;
  }
  std::printf("compare_items: through libc to main in %.1f%% of %lld samples\n",
              100 * Share(whole, with_leaf), static_cast<long long>(with_leaf));
  ASSERT_GT(with_leaf, 0);
  EXPECT_GE(Share(whole, with_leaf), 0.95)
      << whole << " of " << with_leaf << "; most common compare_items stacks:\n"
      << CommonBadStacks(*samples_,
                         [](const NamedSample& s) { return LeafOf(s) == "compare_items"; });
}

INSTANTIATE_TEST_SUITE_P(Modes, CfiUnwindTest,
                         ::testing::Values(kWalkInBpf, kSnapshotOnly, kLldWalkInBpf,
                                           kLldSnapshotOnly),
                         [](const ::testing::TestParamInfo<UnwindMode>& info) {
                           return std::string(info.param.name);
                         });

// The numbers of the agent's "user stacks walked in BPF: N whole, M stopped short" line; nullopt
// when it has none.
std::optional<std::pair<int64_t, int64_t>> WalkedInBpf(const std::string& agent_log) {
  size_t at = agent_log.find("user stacks walked in BPF: ");
  if (at == std::string::npos) return std::nullopt;
  long long whole = 0;
  long long stopped = 0;
  if (std::sscanf(agent_log.c_str() + at, "user stacks walked in BPF: %lld whole, %lld stopped",
                  &whole, &stopped) != 2) {
    return std::nullopt;
  }
  return std::make_pair(static_cast<int64_t>(whole), static_cast<int64_t>(stopped));
}

// Once its tables are loaded (in the first second: they are built in the background), the
// fixture's stacks are walked to their first frame in BPF, libc's included: the agent gets
// addresses, not stack copies.
void ExpectMostStacksWalkedWholeInBpf(const char* fixture) {
  const ProfiledRun run =
      ProfileFixture({fixture, "8"}, 199, nullptr, SIGINT, kWalkInBpf.agent_args);
  std::filesystem::remove_all(run.output_dir);
  std::optional<std::pair<int64_t, int64_t>> walked = WalkedInBpf(run.agent_log);
  ASSERT_TRUE(walked.has_value()) << run.agent_log;
  const auto [whole, stopped] = *walked;
  std::printf("walked in BPF: %lld whole, %lld stopped short\n", static_cast<long long>(whole),
              static_cast<long long>(stopped));
  // Most of the fixture's samples (its CPU time at 199 Hz) went through the BPF walk.
  ASSERT_GE(static_cast<double>(whole + stopped), 0.5 * run.fixture_cpu_seconds * run.hz)
      << run.agent_log;
  // 0.5 s to 1 s of the 8 s go by before the tables are in (more on a loaded machine).
  EXPECT_GE(Share(whole, whole + stopped), 0.75) << run.agent_log;
}

TEST(BpfWalkTest, MostStacksAreWalkedWholeInBpf) {
  ExpectMostStacksWalkedWholeInBpf(EMBER_CFI_CHAINS_BIN);
}

// The BPF walk looks rows up by ELF address, through the bias of the segment a mapping maps:
// LLD's text segment is placed apart from its file offset by another amount than its first one.
TEST(BpfWalkTest, LldLinkedStacksAreWalkedWholeInBpf) {
  ExpectMostStacksWalkedWholeInBpf(EMBER_CFI_CHAINS_LLD_BIN);
}
TEST(BpfWalkTest, RustReleaseStacksAreWalkedWholeInBpf) {
  ExpectMostStacksWalkedWholeInBpf(EMBER_BURN_LEGACY_BIN);
}

// With --bpf-unwind-rows 0 the BPF program walks nothing itself.
TEST(BpfWalkTest, NoWalkInBpfWithoutRows) {
  const ProfiledRun run =
      ProfileFixture({EMBER_CFI_CHAINS_BIN, "1"}, 199, nullptr, SIGINT, kSnapshotOnly.agent_args);
  std::filesystem::remove_all(run.output_dir);
  EXPECT_EQ(run.agent_log.find("user stacks walked in BPF"), std::string::npos) << run.agent_log;
  EXPECT_NE(run.agent_log.find("user stacks unwound with CFI"), std::string::npos) << run.agent_log;
}

// The same program with its CFI only in .debug_frame (the functions of its own have no .eh_frame
// entries), as some toolchains and -fno-asynchronous-unwind-tables builds leave it.
TEST(DebugFrameUnwindTest, StacksReachMainThroughTheDeepChain) {
  ProfiledRun run = ProfileFixture({EMBER_CFI_CHAINS_DEBUG_FRAME_BIN, "4"}, 199);
  std::vector<NamedSample> samples = SamplesOf(run.output_dir, run.pid);
  std::filesystem::remove_all(run.output_dir);
  int64_t total = 0;
  for (const NamedSample& s : samples) total += s.count;
  ExpectSamplesComplete(run, total);
  ASSERT_GT(total, 0) << run.agent_log;
  ExpectSamplesReachMain(samples, total);
  std::vector<std::string> callers;
  for (int i = 16; i >= 1; --i) callers.push_back(absl::StrCat(i < 10 ? "deep_0" : "deep_", i));
  callers.insert(callers.end(), kRunPhaseChain.begin(), kRunPhaseChain.end());
  ExpectChainWhole(samples, "leaf_deep", callers);
}

// A Rust release build (opt-level 3, rustc's default LLD link, no frame pointers). Its three
// phases' leaves, by the names the fixture prints and the names the profile must carry: GNU
// libiberty's demangler prints a legacy name with its generic parameters and without the hash,
// and a v0 name with the instantiation's arguments, which v0 encodes, as `<Type>::method` (the
// form Rust's own demangler prints).
struct RustBuild {
  const char* name;
  const char* fixture;
  std::map<std::string, std::string> leaves;  // printed name -> demangled function name
  std::vector<std::string> agent_args = {};
};
const RustBuild kLegacyMangling = {"Legacy",
                                   EMBER_BURN_LEGACY_BIN,
                                   {{"rs_hot_leaf", "burn::server::Handler<T>::rs_hot_leaf"},
                                    {"rs_cold_leaf", "burn::store::rs_cold_leaf"},
                                    {"rs_deep_leaf", "burn::rs_deep_leaf"}}};
const RustBuild kV0Mangling = {"V0",
                               EMBER_BURN_V0_BIN,
                               {{"rs_hot_leaf", "<burn::server::Handler<u32>>::rs_hot_leaf"},
                                {"rs_cold_leaf", "burn::store::rs_cold_leaf"},
                                {"rs_deep_leaf", "burn::rs_deep_leaf"}}};

void PrintTo(const RustBuild& build, std::ostream* out) { *out << build.name; }

class RustReleaseTest : public SharedRunTest<RustBuild> {};

TEST_P(RustReleaseTest, SamplesReachMain) {
  ExpectSamplesComplete(*run_, total_);
  ExpectSamplesReachMain(*samples_, total_);
}

TEST_P(RustReleaseTest, LeafSharesMatchTheProgramsOwnAccounting) {
  ExpectLeafSharesMatch(*run_, *samples_, GetParam().leaves);
}

// Every frame of the program's own file has a demangled name: no legacy hash or $LT$ escape,
// and no name left mangled in either scheme.
TEST_P(RustReleaseTest, OwnFramesAreDemangled) {
  auto mangled = [](const std::string& name) {
    // A legacy name's hash: "::h" and 16 hex digits at its end.
    constexpr size_t kHash = 3 + 16;
    const bool hash =
        name.size() > kHash && name.compare(name.size() - kHash, 3, "::h") == 0 &&
        name.find_first_not_of("0123456789abcdef", name.size() - 16) == std::string::npos;
    return hash || name.starts_with("_R") || name.starts_with("_ZN") ||
           name.find("$LT$") != std::string::npos;
  };
  const std::string fixture = std::filesystem::path(GetParam().fixture).filename();
  int64_t own_frames = 0;
  std::map<std::string, int64_t> left_mangled;
  for (const NamedSample& s : *samples_) {
    for (size_t i = 0; i < s.functions.size(); ++i) {
      if (!s.modules[i].ends_with(fixture)) continue;
      own_frames += s.count;
      if (mangled(s.functions[i])) left_mangled[s.functions[i]] += s.count;
    }
  }
  ASSERT_GT(own_frames, 0);
  std::string names;
  for (const auto& [name, count] : left_mangled) absl::StrAppend(&names, "  ", name, "\n");
  EXPECT_TRUE(left_mangled.empty()) << "names left mangled:\n" << names;
}

// The deep phase's leaf is under its six links, then the phase driver, then main.
TEST_P(RustReleaseTest, DeepChainIsWhole) {
  std::vector<std::string> callers;
  for (int i = 6; i >= 1; --i) callers.push_back(absl::StrCat("burn::deep_", i));
  callers.insert(callers.end(), {"burn::deep_phase", "burn::run_phase", "burn::run_phases"});
  ExpectChainWhole(*samples_, "burn::rs_deep_leaf", callers);
}

INSTANTIATE_TEST_SUITE_P(Manglings, RustReleaseTest,
                         ::testing::Values(kLegacyMangling, kV0Mangling),
                         [](const ::testing::TestParamInfo<RustBuild>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace ember::testing
