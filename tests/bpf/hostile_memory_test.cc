// A hostile workload's process memory (issue 31): a python3.11 process rewrites, with ctypes, the
// header of the str that names the function it runs (tests/fixtures/python/hostile_name.py): 4
// bytes a character and 2^62 + 1 characters, a length whose product with the kind wraps to 4. The
// agent must refuse it and count the refusal in /metrics, keep the process's samples (native
// frames, and the Python frames it could read), and end its run on time with exit 0.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "profiled_run.h"
#include "support/pprof_reader.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

using std::chrono::seconds;

constexpr int kHz = 199;
constexpr int kDurationS = 20;
constexpr double kSpinS = 5;

// The index of `name` in the frames (leaf first) from `from` on, or size() when absent.
size_t Find(const std::vector<std::string>& frames, const std::string& name, size_t from = 0) {
  auto it = std::find(frames.begin() + std::min(from, frames.size()), frames.end(), name);
  return static_cast<size_t>(it - frames.begin());
}

TEST(HostileMemoryTest, AStrClaiming2To62Plus1FourByteCharactersIsRefusedAndCounted) {
  const std::string dir = MakeTempDir();
  ASSERT_FALSE(dir.empty());
  Subprocess fixture({"/usr/bin/python3.11", EMBER_HOSTILE_NAME_FIXTURE, absl::StrCat(kSpinS)});
  // With the chart's capabilities: the refusal must hold where the agent is deployed.
  Subprocess agent(WithTheChartsCapabilities(
      {EMBER_AGENT_BIN, "--pid", std::to_string(fixture.pid()), "--sampling-hz",
       std::to_string(kHz), "--export-interval", "1s", "--duration", absl::StrCat(kDurationS, "s"),
       "--output-dir", dir, "--metrics-address", "127.0.0.1:0"}));
  ASSERT_TRUE(agent.WaitForOutput("status endpoint", seconds(30))) << agent.output();
  const auto started = std::chrono::steady_clock::now();
  const std::string endpoint = StatusEndpoint(agent.output());
  ASSERT_FALSE(endpoint.empty()) << agent.output();

  fixture.WriteStdin("g");
  ASSERT_EQ(fixture.Wait(seconds(60)), 0) << fixture.output();
  const std::map<std::string, double> cpu_ns = MeasuredCpuNs(fixture.output());
  ASSERT_TRUE(cpu_ns.contains("spin")) << fixture.output();
  // The samples of the spin's last moments are read and named within a few loop turns.
  std::this_thread::sleep_for(seconds(2));
  auto [status, page] = HttpGet(endpoint + "/metrics");
  ASSERT_EQ(status, 200) << page;
  const std::optional<double> refused =
      MetricValue(page, "ember_python_frame_names_total{result=\"implausible\"}");
  ASSERT_TRUE(refused.has_value()) << page;
  EXPECT_GE(*refused, 1) << page;
  // The frames that could be read were named.
  EXPECT_GE(MetricValue(page, "ember_python_frame_names_total{result=\"named\"}").value_or(0), 2)
      << page;

  // Stayed small: a walk that believed the length would have asked for 2^64 bytes. (Profiling one
  // process, the agent stays near 60 MB.)
  const uint64_t peak = PeakRssBytes(agent.pid());
  EXPECT_GT(peak, 0u);
  EXPECT_LT(peak, AgentPeakRssBound(uint64_t{256} << 20))
      << "agent peak RSS " << (peak >> 10) << " kB";

  // Ends by itself at --duration, exit 0: no crash, no hang.
  EXPECT_EQ(agent.Wait(seconds(kDurationS + 30)), 0) << agent.output();
  const double ran_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_LE(ran_s, kDurationS + 10) << agent.output();
  EXPECT_TRUE(absl::StrContains(agent.output(), "walking its Python frames")) << agent.output();

  // Samples of the spin: the refused frame is a placeholder, its callers and the native frames
  // below them are there, and no part of the lying name was read.
  int64_t total = 0, spin = 0, whole = 0;
  for (const NamedSample& s : SamplesOf(dir, fixture.pid())) {
    total += s.count;
    for (const std::string& f : s.functions) {
      EXPECT_FALSE(absl::StrContains(f, "hostile_")) << absl::StrJoin(s.functions, ";");
    }
    const size_t leaf = Find(s.functions, "[python]");
    if (leaf == s.functions.size()) continue;
    spin += s.count;
    const size_t main = Find(s.functions, "main", leaf + 1);
    const size_t module = Find(s.functions, "<module>", main + 1);
    const size_t run_main = Find(s.functions, "Py_RunMain", module + 1);
    if (run_main < s.functions.size()) whole += s.count;
  }
  const double expected = cpu_ns.at("spin") * 1e-9 * kHz;
  std::printf(
      "%lld samples, %lld in the refused frame (%.0f expected from its CPU time), %lld "
      "of them with main <- <module> <- Py_RunMain under it\n",
      static_cast<long long>(total), static_cast<long long>(spin), expected,
      static_cast<long long>(whole));
  EXPECT_GE(static_cast<double>(spin), 0.8 * expected)
      << CommonStacks(
             SamplesOf(dir, fixture.pid()), [](const NamedSample&) { return true; }, 10)
      << agent.output();
  EXPECT_GE(static_cast<double>(whole), 0.9 * static_cast<double>(spin)) << CommonStacks(
      SamplesOf(dir, fixture.pid()), [](const NamedSample&) { return true; }, 10);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ember::testing
