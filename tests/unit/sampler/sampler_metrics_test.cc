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
  stats.samples = 43;
  EXPECT_EQ(BpfSamples(registry), 43);
  EXPECT_EQ(reads, 2);
}

TEST(SamplerMetricsTest, RegisteringTwiceFails) {
  MetricsRegistry registry;
  auto read = [] { return BpfStats{}; };
  ASSERT_TRUE(RegisterBpfSampleMetrics(registry, read).ok());
  EXPECT_FALSE(RegisterBpfSampleMetrics(registry, read).ok());
}

}  // namespace
}  // namespace ember
