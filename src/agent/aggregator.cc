// Interval aggregation of symbolized stacks.
#include "agent/aggregator.h"

#include <algorithm>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ember {

size_t Aggregator::KeyHash::operator()(const KeyView& key) const {
  return absl::HashOf(key.pid, key.process, key.thread,
                      absl::Span<const Frame* const>(key.frames.data(), key.frames.size()));
}

bool Aggregator::KeyEq::operator()(const KeyView& a, const KeyView& b) const {
  return a.pid == b.pid && a.process == b.process && a.thread == b.thread &&
         std::equal(a.frames.begin(), a.frames.end(), b.frames.begin(), b.frames.end());
}

void Aggregator::Add(uint32_t pid, absl::string_view process, absl::string_view thread,
                     std::span<const Frame* const> frames) {
  ++total_samples_;
  // One probe (one hash of the stack) finds the count or makes the key from the view.
  ++counts_.try_emplace(KeyView{pid, process, thread, frames}, 0).first->second;
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
  // The next interval will see about as many stacks: keep the table's size rather than grow it
  // again from empty (clear() frees a big table).
  const size_t stacks = counts_.size();
  counts_.clear();
  counts_.reserve(stacks);
  total_samples_ = 0;
  return profile;
}

}  // namespace ember
