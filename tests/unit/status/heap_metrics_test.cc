// The heap metrics follow what this test allocates and frees.
#include "status/heap_metrics.h"

#include <cstdlib>
#include <cstring>

#include "exposition_checker.h"
#include "gtest/gtest.h"

namespace ember {
namespace {

using ::ember::testing::ParseExposition;

double Scrape(const MetricsRegistry& registry, const std::string& name) {
  auto parsed = ParseExposition(registry.Render());
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return -1;
  EXPECT_TRUE(parsed->samples.contains(name)) << name;
  return parsed->samples[name];
}

TEST(HeapMetricsTest, AllocatedBytesFollowMallocAndFree) {
  MetricsRegistry registry;
  ASSERT_TRUE(AddHeapMetrics(registry).ok());
  constexpr size_t kBlock = 64 << 20;
  const double before = Scrape(registry, "ember_heap_allocated_bytes");
  void* block = malloc(kBlock);
  ASSERT_NE(block, nullptr);
  memset(block, 1, kBlock);
  const double during = Scrape(registry, "ember_heap_allocated_bytes");
  free(block);
  const double after = Scrape(registry, "ember_heap_allocated_bytes");
  EXPECT_GE(during - before, kBlock);
  EXPECT_LT(after, during - kBlock / 2);
  EXPECT_GE(Scrape(registry, "ember_heap_free_bytes"), 0);
}

TEST(HeapMetricsTest, AScrapeReadsTheHeapOnceAndShowsBothFiguresOfThatReading) {
  MetricsRegistry registry;
  int reads = 0;
  ASSERT_TRUE(AddHeapMetrics(registry, [&reads] {
                ++reads;
                return HeapBytes{.allocated = 1000.0 * reads, .free = 10.0 * reads};
              }).ok());
  for (int scrape = 1; scrape <= 3; ++scrape) {
    auto parsed = ParseExposition(registry.Render());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(reads, scrape);
    EXPECT_EQ(parsed->samples["ember_heap_allocated_bytes"], 1000.0 * scrape);
    EXPECT_EQ(parsed->samples["ember_heap_free_bytes"], 10.0 * scrape);
  }
}

}  // namespace
}  // namespace ember
