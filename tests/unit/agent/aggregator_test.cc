// Interval aggregation: identical (process, thread, stack) samples merge; anything else does not.
#include "agent/aggregator.h"

#include "gtest/gtest.h"

namespace ember {
namespace {

TEST(AggregatorTest, CountsPerProcessThreadAndStack) {
  Frame leaf{.function = "leaf"};
  Frame main_frame{.function = "main"};
  std::vector<const Frame*> stack = {&leaf, &main_frame};
  std::vector<const Frame*> shorter = {&main_frame};
  Aggregator aggregator;
  aggregator.Add(1, "app", "worker", stack);
  aggregator.Add(1, "app", "worker", stack);
  aggregator.Add(1, "app", "other-thread", stack);
  aggregator.Add(2, "app", "worker", stack);
  aggregator.Add(1, "app", "worker", shorter);
  EXPECT_EQ(aggregator.total_samples(), 5);
  EXPECT_EQ(aggregator.distinct_stacks(), 4u);

  IntervalProfile profile = aggregator.TakeInterval(1000, 2000, 52631578);
  EXPECT_EQ(profile.start_unix_ns, 1000);
  EXPECT_EQ(profile.duration_ns, 2000);
  EXPECT_EQ(profile.period_ns, 52631578);
  ASSERT_EQ(profile.samples.size(), 4u);
  int64_t merged = 0;
  for (const StackSample& s : profile.samples) {
    if (s.pid == 1 && s.thread == "worker" && s.frames == stack) merged = s.count;
  }
  EXPECT_EQ(merged, 2);
  EXPECT_EQ(aggregator.total_samples(), 0);
  EXPECT_TRUE(aggregator.TakeInterval(0, 0, 1).samples.empty());
}

}  // namespace
}  // namespace ember
