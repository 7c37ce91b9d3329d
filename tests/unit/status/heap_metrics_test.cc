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

}  // namespace
}  // namespace ember
