// Interval aggregation: identical (process, thread, stack) samples merge; anything else does not.
#include "stacks/aggregator.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

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
    if (s.pid == 1 && s.thread == "worker" && std::ranges::equal(s.frames, stack)) {
      merged = s.count;
    }
  }
  EXPECT_EQ(merged, 2);
  EXPECT_EQ(aggregator.total_samples(), 0);
  EXPECT_TRUE(aggregator.TakeInterval(0, 0, 1).samples.empty());
}

// The agent reuses its buffers for the next sample, and the aggregator goes on counting while the
// writers read the last interval: a profile's samples must own their copy of names and frames.
TEST(AggregatorTest, AnIntervalKeepsItsStacksWhateverHappensAfterIt) {
  std::vector<Frame> pool(300);
  for (size_t i = 0; i < pool.size(); ++i) pool[i].function = "f" + std::to_string(i);
  auto aggregator = std::make_unique<Aggregator>();
  std::vector<const Frame*> buffer;
  std::string process = "a-process-name-longer-than-small-strings";
  std::string thread = "thread";
  // 2000 distinct stacks of 1 to 200 frames: more than one block of the arena.
  auto stack_of = [&](size_t i) {
    std::vector<const Frame*> stack;
    for (size_t d = 0; d <= i % 200; ++d) stack.push_back(&pool[(i + d * 7) % pool.size()]);
    return stack;
  };
  for (size_t i = 0; i < 2000; ++i) {
    buffer = stack_of(i);
    aggregator->Add(static_cast<uint32_t>(i), process, thread, buffer);
  }
  IntervalProfile profile = aggregator->TakeInterval(0, 1, 1);
  // What the caller's buffers held, overwritten; the next interval counted, then dropped.
  std::fill(buffer.begin(), buffer.end(), nullptr);
  process.assign(process.size(), 'x');
  thread = "other";
  for (size_t i = 0; i < 2000; ++i) {
    aggregator->Add(static_cast<uint32_t>(i), "next", "next", stack_of(i + 1));
  }
  IntervalProfile next = aggregator->TakeInterval(1, 1, 1);
  EXPECT_EQ(next.samples.size(), 2000u);
  aggregator.reset();
  IntervalProfile moved = std::move(profile);

  ASSERT_EQ(moved.samples.size(), 2000u);
  for (const StackSample& s : moved.samples) {
    EXPECT_EQ(s.process, "a-process-name-longer-than-small-strings");
    EXPECT_EQ(s.thread, "thread");
    EXPECT_EQ(s.count, 1);
    EXPECT_TRUE(std::ranges::equal(s.frames, stack_of(s.pid))) << "pid " << s.pid;
  }
}

}  // namespace
}  // namespace ember
