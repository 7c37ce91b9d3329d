// Samples written as literals in tests: they own their names and frame lists, and are copied
// into a profile's arena as the agent's aggregator would hand them over.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/profile.h"

namespace ember::testing {

struct OwnedSample {
  uint32_t pid = 0;
  std::string process;
  std::string thread;
  std::vector<const Frame*> frames;  // leaf first
  int64_t count = 0;
};

inline void AddSamples(IntervalProfile& profile, const std::vector<OwnedSample>& samples) {
  for (const OwnedSample& s : samples) {
    profile.AddSample(s.pid, s.process, s.thread, s.frames, s.count);
  }
}

}  // namespace ember::testing
