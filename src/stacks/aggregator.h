// Counts samples per (process, thread name, stack, trace context) over one export interval.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "common/profile.h"
#include "common/sample_arena.h"

namespace ember {

class Aggregator {
 public:
  // frames: leaf first. Samples whose contexts differ (link or attributes, in their order) are
  // counted apart; the context's views need to live only for the call.
  void Add(uint32_t pid, absl::string_view process, absl::string_view thread,
           std::span<const Frame* const> frames, const SampleContext& context = {});
  // Hands over everything counted since the last call and starts a new interval.
  IntervalProfile TakeInterval(int64_t start_unix_ns, int64_t duration_ns, int64_t period_ns);

  int64_t total_samples() const { return total_samples_; }
  size_t distinct_stacks() const { return counts_.size(); }
  // Samples counted without their context since the aggregator was made: their interval already
  // held kMaxContextKeys stacks with a context (a process that changes its span id at every
  // sample must not grow an interval without bound).
  uint64_t contexts_folded() const { return contexts_folded_; }

  // Stacks with a context per interval: above what a busy 64-CPU node samples in an interval at
  // the default rate (19 Hz, 10 s: 12,160), with each stack's copy at most a few KiB.
  static constexpr size_t kMaxContextKeys = 32768;

 private:
  // A stack's key: views of the sample as it arrives while it is looked up, of arena_ once it is
  // counted (copied at its first sample only), with its hash worked out once.
  struct Key {
    uint32_t pid = 0;
    std::string_view process;
    std::string_view thread;
    std::span<const Frame* const> frames;
    // nullptr for a sample without one (most): the key stays small and hashes as before.
    const SampleContext* context = nullptr;
    size_t hash = 0;
  };
  struct KeyHash {
    size_t operator()(const Key& key) const { return key.hash; }
  };
  struct KeyEq {
    bool operator()(const Key& a, const Key& b) const;
  };
  // A copy of `context` in arena_, its attributes' texts too.
  const SampleContext* CopyContext(const SampleContext* context);

  SampleArena arena_;
  size_t context_keys_ = 0;  // keys with a context this interval
  uint64_t contexts_folded_ = 0;
  std::vector<SampleAttribute> attribute_scratch_;  // reused: a new key's attributes, in arena_
  absl::flat_hash_map<Key, int64_t, KeyHash, KeyEq> counts_;
  int64_t total_samples_ = 0;
};

}  // namespace ember
