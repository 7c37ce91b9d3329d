// Interval aggregation: identical (process, thread, stack, trace context) samples merge; anything
// else does not.
#include "stacks/aggregator.h"

#include <algorithm>
#include <cstring>
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

// A request's samples are told apart from another's on the same stack by their trace context:
// any difference in trace id, span id, an attribute's key or value, or the attributes present.
TEST(AggregatorTest, SamplesWithDifferentContextsStayApart) {
  Frame leaf{.function = "leaf"};
  std::vector<const Frame*> stack = {&leaf};
  const SampleAttribute checkout[] = {{"http.route", "/checkout"}};
  const SampleAttribute search[] = {{"http.route", "/search"}};
  const SampleAttribute other_key[] = {{"http.target", "/checkout"}};
  const SampleAttribute two[] = {{"http.route", "/checkout"}, {"request.kind", "a"}};
  SampleContext base;
  base.link.trace_id[0] = 0xaa;
  base.link.span_id[7] = 0x01;
  base.attributes = checkout;
  SampleContext other_trace = base;
  other_trace.link.trace_id[15] = 0x02;
  SampleContext other_span = base;
  other_span.link.span_id[0] = 0x03;
  SampleContext other_value = base;
  other_value.attributes = search;
  SampleContext other_attribute_key = base;
  other_attribute_key.attributes = other_key;
  SampleContext more_attributes = base;
  more_attributes.attributes = two;
  SampleContext no_attributes = base;
  no_attributes.attributes = {};
  SampleContext attributes_only;
  attributes_only.attributes = checkout;

  Aggregator aggregator;
  aggregator.Add(1, "app", "worker", stack, base);
  aggregator.Add(1, "app", "worker", stack, base);
  for (const SampleContext* context :
       {&other_trace, &other_span, &other_value, &other_attribute_key, &more_attributes,
        &no_attributes, &attributes_only}) {
    aggregator.Add(1, "app", "worker", stack, *context);
  }
  aggregator.Add(1, "app", "worker", stack);  // no context at all
  EXPECT_EQ(aggregator.distinct_stacks(), 9u);

  IntervalProfile profile = aggregator.TakeInterval(0, 1, 1);
  ASSERT_EQ(profile.samples.size(), 9u);
  int64_t total = 0;
  const StackSample* merged = nullptr;
  for (const StackSample& s : profile.samples) {
    total += s.count;
    if (s.context.link == base.link && std::ranges::equal(s.context.attributes, checkout)) {
      EXPECT_EQ(merged, nullptr) << "two samples with the same context";
      merged = &s;
    }
  }
  EXPECT_EQ(total, 10);
  ASSERT_NE(merged, nullptr);
  EXPECT_EQ(merged->count, 2);
}

// The thread-context decoder reuses its storage for the next sample: a counted context is the
// interval's own copy, and the next sample with the same context finds it.
TEST(AggregatorTest, ContextsPastTheCapAreCountedUnderTheirStackAlone) {
  Frame leaf{.function = "leaf"};
  std::vector<const Frame*> stack = {&leaf};
  Aggregator aggregator;
  const auto context_of = [](uint32_t n) {
    SampleContext context;
    context.link.trace_id.fill(0x11);
    std::memcpy(context.link.span_id.data(), &n, sizeof(n));
    return context;
  };
  const uint32_t extra = 5;
  for (uint32_t n = 0; n < Aggregator::kMaxContextKeys + extra; ++n) {
    aggregator.Add(7, "app", "worker", stack, context_of(n));
  }
  // A context already counted still counts as itself.
  aggregator.Add(7, "app", "worker", stack, context_of(0));
  EXPECT_EQ(aggregator.contexts_folded(), extra);
  EXPECT_EQ(aggregator.total_samples(), Aggregator::kMaxContextKeys + extra + 1);
  IntervalProfile profile = aggregator.TakeInterval(0, 1, 1);
  ASSERT_EQ(profile.samples.size(), Aggregator::kMaxContextKeys + 1);
  int64_t without = 0;
  int64_t first = 0;
  for (const StackSample& s : profile.samples) {
    if (s.context.empty()) without += s.count;
    if (s.context.link == context_of(0).link) first = s.count;
  }
  EXPECT_EQ(without, extra);
  EXPECT_EQ(first, 2);
  // The next interval starts with room again.
  aggregator.Add(7, "app", "worker", stack, context_of(1));
  EXPECT_EQ(aggregator.contexts_folded(), extra);
}

TEST(AggregatorTest, AnIntervalKeepsItsContexts) {
  Frame leaf{.function = "leaf"};
  std::vector<const Frame*> stack = {&leaf};
  std::string key = "http.route";
  std::string value = "/checkout";
  std::vector<SampleAttribute> attributes = {{key, value}};
  SampleContext context;
  context.link.trace_id.fill(0x11);
  context.link.span_id.fill(0x22);
  context.attributes = attributes;
  Aggregator aggregator;
  aggregator.Add(7, "app", "worker", stack, context);
  // The decoder's next record, in the same storage: same bytes, then other bytes.
  key.assign(key.size(), 'x');
  value.assign(value.size(), 'y');
  std::string same_key = "http.route";
  std::string same_value = "/checkout";
  attributes[0] = {same_key, same_value};
  aggregator.Add(7, "app", "worker", stack, context);
  EXPECT_EQ(aggregator.distinct_stacks(), 1u);
  same_value = "/search";
  attributes[0] = {same_key, same_value};
  aggregator.Add(7, "app", "worker", stack, context);
  same_key.assign(same_key.size(), 'z');
  same_value.assign(same_value.size(), 'z');

  IntervalProfile profile = aggregator.TakeInterval(0, 1, 1);
  ASSERT_EQ(profile.samples.size(), 2u);
  for (const StackSample& s : profile.samples) {
    EXPECT_EQ(s.context.link, context.link);
    ASSERT_EQ(s.context.attributes.size(), 1u);
    EXPECT_EQ(s.context.attributes[0].key, "http.route");
    const std::string_view expected = s.count == 2 ? "/checkout" : "/search";
    EXPECT_EQ(s.context.attributes[0].value, expected) << "count " << s.count;
  }
}

}  // namespace
}  // namespace ember
