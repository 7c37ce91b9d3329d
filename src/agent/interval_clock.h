// When the profiling loop writes an interval and when it stops, decided on the monotonic clock so
// that a step of the wall clock (NTP, `date -s`, a VM resumed) neither ends --duration early, nor
// stalls the exports, nor gives an interval a negative or hour-long length. The wall clock only
// stamps when each interval began.
#pragma once

#include <chrono>

#include "absl/time/time.h"

namespace ember {

// Both clocks read at one moment.
struct ClockReading {
  std::chrono::steady_clock::time_point steady;
  absl::Time wall;
  static ClockReading Now();
};

// One interval as it is written: when it began by the wall clock, and how long it lasted by the
// monotonic one.
struct IntervalSpan {
  absl::Time start;
  absl::Duration length;
};

class IntervalClock {
 public:
  // The first interval begins at `start`; intervals last `interval`; the run ends `duration`
  // after `run_start` (zero: never).
  IntervalClock(ClockReading start, std::chrono::steady_clock::time_point run_start,
                absl::Duration interval, absl::Duration duration);

  bool Done(std::chrono::steady_clock::time_point now) const { return now >= deadline_; }
  bool ExportDue(std::chrono::steady_clock::time_point now) const { return now >= next_export_; }
  // Ends the current interval at `now` and begins the next one there; the next export is one
  // interval later (from now, if the loop fell more than an interval behind).
  IntervalSpan EndInterval(ClockReading now);
  // How long the loop may wait for samples before it has something to do, at most `limit`.
  std::chrono::milliseconds WaitFor(std::chrono::steady_clock::time_point now,
                                    std::chrono::milliseconds limit) const;

 private:
  std::chrono::steady_clock::duration interval_;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::steady_clock::time_point next_export_;
  ClockReading interval_start_;
};

}  // namespace ember
