// Profiles a program built without frame pointers that spins on clock_gettime(CLOCK_MONOTONIC),
// which the vDSO serves (tests/fixtures/unwind/vdso_clock.c): its leaf frames in the vDSO are
// named from the kernel's image (__vdso_clock_gettime, module [vdso]) and the stack continues
// through the vDSO's CFI to the fixture's callers and main, whether the BPF program walks it or
// the agent unwinds the stack copy.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "profiled_run.h"
#include "support/pprof_reader.h"

namespace ember::testing {
namespace {

struct UnwindMode {
  const char* name;
  std::vector<std::string> agent_args;
};

class VdsoProfileTest : public ::testing::TestWithParam<UnwindMode> {};

// Index of the first frame at or after `from` named `function`; functions.size() if none.
size_t IndexOf(const NamedSample& s, const std::string& function, size_t from = 0) {
  auto it = std::find(s.functions.begin() + std::min(from, s.functions.size()), s.functions.end(),
                      function);
  return static_cast<size_t>(it - s.functions.begin());
}

TEST_P(VdsoProfileTest, VdsoLeafIsNamedAndItsCallersFollow) {
  ProfiledRun run =
      ProfileFixture({EMBER_VDSO_CLOCK_BIN, "6"}, 199, nullptr, SIGINT, GetParam().agent_args);
  const std::vector<NamedSample> samples = SamplesOf(run.output_dir, run.pid);
  std::filesystem::remove_all(run.output_dir);
  int64_t total = 0, in_spin = 0, vdso = 0, vdso_named = 0, vdso_whole = 0;
  for (const NamedSample& s : samples) {
    total += s.count;
    const size_t spin = IndexOf(s, "clock_spin");
    if (spin == s.functions.size()) continue;
    in_spin += s.count;
    // A frame in the vDSO below clock_spin (the kernel's frames, if any, come first).
    size_t at = 0;
    while (at < spin && s.modules[at] != "[vdso]") ++at;
    if (at == spin) continue;
    vdso += s.count;
    if (s.functions[at] == "__vdso_clock_gettime") vdso_named += s.count;
    // Above it: libc's clock_gettime at most, then the fixture's chain out to main.
    const std::vector<std::string> chain = {"clock_spin", "clock_outer", "run_phase", "run_phases",
                                            "main"};
    if (spin <= at + 2 && spin + chain.size() <= s.functions.size() &&
        std::equal(chain.begin(), chain.end(), s.functions.begin() + spin)) {
      vdso_whole += s.count;
    }
  }
  const auto is_vdso = [](const NamedSample& s) {
    return std::find(s.modules.begin(), s.modules.end(), "[vdso]") != s.modules.end();
  };
  const std::string stacks = CommonStacks(samples, is_vdso, 5);
  std::printf(
      "%lld samples, %lld in clock_spin, %lld through the vDSO: %.1f%% named, %.1f%% "
      "with their callers whole\n",
      static_cast<long long>(total), static_cast<long long>(in_spin), static_cast<long long>(vdso),
      100 * Share(vdso_named, vdso), 100 * Share(vdso_whole, vdso));
  ASSERT_GT(total, 300) << run.agent_log;
  // Most of the spin is in the vDSO (the loop around it and libc's wrapper are a few
  // instructions).
  EXPECT_GT(Share(vdso, in_spin), 0.5) << stacks;
  EXPECT_GT(Share(vdso_named, vdso), 0.98) << stacks;
  EXPECT_GT(Share(vdso_whole, vdso), 0.98) << stacks;
  // The spin's share of the samples is the fixture's own measure of it: the stacks through the
  // vDSO are neither lost nor cut short.
  const std::map<std::string, double> measured = MeasuredCpuNs(run.fixture_output);
  ASSERT_TRUE(measured.count("clock_outer") && measured.count("compute_leaf"))
      << run.fixture_output;
  const double expected =
      measured.at("clock_outer") / (measured.at("clock_outer") + measured.at("compute_leaf"));
  int64_t phases = 0;
  for (const NamedSample& s : samples) {
    if (IndexOf(s, "run_phase") != s.functions.size()) phases += s.count;
  }
  std::printf("clock_spin: %.1f%% of the phases' samples, %.1f%% by the fixture's measure\n",
              100 * Share(in_spin, phases), 100 * expected);
  EXPECT_NEAR(Share(in_spin, phases), expected, 0.05) << stacks;
}

INSTANTIATE_TEST_SUITE_P(Modes, VdsoProfileTest,
                         ::testing::Values(UnwindMode{"WalkInBpf", {}},
                                           UnwindMode{"SnapshotOnly", {"--bpf-unwind-rows", "0"}}),
                         [](const ::testing::TestParamInfo<UnwindMode>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace ember::testing
