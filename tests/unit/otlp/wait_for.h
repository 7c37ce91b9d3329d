// Polling with a deadline, for tests that wait on another thread's progress.
#pragma once

#include <chrono>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ember::testing {

// Polls `condition` every few milliseconds until it holds (true) or `timeout` passes (false).
template <typename Condition>
bool WaitFor(Condition condition, absl::Duration timeout = absl::Seconds(10)) {
  absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace ember::testing
