// Counts samples per (process, thread name, stack) over one export interval.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "common/profile.h"

namespace ember {

class Aggregator {
 public:
  // frames: leaf first.
  void Add(uint32_t pid, absl::string_view process, absl::string_view thread,
           std::span<const Frame* const> frames);
  // Hands over everything counted since the last call and starts a new interval.
  IntervalProfile TakeInterval(int64_t start_unix_ns, int64_t duration_ns, int64_t period_ns);

  int64_t total_samples() const { return total_samples_; }
  size_t distinct_stacks() const { return counts_.size(); }

 private:
  // A sample's key as it arrives: looked up without copying it, copied only when new.
  struct KeyView {
    uint32_t pid = 0;
    absl::string_view process;
    absl::string_view thread;
    std::span<const Frame* const> frames;
  };
  struct Key {
    explicit Key(const KeyView& view)
        : pid(view.pid),
          process(view.process),
          thread(view.thread),
          frames(view.frames.begin(), view.frames.end()) {}
    uint32_t pid = 0;
    std::string process;
    std::string thread;
    std::vector<const Frame*> frames;
  };
  static KeyView ViewOf(const Key& key) { return {key.pid, key.process, key.thread, key.frames}; }
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(const KeyView& key) const;
    size_t operator()(const Key& key) const { return (*this)(ViewOf(key)); }
  };
  struct KeyEq {
    using is_transparent = void;
    bool operator()(const KeyView& a, const KeyView& b) const;
    bool operator()(const Key& a, const Key& b) const { return (*this)(ViewOf(a), ViewOf(b)); }
    bool operator()(const Key& a, const KeyView& b) const { return (*this)(ViewOf(a), b); }
    bool operator()(const KeyView& a, const Key& b) const { return (*this)(a, ViewOf(b)); }
  };
  absl::flat_hash_map<Key, int64_t, KeyHash, KeyEq> counts_;
  int64_t total_samples_ = 0;
};

}  // namespace ember
