// Bounded resources end to end: ten CPU-bound fixture processes profiled by an agent that may track
// only four. The agent evicts the least recently sampled, reads them back when they sample again,
// counts it in /metrics while intervals keep coming, and names every process's frames.
#include <signal.h>

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "profiled_run.h"
#include "support/pprof_reader.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

using std::chrono::seconds;

constexpr int kFixtures = 10;
constexpr int kMaxProcesses = 4;

// The value of one series (`name` or `name{labels}` as rendered) in Prometheus text.
std::optional<double> MetricValue(const std::string& text, const std::string& series) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(series + " ", 0) != 0) continue;
    double value = 0;
    if (absl::SimpleAtod(line.substr(series.size() + 1), &value)) return value;
  }
  return std::nullopt;
}

struct Scrape {
  double evicted = 0;
  double tracked = 0;
  double samples = 0;
  double bpf_samples = 0;
  double pprof_files = 0;
  double module_bytes = 0;
  double frame_bytes = 0;
  double frame_hits = 0;
  double frame_misses = 0;
};

Scrape ScrapeAgent(const std::string& endpoint) {
  auto [status, body] = HttpGet(endpoint + "/metrics");
  EXPECT_EQ(status, 200) << body;
  Scrape scrape;
  for (auto [series, out] :
       {std::pair{"ember_processes_evicted_total", &scrape.evicted},
        std::pair{"ember_processes_tracked", &scrape.tracked},
        std::pair{"ember_samples_total", &scrape.samples},
        std::pair{"ember_bpf_samples_total", &scrape.bpf_samples},
        std::pair{"ember_pprof_files_written_total", &scrape.pprof_files},
        std::pair{"ember_symbol_cache_bytes{cache=\"elf_modules\"}", &scrape.module_bytes},
        std::pair{"ember_symbol_cache_bytes{cache=\"frames\"}", &scrape.frame_bytes},
        std::pair{"ember_symbol_cache_lookups_total{cache=\"frames\",result=\"hit\"}",
                  &scrape.frame_hits},
        std::pair{"ember_symbol_cache_lookups_total{cache=\"frames\",result=\"miss\"}",
                  &scrape.frame_misses}}) {
    std::optional<double> value = MetricValue(body, series);
    EXPECT_TRUE(value.has_value()) << series << " not in\n" << body;
    *out = value.value_or(-1);
  }
  return scrape;
}

TEST(ProcessLimitTest, EvictsLeastRecentlyUsedProcessesCountsThemAndKeepsProfiling) {
  const std::string dir = MakeTempDir();
  ASSERT_FALSE(dir.empty());
  std::vector<std::unique_ptr<Subprocess>> fixtures;
  std::vector<std::string> agent_argv = {EMBER_AGENT_BIN,
                                         "--sampling-hz",
                                         "99",
                                         "--export-interval",
                                         "1s",
                                         "--output-dir",
                                         dir,
                                         "--metrics-address",
                                         "127.0.0.1:0",
                                         "--max-processes",
                                         std::to_string(kMaxProcesses)};
  for (int i = 0; i < kFixtures; ++i) {
    // Each waits for a byte on stdin, then runs its phases for 12 s.
    fixtures.push_back(
        std::make_unique<Subprocess>(std::vector<std::string>{EMBER_PHASES_BIN, "12"}));
    agent_argv.push_back("--pid");
    agent_argv.push_back(std::to_string(fixtures.back()->pid()));
  }
  Subprocess agent(agent_argv);
  ASSERT_TRUE(agent.WaitForOutput("status endpoint", seconds(15))) << agent.output();
  const std::string endpoint = StatusEndpoint(agent.output());
  ASSERT_FALSE(endpoint.empty()) << agent.output();
  for (auto& fixture : fixtures) fixture->WriteStdin("g");

  std::this_thread::sleep_for(seconds(4));
  const Scrape early = ScrapeAgent(endpoint);
  std::this_thread::sleep_for(seconds(4));
  const Scrape late = ScrapeAgent(endpoint);

  // Ten processes take turns on the CPUs, four places: evictions all along.
  EXPECT_GT(early.evicted, 0) << agent.output();
  EXPECT_GT(late.evicted, early.evicted);
  EXPECT_LE(early.tracked, kMaxProcesses);
  EXPECT_LE(late.tracked, kMaxProcesses);
  EXPECT_GT(late.tracked, 0);
  // ... while samples and intervals keep coming.
  EXPECT_GT(early.samples, 0);
  EXPECT_GT(late.samples, early.samples);
  // The program's own count is at least what the agent had read before.
  EXPECT_GE(late.bpf_samples, early.samples);
  EXPECT_GT(late.bpf_samples, early.bpf_samples);
  EXPECT_GT(late.pprof_files, early.pprof_files);
  // The symbol caches hold the fixture's binary and libc, and their frames, which the processes
  // share: nearly every lookup after the first few is a hit.
  EXPECT_GT(late.module_bytes, 0);
  EXPECT_GT(late.frame_bytes, 0);
  EXPECT_GT(late.frame_misses, 0);
  EXPECT_GT(late.frame_hits, late.frame_misses);

  for (auto& fixture : fixtures) EXPECT_EQ(fixture->Wait(seconds(60)), 0) << fixture->output();
  agent.Signal(SIGINT);
  ASSERT_EQ(agent.Wait(seconds(30)), 0) << agent.output();
  ExpectNoSampleLost(agent.output());

  // Every process, evicted and read back many times, has samples whose leaf is named, and none of
  // them is missing.
  int64_t samples = 0;
  double cpu_seconds = 0;
  for (auto& fixture : fixtures) {
    std::set<std::string> leaves;
    for (const NamedSample& sample : SamplesOf(dir, fixture->pid())) {
      if (!sample.functions.empty()) leaves.insert(sample.functions.front());
      samples += sample.count;
    }
    ASSERT_TRUE(fixture->cpu_time().has_value());
    cpu_seconds += fixture->cpu_time()->count() / 1e6;
    EXPECT_TRUE(leaves.contains("leaf_alpha") || leaves.contains("leaf_beta") ||
                leaves.contains("leaf_gamma"))
        << "pid " << fixture->pid() << " leaves: " << absl::StrJoin(leaves, ", ");
  }
  ExpectSamplesForCpuTime(samples, cpu_seconds, 99, agent.output());
}

}  // namespace
}  // namespace ember::testing
