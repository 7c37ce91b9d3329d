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
  std::vector<SampleAttribute> attribute_scratch_;  // reused: a new key's attributes, in arena_
  absl::flat_hash_map<Key, int64_t, KeyHash, KeyEq> counts_;
  int64_t total_samples_ = 0;
};

}  // namespace ember
