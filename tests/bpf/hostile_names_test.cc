// Hostile names (issue 31): a process whose hot function's symbol demangles to 210 MB, whose
// process and thread name holds terminal control bytes, and which runs code from a mapped file
// that is not ELF and is named with control bytes. The agent must end on time with exit 0 and
// stay small; its pprof files and flame graph must stay small and hold the name kept mangled,
// the refusal must be counted on /metrics, and its log must carry no raw control byte.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "profiled_run.h"
#include "support/pprof_reader.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

using std::chrono::seconds;

// The fixture's hot function, as its symbol table names it (tests/fixtures/profiled/
// hostile_names.c): 237 bytes that demangle to 210 MB.
const std::string kBomb =
    "_Z1fPFviEPFvS0_S0_EPFvS2_S2_EPFvS4_S4_EPFvS6_S6_EPFvS8_S8_EPFvSA_SA_EPFvSC_SC_EP"
    "FvSE_SE_EPFvSG_SG_EPFvSI_SI_EPFvSK_SK_EPFvSM_SM_EPFvSO_SO_EPFvSQ_SQ_EPFvSS_SS_EP"
    "FvSU_SU_EPFvSW_SW_EPFvSY_SY_EPFvS10_S10_EPFvS12_S12_EPFvS14_S14_EPFvS16_S16_E";
const std::string kThreadName = "a\x1b[31m\n";
const std::string kFileName = "lib\x1b[31mevil\x07.so";

// The agent's peak RSS profiling this process stays near 60 MB (150 MB under AddressSanitizer,
// its shadow memory and quarantine); demangling the bomb in full took it to 470 MB in three
// intervals, and to 1.7 GB in a longer run.
constexpr uint64_t kPeakRssBound = uint64_t{256} << 20;
// Every file the agent writes for a few seconds of one process: a few KB of pprof, and the flame
// graph page (its template is most of it).
constexpr uintmax_t kPprofBytesBound = 256 * 1024;
constexpr uintmax_t kFlameGraphBytesBound = 1024 * 1024;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(HostileNamesTest, DemanglingBombAndControlBytesInNames) {
  const std::string out_dir = MakeTempDir();
  const std::string file_dir = MakeTempDir();
  ASSERT_FALSE(out_dir.empty());
  ASSERT_FALSE(file_dir.empty());
  Subprocess fixture({EMBER_HOSTILE_NAMES_BIN, file_dir, "4"});
  // With the chart's capabilities: the bounds must hold where the agent is deployed.
  Subprocess agent(WithTheChartsCapabilities(
      {EMBER_AGENT_BIN, "--pid", std::to_string(fixture.pid()), "--sampling-hz", "199",
       "--export-interval", "2s", "--output-dir", out_dir, "--metrics-address", "127.0.0.1:0"}));
  ASSERT_TRUE(agent.WaitForOutput("status endpoint: ", seconds(15))) << agent.output();
  const std::string endpoint = StatusEndpoint(agent.output());
  ASSERT_FALSE(endpoint.empty()) << agent.output();
  fixture.WriteStdin("g");
  ASSERT_EQ(fixture.Wait(seconds(60)), 0) << fixture.output();
  // One more interval, so that the fixture's last samples are symbolized before the scrape.
  std::this_thread::sleep_for(seconds(3));

  auto [status, metrics] = HttpGet(endpoint + "/metrics");
  EXPECT_EQ(status, 200) << metrics;
  const uint64_t peak = PeakRssBytes(agent.pid());
  const auto stop_started = std::chrono::steady_clock::now();
  agent.Signal(SIGINT);
  EXPECT_EQ(agent.Wait(seconds(30)), 0) << agent.output();
  EXPECT_LT(std::chrono::steady_clock::now() - stop_started, seconds(10));

  // Stayed small: no 210 MB name was ever made.
  ASSERT_GT(peak, 0u);
  EXPECT_LT(peak, AgentPeakRssBound(kPeakRssBound)) << "agent peak RSS " << (peak >> 10) << " kB";
  std::cout << "agent peak RSS (VmHWM): " << (peak >> 10) << " kB\n";

  // The refusal is counted.
  std::optional<double> over_budget = MetricValue(metrics, "ember_demangle_over_budget_total");
  ASSERT_TRUE(over_budget.has_value()) << metrics;
  EXPECT_GE(*over_budget, 1) << metrics;
  EXPECT_TRUE(MetricValue(metrics, "ember_names_truncated_total{name=\"function\"}").has_value())
      << metrics;

  // The profile names the hot function by its mangled symbol, and no name is long.
  uintmax_t pprof_bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(out_dir)) {
    if (entry.path().string().ends_with(".pb.gz")) pprof_bytes += entry.file_size();
  }
  EXPECT_GT(pprof_bytes, 0u);
  EXPECT_LT(pprof_bytes, kPprofBytesBound);
  const std::vector<NamedSample> samples = SamplesOf(out_dir, fixture.pid());
  ASSERT_FALSE(samples.empty()) << agent.output();
  int64_t in_bomb = 0;
  int64_t total = 0;
  size_t longest = 0;
  bool thread_named = false;
  for (const NamedSample& sample : samples) {
    total += sample.count;
    if (!sample.functions.empty() && sample.functions.front() == kBomb) in_bomb += sample.count;
    for (const std::string& line : sample.lines) longest = std::max(longest, line.size());
    thread_named |= sample.thread == kThreadName && sample.process == kThreadName;
  }
  EXPECT_GT(in_bomb, total / 5) << CommonStacks(
      samples, [](auto&) { return true; }, 5);
  EXPECT_LE(longest, 4096u);
  EXPECT_TRUE(thread_named) << "the thread and process labels keep the name as it is";

  // So does the flame graph page, which stays small.
  const std::string page = ReadAll(out_dir + "/flamegraph.html");
  EXPECT_LT(page.size(), kFlameGraphBytesBound);
  EXPECT_TRUE(absl::StrContains(page, kBomb));

  // The log names the file it cannot symbolize with its control bytes escaped, and holds no
  // control byte but the line ends.
  const std::string& log = agent.output();
  EXPECT_TRUE(absl::StrContains(log, "lib\\x1b[31mevil\\x07.so")) << log;
  for (size_t i = 0; i < log.size(); ++i) {
    const auto byte = static_cast<unsigned char>(log[i]);
    ASSERT_TRUE(byte >= 0x20 || byte == '\n')
        << "control byte " << int{byte} << " at " << i << " of the log:\n"
        << log;
    ASSERT_NE(byte, 0x7f) << log;
  }

  std::error_code error;
  std::filesystem::remove_all(out_dir, error);
  std::filesystem::remove_all(file_dir, error);
}

}  // namespace
}  // namespace ember::testing
