// ember_bpf_samples_total as /metrics renders it: read from the BPF program's counters at each
// scrape, through the status tests' strict exposition reader.
#include "sampler/sampler_metrics.h"

#include <string>

#include "gtest/gtest.h"
#include "status/exposition_checker.h"
#include "status/metrics_registry.h"

namespace ember {
namespace {

double BpfSamples(const MetricsRegistry& registry) {
  auto exposition = testing::ParseExposition(registry.Render());
  EXPECT_TRUE(exposition.ok()) << exposition.status();
  if (!exposition.ok()) return -1;
  EXPECT_EQ(exposition->types.at("ember_bpf_samples_total"), "counter");
  auto it = exposition->samples.find("ember_bpf_samples_total");
  EXPECT_NE(it, exposition->samples.end());
  return it == exposition->samples.end() ? -1 : it->second;
}

TEST(SamplerMetricsTest, BpfSamplesAreTheProgramsSampleCounterReadAtEachScrape) {
  MetricsRegistry registry;
  BpfStats stats;
  stats.samples = 41;
  // Other counters must not leak into it.
  stats.ring_buffer_full = 1000;
  stats.unwind_complete = 2000;
  int reads = 0;
  ASSERT_TRUE(RegisterBpfSampleMetrics(registry, [&] {
                ++reads;
                return stats;
              }).ok());
  EXPECT_EQ(reads, 0);  // nothing read before a scrape
  EXPECT_EQ(BpfSamples(registry), 41);
  const int reads_per_scrape = reads;
  EXPECT_GT(reads_per_scrape, 0);
  stats.samples = 43;
  EXPECT_EQ(BpfSamples(registry), 43);
  EXPECT_EQ(reads, 2 * reads_per_scrape);
}

TEST(SamplerMetricsTest, ThreadContextReadsAndNoticesByResult) {
  MetricsRegistry registry;
  BpfStats stats;
  stats.context_ok = 1;
  stats.context_none = 2;
  stats.context_invalid = 3;
  stats.context_read_failed = 4;
  stats.context_no_tls_block = 5;
  stats.context_notices = 6;
  stats.context_notices_lost = 7;
  stats.context_notices_suppressed = 8;
  bool enabled = true;
  ASSERT_TRUE(RegisterBpfSampleMetrics(
                  registry, [&] { return stats; }, [&] { return enabled; })
                  .ok());
  auto exposition = testing::ParseExposition(registry.Render());
  ASSERT_TRUE(exposition.ok()) << exposition.status();
  const auto& samples = exposition->samples;
  EXPECT_EQ(exposition->types.at("ember_bpf_thread_context_reads_total"), "counter");
  EXPECT_EQ(samples.at("ember_bpf_thread_context_reads_total{result=\"ok\"}"), 1);
  EXPECT_EQ(samples.at("ember_bpf_thread_context_reads_total{result=\"none\"}"), 2);
  EXPECT_EQ(samples.at("ember_bpf_thread_context_reads_total{result=\"invalid\"}"), 3);
  EXPECT_EQ(samples.at("ember_bpf_thread_context_reads_total{result=\"read_failed\"}"), 4);
  EXPECT_EQ(samples.at("ember_bpf_thread_context_reads_total{result=\"no_tls_block\"}"), 5);
  EXPECT_EQ(samples.at("ember_bpf_context_notices_total{result=\"written\"}"), 6);
  EXPECT_EQ(samples.at("ember_bpf_context_notices_total{result=\"lost\"}"), 7);
  EXPECT_EQ(samples.at("ember_bpf_context_notices_total{result=\"suppressed\"}"), 8);
  EXPECT_EQ(exposition->types.at("ember_trace_context_notices_enabled"), "gauge");
  EXPECT_EQ(samples.at("ember_trace_context_notices_enabled"), 1);
  enabled = false;
  exposition = testing::ParseExposition(registry.Render());
  ASSERT_TRUE(exposition.ok());
  EXPECT_EQ(exposition->samples.at("ember_trace_context_notices_enabled"), 0);
}

TEST(SamplerMetricsTest, RegisteringTwiceFails) {
  MetricsRegistry registry;
  auto read = [] { return BpfStats{}; };
  ASSERT_TRUE(RegisterBpfSampleMetrics(registry, read).ok());
  EXPECT_FALSE(RegisterBpfSampleMetrics(registry, read).ok());
}

}  // namespace
}  // namespace ember
