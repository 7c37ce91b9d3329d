// The process_* metrics: /proc parsing on fixed text, then over a made-up /proc tree and this
// test's own /proc/self.
#include "status/process_metrics.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "exposition_checker.h"
#include "gtest/gtest.h"

namespace ember {
namespace {

using ::ember::testing::ParseExposition;

// A real line with a command name that has spaces and parentheses in it.
constexpr char kStat[] =
    "4242 (my (odd) prog) S 1 4242 4242 0 -1 4194560 1071 0 0 0 250 75 0 0 20 0 3 0 123456 "
    "10485760 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";

TEST(ProcessMetricsTest, ParsesProcStat) {
  auto stat = ParseProcStat(kStat);
  ASSERT_TRUE(stat.has_value());
  EXPECT_EQ(stat->utime_ticks, 250u);
  EXPECT_EQ(stat->stime_ticks, 75u);
  EXPECT_EQ(stat->start_ticks, 123456u);
  EXPECT_EQ(stat->rss_pages, 2560u);
  EXPECT_FALSE(ParseProcStat("").has_value());
  EXPECT_FALSE(ParseProcStat("1 (x) S 1 2 3").has_value());
  EXPECT_FALSE(ParseProcStat("no parenthesis at all").has_value());
}

TEST(ProcessMetricsTest, ParsesBootTime) {
  EXPECT_EQ(ParseBootTime("cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n"), 1700000000u);
  EXPECT_FALSE(ParseBootTime("cpu  1 2 3\n").has_value());
  EXPECT_FALSE(ParseBootTime("btime soon\n").has_value());
}

class ProcTree : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ember-proc-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    std::filesystem::create_directories(root_ / "4242" / "fd");
    for (const char* fd : {"0", "1", "2", "7"}) std::ofstream(root_ / "4242" / "fd" / fd);
    std::ofstream(root_ / "4242" / "stat") << kStat;
    std::ofstream(root_ / "stat") << "cpu  1 2 3\nbtime 1700000000\n";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::filesystem::path root_;
};

TEST_F(ProcTree, ComputesTheFourMetricsAtScrapeTime) {
  MetricsRegistry registry;
  ASSERT_TRUE(AddProcessMetrics(registry, root_.string(), "4242").ok());
  auto parsed = ParseExposition(registry.Render());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  EXPECT_DOUBLE_EQ(parsed->samples["process_cpu_seconds_total"], 325 / ticks);
  EXPECT_EQ(parsed->types["process_cpu_seconds_total"], "counter");
  EXPECT_EQ(parsed->samples["process_resident_memory_bytes"], 2560.0 * sysconf(_SC_PAGESIZE));
  EXPECT_EQ(parsed->samples["process_open_fds"], 4);
  EXPECT_DOUBLE_EQ(parsed->samples["process_start_time_seconds"], 1700000000 + 123456 / ticks);

  // Read again at each scrape; a file that went away leaves its series out, not the scrape.
  std::filesystem::remove(root_ / "4242" / "fd" / "7");
  std::filesystem::remove(root_ / "stat");
  parsed = ParseExposition(registry.Render());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->samples["process_open_fds"], 3);
  EXPECT_EQ(parsed->samples.count("process_start_time_seconds"), 0u);
  EXPECT_EQ(parsed->samples.count("process_cpu_seconds_total"), 1u);

  // Registering twice is the caller's mistake.
  EXPECT_FALSE(AddProcessMetrics(registry, root_.string(), "4242").ok());
}

TEST(ProcessMetricsTest, ThisProcess) {
  MetricsRegistry registry;
  ASSERT_TRUE(AddProcessMetrics(registry).ok());
  std::vector<char> burn(64 << 20, 1);  // resident: touched
  auto parsed = ParseExposition(registry.Render());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_GT(parsed->samples["process_resident_memory_bytes"], 64 << 20);
  EXPECT_GE(parsed->samples["process_open_fds"], 3);
  const double now = static_cast<double>(time(nullptr));
  EXPECT_LE(parsed->samples["process_start_time_seconds"], now + 1);
  EXPECT_GT(parsed->samples["process_start_time_seconds"], now - 3600);
  EXPECT_GE(parsed->samples["process_cpu_seconds_total"], 0);
  EXPECT_EQ(burn[12345], 1);
}

}  // namespace
}  // namespace ember
