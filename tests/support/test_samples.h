// Samples written as literals in tests: they own their names, frame lists and trace contexts, and
// are copied into a profile's arena as the agent's aggregator would hand them over.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/profile.h"

namespace ember::testing {

struct OwnedSample {
  uint32_t pid = 0;
  std::string process;
  std::string thread;
  std::vector<const Frame*> frames;  // leaf first
  int64_t count = 0;
  TraceLink link = {};
  std::vector<std::pair<std::string, std::string>> attributes = {};  // key, value; in order
};

inline void AddSamples(IntervalProfile& profile, const std::vector<OwnedSample>& samples) {
  std::vector<SampleAttribute> attributes;
  for (const OwnedSample& s : samples) {
    attributes.clear();
    for (const auto& [key, value] : s.attributes) attributes.push_back({key, value});
    profile.AddSample(s.pid, s.process, s.thread, s.frames, s.count,
                      {.link = s.link, .attributes = attributes});
  }
}

// A link whose trace id is `trace` (16 bytes of hex) and span id `span` (8 bytes of hex).
inline TraceLink LinkOf(std::string_view trace, std::string_view span) {
  TraceLink link;
  auto fill = [](std::string_view hex, std::span<uint8_t> out) {
    for (size_t i = 0; i < out.size() && 2 * i + 1 < hex.size(); ++i) {
      auto nibble = [](char c) -> uint8_t {
        return static_cast<uint8_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
      };
      out[i] = static_cast<uint8_t>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
    }
  };
  fill(trace, link.trace_id);
  fill(span, link.span_id);
  return link;
}

}  // namespace ember::testing
