// IntervalClock: the export schedule on the steady clock, wall time only as a label.
#include "agent/interval_clock.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace ember {

ClockReading ClockReading::Now() {
  return {.steady = std::chrono::steady_clock::now(), .wall = absl::Now()};
}

IntervalClock::IntervalClock(ClockReading start, std::chrono::steady_clock::time_point run_start,
                             absl::Duration interval, absl::Duration duration)
    : interval_(absl::ToChronoNanoseconds(interval)),
      deadline_(duration == absl::ZeroDuration() ? std::chrono::steady_clock::time_point::max()
                                                 : run_start + absl::ToChronoNanoseconds(duration)),
      next_export_(run_start + interval_),
      interval_start_(start) {}

IntervalSpan IntervalClock::EndInterval(ClockReading now) {
  IntervalSpan span{.start = interval_start_.wall,
                    .length = absl::FromChrono(now.steady - interval_start_.steady)};
  interval_start_ = now;
  next_export_ += interval_;
  if (next_export_ <= now.steady) next_export_ = now.steady + interval_;
  return span;
}

std::chrono::milliseconds IntervalClock::WaitFor(std::chrono::steady_clock::time_point now,
                                                 std::chrono::milliseconds limit) const {
  const auto next = std::min(next_export_, deadline_);
  if (next <= now) return std::chrono::milliseconds(0);
  return std::min(limit, std::chrono::ceil<std::chrono::milliseconds>(next - now));
}

}  // namespace ember
