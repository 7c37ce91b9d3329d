// Interval aggregation of symbolized stacks.
#include "stacks/aggregator.h"

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ember {
namespace {

// A context as absl::Hash sees it: the link's bytes, then each attribute's key and value.
struct HashedContext {
  const SampleContext& context;

  template <typename H>
  friend H AbslHashValue(H h, const HashedContext& c) {
    h = H::combine(std::move(h), c.context.link.trace_id, c.context.link.span_id);
    for (const SampleAttribute& attribute : c.context.attributes) {
      h = H::combine(std::move(h), attribute.key, attribute.value);
    }
    return H::combine(std::move(h), c.context.attributes.size());
  }
};

}  // namespace

bool Aggregator::KeyEq::operator()(const Key& a, const Key& b) const {
  if (a.hash != b.hash || a.pid != b.pid || a.process != b.process || a.thread != b.thread ||
      !std::equal(a.frames.begin(), a.frames.end(), b.frames.begin(), b.frames.end())) {
    return false;
  }
  if (a.context == nullptr || b.context == nullptr) return a.context == b.context;
  return a.context->link == b.context->link &&
         std::equal(a.context->attributes.begin(), a.context->attributes.end(),
                    b.context->attributes.begin(), b.context->attributes.end());
}

const SampleContext* Aggregator::CopyContext(const SampleContext* context) {
  if (context == nullptr) return nullptr;
  SampleContext copy{.link = context->link, .attributes = {}};
  if (!context->attributes.empty()) {
    attribute_scratch_.clear();
    for (const SampleAttribute& attribute : context->attributes) {
      attribute_scratch_.push_back(
          {.key = arena_.CopyString(attribute.key), .value = arena_.CopyString(attribute.value)});
    }
    copy.attributes = arena_.CopySpan(std::span<const SampleAttribute>(attribute_scratch_));
  }
  return arena_.CopySpan(std::span<const SampleContext>(&copy, 1)).data();
}

void Aggregator::Add(uint32_t pid, absl::string_view process, absl::string_view thread,
                     std::span<const Frame* const> frames, const SampleContext& context) {
  ++total_samples_;
  const absl::Span<const Frame* const> frame_span(frames.data(), frames.size());
  const SampleContext* with_context = context.empty() ? nullptr : &context;
  const Key probe{.pid = pid,
                  .process = {process.data(), process.size()},
                  .thread = {thread.data(), thread.size()},
                  .frames = frames,
                  .context = with_context,
                  .hash = with_context == nullptr ? absl::HashOf(pid, process, thread, frame_span)
                                                  : absl::HashOf(pid, process, thread, frame_span,
                                                                 HashedContext{*with_context})};
  if (with_context != nullptr && context_keys_ >= kMaxContextKeys) {
    if (auto found = counts_.find(probe); found != counts_.end()) {
      ++found->second;
      return;
    }
    // Counted all the same, under its stack alone.
    ++contexts_folded_;
    --total_samples_;
    Add(pid, process, thread, frames, SampleContext{});
    return;
  }
  // One probe finds the count, or copies the sample into the arena as a new key.
  auto it = counts_.lazy_emplace(probe, [&](const auto& construct) {
    if (with_context != nullptr) ++context_keys_;
    construct(Key{.pid = pid,
                  .process = arena_.CopyString(probe.process),
                  .thread = arena_.CopyString(probe.thread),
                  .frames = arena_.CopyFrames(frames),
                  .context = CopyContext(with_context),
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
    profile.samples.push_back(
        StackSample{.pid = key.pid,
                    .process = key.process,
                    .thread = key.thread,
                    .frames = key.frames,
                    .count = count,
                    .context = key.context != nullptr ? *key.context : SampleContext{}});
  }
  // The keys' names, frames and contexts go with the profile: the samples view them.
  profile.arena = std::move(arena_);
  // The next interval will see about as many stacks: keep the table's size rather than grow it
  // again from empty (clear() frees a big table).
  const size_t stacks = counts_.size();
  counts_.clear();
  counts_.reserve(stacks);
  total_samples_ = 0;
  context_keys_ = 0;
  return profile;
}

}  // namespace ember
