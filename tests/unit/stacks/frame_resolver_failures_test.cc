// User frames FrameResolver cannot name, over the fixture /proc tree (tests/data/proc): which
// marker or fallback name each gets, how each reason is counted (once per location, an unmapped
// address each time), and how SymbolizationFailureMetrics carries the counts into /metrics.
#include <chrono>
#include <string>

#include "gtest/gtest.h"
#include "stacks/frame_resolver.h"
#include "stacks/symbolization_metrics.h"
#include "status/exposition_checker.h"
#include "status/metrics_registry.h"

namespace ember {
namespace {

const std::string kProcRoot = std::string(EMBER_TEST_DATA_DIR) + "/proc";
// Addresses in the fixture's maps of process 4242.
constexpr uint64_t kPhasesText = 0x55d0c8a02100;  // /usr/bin/phases, file offset 0x2100
constexpr uint64_t kLibcText = 0x7f3a1c030000;    // libc.so.6, file offset 0x30000
constexpr uint64_t kVsyscall = 0xffffffffff600400;
constexpr uint64_t kNowhere = 0x1000;

class FrameResolverFailuresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    process = processes.Get(4242);
    ASSERT_NE(process, nullptr);
  }
  // The maps are never read again within a test: an unmapped address stays unmapped.
  ProcessTable processes{kProcRoot, std::chrono::hours(1)};
  ModuleCache modules;
  FrameResolver resolver{&processes, &modules, nullptr};
  Process* process = nullptr;
};

TEST_F(FrameResolverFailuresTest, AnAddressInNoMappingIsUnknownAndCountedEachTime) {
  const Frame* frame = resolver.User(process, kNowhere, /*caller=*/false);
  EXPECT_EQ(frame->function, "[unknown]");
  EXPECT_EQ(frame->module, "[unknown]");
  EXPECT_EQ(resolver.User(process, kNowhere, /*caller=*/false), frame);
  EXPECT_EQ(resolver.failures().unmapped, 2u);
  EXPECT_EQ(resolver.failures().unreadable_file, 0u);
  EXPECT_EQ(resolver.failures().no_symbol, 0u);
}

TEST_F(FrameResolverFailuresTest, CodeThatIsNoFileIsNamedAfterItsMapping) {
  // No perf map names [vsyscall]: it keeps its mapping's name, and no failure counts.
  const Frame* frame = resolver.User(process, kVsyscall, /*caller=*/false);
  EXPECT_EQ(frame->function, "[vsyscall]");
  EXPECT_EQ(frame->module, "[vsyscall]");
  EXPECT_EQ(resolver.User(process, kVsyscall + 8, /*caller=*/true), frame);
  EXPECT_EQ(resolver.failures().unmapped, 0u);
  EXPECT_EQ(resolver.failures().unreadable_file, 0u);
}

TEST_F(FrameResolverFailuresTest, AFileThatCannotBeOpenedKeepsItsFileOffsetOnceCounted) {
  // The fixture's files are not under its root: no module, the frame keeps where it is.
  const Frame* frame = resolver.User(process, kPhasesText, /*caller=*/false);
  EXPECT_EQ(frame->function, "phases+0x2100");
  EXPECT_EQ(frame->module, "/usr/bin/phases");
  EXPECT_EQ(frame->address, 0x2100u);
  EXPECT_EQ(frame->kind, FrameKind::kNative);
  // A caller's address is its return address: the call is the byte before.
  const Frame* caller = resolver.User(process, kLibcText + 1, /*caller=*/true);
  EXPECT_EQ(caller->function, "libc.so.6+0x30000");
  EXPECT_EQ(resolver.failures().unreadable_file, 2u);

  // The same locations again are cache hits, not new failures.
  const uint64_t misses = resolver.stats().misses;
  EXPECT_EQ(resolver.User(process, kPhasesText, false), frame);
  EXPECT_EQ(resolver.User(process, kLibcText + 1, true), caller);
  EXPECT_EQ(resolver.failures().unreadable_file, 2u);
  EXPECT_EQ(resolver.stats().misses, misses);
  EXPECT_GE(resolver.stats().hits, 2u);
}

TEST_F(FrameResolverFailuresTest, FramesUnusedForTwoGenerationsAreDropped) {
  const Frame* kept = resolver.User(process, kPhasesText, false);
  resolver.User(process, kLibcText, false);
  ASSERT_EQ(resolver.size(), 2u);
  const size_t two_frames = resolver.bytes();
  for (int generation = 0; generation < 3; ++generation) {
    resolver.NextGeneration();
    EXPECT_EQ(resolver.User(process, kPhasesText, false), kept);
  }
  EXPECT_EQ(resolver.size(), 1u);
  EXPECT_LT(resolver.bytes(), two_frames);
  EXPECT_GT(resolver.bytes(), 0u);
  EXPECT_EQ(resolver.stats().evicted, 0u);  // dropped by age, not by the byte limit

  // Named again when it comes back: a miss, and a new failure for its file.
  const uint64_t misses = resolver.stats().misses;
  EXPECT_EQ(resolver.User(process, kLibcText, false)->function, "libc.so.6+0x30000");
  EXPECT_EQ(resolver.stats().misses, misses + 1);
  EXPECT_EQ(resolver.failures().unreadable_file, 3u);
}

TEST_F(FrameResolverFailuresTest, OverTheByteLimitOlderFramesGoFirst) {
  // A limit of three frames of libc.
  resolver.User(process, kLibcText, false);
  const size_t limit = 3 * resolver.bytes();
  FrameResolver small(&processes, &modules, nullptr, limit);
  small.User(process, kPhasesText, false);
  small.NextGeneration();
  for (uint64_t i = 0; i < 8; ++i) small.User(process, kLibcText + 16 * i, false);
  // The older frame made room; this generation's frames stay whatever the limit (the interval
  // being built holds them).
  EXPECT_EQ(small.size(), 8u);
  EXPECT_EQ(small.stats().evicted, 1u);
  EXPECT_GT(small.bytes(), limit);
  // Once the interval is written, the cache goes back under seven eighths of its limit, its
  // oldest generation first.
  small.NextGeneration();
  EXPECT_LE(small.bytes(), limit / 8 * 7);
  EXPECT_EQ(small.size(), 2u);
  EXPECT_EQ(small.stats().evicted, 7u);
}

TEST_F(FrameResolverFailuresTest, KernelFramesWithoutSymbolsKeepTheirAddress) {
  const Frame* leaf = resolver.Kernel(0xffffffff81000010, /*caller=*/false);
  EXPECT_EQ(leaf->kind, FrameKind::kKernel);
  EXPECT_EQ(leaf->module, "[kernel.kallsyms]");
  EXPECT_EQ(leaf->function, "[kernel.kallsyms]+0xffffffff81000010");
  const Frame* caller = resolver.Kernel(0xffffffff81000011, /*caller=*/true);
  EXPECT_EQ(caller, leaf);  // a return address names the call before it
  EXPECT_EQ(resolver.stats().kernel_misses_past_image, 0u);
}

TEST_F(FrameResolverFailuresTest, MarkersAreOneFramePerName) {
  const Frame* truncated = resolver.Marker("[truncated]");
  EXPECT_EQ(truncated->function, "[truncated]");
  EXPECT_EQ(truncated->module, "[truncated]");
  EXPECT_EQ(resolver.Marker("[truncated]"), truncated);
  EXPECT_NE(resolver.Marker("[process exited]"), truncated);
  EXPECT_EQ(resolver.size(), 2u);
}

double Sample(const testing::Exposition& exposition, const std::string& series) {
  auto it = exposition.samples.find(series);
  EXPECT_NE(it, exposition.samples.end()) << series;
  return it == exposition.samples.end() ? -1 : it->second;
}

std::string Failures(const char* reason) {
  return std::string("ember_symbolization_failures_total{reason=\"") + reason + "\"}";
}

TEST(SymbolizationFailureMetricsTest, EachReasonLandsInItsOwnSeriesAndOnlyGrowthIsAdded) {
  MetricsRegistry registry;
  SymbolizationFailureMetrics metrics(registry);
  SymbolizationFailures failures{
      .unmapped = 1, .unreadable_file = 2, .no_symbol = 3, .file_changed = 4, .vdso_unreadable = 5};
  metrics.Sync(failures);
  auto first = testing::ParseExposition(registry.Render());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->types.at("ember_symbolization_failures_total"), "counter");
  EXPECT_EQ(Sample(*first, Failures("unmapped")), 1);
  EXPECT_EQ(Sample(*first, Failures("unreadable_file")), 2);
  EXPECT_EQ(Sample(*first, Failures("no_symbol")), 3);
  EXPECT_EQ(Sample(*first, Failures("file_changed")), 4);
  EXPECT_EQ(Sample(*first, Failures("vdso_unreadable")), 5);

  // The resolver's totals grew: the counters follow them, not add them up again.
  failures.unmapped = 10;
  failures.vdso_unreadable = 6;
  metrics.Sync(failures);
  metrics.Sync(failures);
  auto second = testing::ParseExposition(registry.Render());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(Sample(*second, Failures("unmapped")), 10);
  EXPECT_EQ(Sample(*second, Failures("unreadable_file")), 2);
  EXPECT_EQ(Sample(*second, Failures("vdso_unreadable")), 6);
}

TEST_F(FrameResolverFailuresTest, TheResolversFailuresReachTheMetrics) {
  MetricsRegistry registry;
  SymbolizationFailureMetrics metrics(registry);
  resolver.User(process, kNowhere, false);
  resolver.User(process, kPhasesText, false);
  metrics.Sync(resolver.failures());
  auto exposition = testing::ParseExposition(registry.Render());
  ASSERT_TRUE(exposition.ok()) << exposition.status();
  EXPECT_EQ(Sample(*exposition, Failures("unmapped")), 1);
  EXPECT_EQ(Sample(*exposition, Failures("unreadable_file")), 1);
  EXPECT_EQ(Sample(*exposition, Failures("no_symbol")), 0);
}

}  // namespace
}  // namespace ember
