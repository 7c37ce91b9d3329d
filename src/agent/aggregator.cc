// Interval aggregation of symbolized stacks.
#include "agent/aggregator.h"

#include "absl/strings/string_view.h"

namespace ember {

void Aggregator::Add(uint32_t pid, absl::string_view process, absl::string_view thread,
                     std::span<const Frame* const> frames) {
  Key key{pid, std::string(process), std::string(thread), {frames.begin(), frames.end()}};
  ++counts_[std::move(key)];
  ++total_samples_;
}

IntervalProfile Aggregator::TakeInterval(int64_t start_unix_ns, int64_t duration_ns,
                                         int64_t period_ns) {
  IntervalProfile profile;
  profile.start_unix_ns = start_unix_ns;
  profile.duration_ns = duration_ns;
  profile.period_ns = period_ns;
  profile.samples.reserve(counts_.size());
  for (auto& [key, count] : counts_) {
    profile.samples.push_back(StackSample{.pid = key.pid,
                                          .process = key.process,
                                          .thread = key.thread,
                                          .frames = key.frames,
                                          .count = count});
  }
  counts_.clear();
  total_samples_ = 0;
  return profile;
}

}  // namespace ember
