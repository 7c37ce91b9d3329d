// The export schedule under wall-clock steps (issue 8, hostile host): the host's clock cannot be
// set in a test on a shared machine, so the readings are made up here, as a step would show them.
#include "agent/interval_clock.h"

#include <chrono>

#include "gtest/gtest.h"

namespace ember {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Steady = std::chrono::steady_clock;

const Steady::time_point kStart = Steady::time_point(seconds(1000));
const absl::Time kWall = absl::FromUnixSeconds(1'800'000'000);

ClockReading At(Steady::duration since_start, absl::Duration wall_offset) {
  return {.steady = kStart + since_start,
          .wall = kWall + absl::FromChrono(since_start) + wall_offset};
}

TEST(IntervalClockTest, ExportsEveryIntervalAndStopsAfterTheDuration) {
  IntervalClock clock(At({}, {}), kStart, absl::Seconds(10), absl::Seconds(30));
  EXPECT_FALSE(clock.ExportDue(kStart + seconds(9)));
  EXPECT_TRUE(clock.ExportDue(kStart + seconds(10)));
  IntervalSpan span = clock.EndInterval(At(seconds(10), {}));
  EXPECT_EQ(span.start, kWall);
  EXPECT_EQ(span.length, absl::Seconds(10));
  EXPECT_FALSE(clock.ExportDue(kStart + seconds(19)));
  EXPECT_EQ(clock.WaitFor(kStart + seconds(19) + milliseconds(950), milliseconds(100)),
            milliseconds(50));
  EXPECT_EQ(clock.WaitFor(kStart + seconds(11), milliseconds(100)), milliseconds(100));
  EXPECT_FALSE(clock.Done(kStart + seconds(29)));
  EXPECT_TRUE(clock.Done(kStart + seconds(30)));
}

TEST(IntervalClockTest, AWallClockStepBackNeitherStallsExportsNorStretchesTheRun) {
  IntervalClock clock(At({}, {}), kStart, absl::Seconds(10), absl::Seconds(30));
  // The wall clock goes back an hour 5 s in: by it, the next export and the end are an hour off.
  const absl::Duration back = -absl::Hours(1);
  ASSERT_TRUE(clock.ExportDue(At(seconds(10), back).steady));
  IntervalSpan first = clock.EndInterval(At(seconds(10), back));
  EXPECT_EQ(first.start, kWall);
  EXPECT_EQ(first.length, absl::Seconds(10));  // not 10 s minus an hour
  ASSERT_TRUE(clock.ExportDue(At(seconds(20), back).steady));
  IntervalSpan second = clock.EndInterval(At(seconds(20), back));
  EXPECT_EQ(second.start, kWall + absl::Seconds(10) + back);  // stamped by the stepped clock
  EXPECT_EQ(second.length, absl::Seconds(10));
  EXPECT_TRUE(clock.Done(At(seconds(30), back).steady));
}

TEST(IntervalClockTest, AWallClockStepForwardDoesNotEndTheRunEarly) {
  IntervalClock clock(At({}, {}), kStart, absl::Seconds(10), absl::Seconds(30));
  const absl::Duration ahead = absl::Hours(2);
  ClockReading now = At(seconds(5), ahead);
  EXPECT_FALSE(clock.Done(now.steady));
  EXPECT_FALSE(clock.ExportDue(now.steady));
  IntervalSpan span = clock.EndInterval(At(seconds(10), ahead));
  EXPECT_EQ(span.length, absl::Seconds(10));  // not two hours
}

TEST(IntervalClockTest, ALoopThatFellBehindExportsOnceAndCatchesUp) {
  IntervalClock clock(At({}, {}), kStart, absl::Seconds(10), absl::ZeroDuration());
  // Writing an interval took 35 s (a stalled disk): one export, then one interval from now.
  IntervalSpan span = clock.EndInterval(At(seconds(45), {}));
  EXPECT_EQ(span.length, absl::Seconds(45));
  EXPECT_FALSE(clock.ExportDue(kStart + seconds(54)));
  EXPECT_TRUE(clock.ExportDue(kStart + seconds(55)));
  EXPECT_FALSE(clock.Done(kStart + std::chrono::hours(24 * 365)));  // no --duration: never
}

}  // namespace
}  // namespace ember
