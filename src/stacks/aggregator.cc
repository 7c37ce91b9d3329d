// Interval aggregation of symbolized stacks.
#include "stacks/aggregator.h"

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ember {

bool Aggregator::KeyEq::operator()(const Key& a, const Key& b) const {
  return a.hash == b.hash && a.pid == b.pid && a.process == b.process && a.thread == b.thread &&
         std::equal(a.frames.begin(), a.frames.end(), b.frames.begin(), b.frames.end());
}

void Aggregator::Add(uint32_t pid, absl::string_view process, absl::string_view thread,
                     std::span<const Frame* const> frames) {
  ++total_samples_;
  const Key probe{
      .pid = pid,
      .process = {process.data(), process.size()},
      .thread = {thread.data(), thread.size()},
      .frames = frames,
      .hash = absl::HashOf(pid, process, thread,
                           absl::Span<const Frame* const>(frames.data(), frames.size()))};
  // One probe finds the count, or copies the sample into the arena as a new key.
  auto it = counts_.lazy_emplace(probe, [&](const auto& construct) {
    construct(Key{.pid = pid,
                  .process = arena_.CopyString(probe.process),
                  .thread = arena_.CopyString(probe.thread),
                  .frames = arena_.CopyFrames(frames),
                  .hash = probe.hash},
              0);
  });
  ++it->second;
}

IntervalProfile Aggregator::TakeInterval(int64_t start_unix_ns, int64_t duration_ns,
                                         int64_t period_ns) {
  IntervalProfile profile;
  profile.start_unix_ns = start_unix_ns;
  profile.duration_ns = duration_ns;
  profile.period_ns = period_ns;
  profile.samples.reserve(counts_.size());
  for (const auto& [key, count] : counts_) {
    profile.samples.push_back(StackSample{.pid = key.pid,
                                          .process = key.process,
                                          .thread = key.thread,
                                          .frames = key.frames,
                                          .count = count});
  }
  // The keys' names and frames go with the profile: the samples view them.
  profile.arena = std::move(arena_);
  // The next interval will see about as many stacks: keep the table's size rather than grow it
  // again from empty (clear() frees a big table).
  const size_t stacks = counts_.size();
  counts_.clear();
  counts_.reserve(stacks);
  total_samples_ = 0;
  return profile;
}

}  // namespace ember
