// A generated interval of many processes and distinct stacks, big enough to need more than one
// OTLP request when asked (the builder's and the exporters' tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/profile.h"

namespace ember::testing {

// `pids` processes (from pid 1000) of `per_pid` samples each, every sample its own three-frame
// stack of functions named fn_PID_I_DEPTH followed by `name_padding` pseudo-random letters (which
// gzip does not shrink much: a receiver's size limit is not dodged by compression); counts 1 to 4.
struct ManyStacks {
  std::deque<Frame> frames;  // the profile points at them: a deque keeps their addresses
  IntervalProfile profile;

  ManyStacks(uint32_t pids, int per_pid, size_t name_padding = 0,
             int64_t start_unix_ns = 1'700'000'000'000'000'000,
             int64_t duration_ns = 10'000'000'000, int64_t period_ns = 10'000'000) {
    profile.start_unix_ns = start_unix_ns;
    profile.duration_ns = duration_ns;
    profile.period_ns = period_ns;
    uint64_t state = 0x9e3779b97f4a7c15;  // xorshift64
    const auto padding = [&] {
      std::string letters(name_padding, 'a');
      for (char& c : letters) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        c = static_cast<char>('a' + state % 26);
      }
      return letters;
    };
    for (uint32_t pid = 1000; pid < 1000 + pids; ++pid) {
      for (int i = 0; i < per_pid; ++i) {
        std::vector<const Frame*> stack;
        for (int depth = 0; depth < 3; ++depth) {
          frames.push_back(
              Frame{.function = absl::StrCat("fn_", pid, "_", i, "_", depth, padding()),
                    .address = 0x1000u + 16u * frames.size(),
                    .module = absl::StrCat("/usr/bin/app", pid % 7)});
          stack.push_back(&frames.back());
        }
        profile.AddSample(pid, "app", absl::StrCat("thread-", i % 3), stack, 1 + i % 4);
      }
    }
  }

  int64_t total_count() const {
    int64_t total = 0;
    for (const StackSample& s : profile.samples) total += s.count;
    return total;
  }
};

}  // namespace ember::testing
