// Merges a sample's Python frames into its native stack: each native _PyEval_EvalFrameDefault
// frame is replaced by the Python frames that eval call ran (docs/cpython.md, "Splicing"). Pure,
// over indexes, so the agent keeps its own frame types.
#pragma once

#include <cstdint>
#include <vector>

namespace ember::python {

struct SplicedFrame {
  enum class Kind : uint8_t { kNative, kPython };
  Kind kind = Kind::kNative;
  uint32_t index = 0;  // into the native or the Python frames
  bool operator==(const SplicedFrame&) const = default;
};

struct SpliceStats {
  uint32_t eval_frames_left_native = 0;  // eval frames no Python group was found for
  uint32_t python_groups_unplaced = 0;   // groups no eval frame was found for
};

// `native_is_eval[i]`: native frame i (leaf first) lies in _PyEval_EvalFrameDefault.
// `python_entry[j]`: Python frame j (leaf first, from the walk) is an entry frame; the frames up
// to and including an entry frame form one eval call's group (a trailing group without an entry
// frame, from a truncated walk, counts as one too).
//
// Groups and eval frames are paired from the root, where the stack is stable: a sample that lands
// while a call is being set up or torn down has one group or one eval frame too many at the leaf.
// An extra leaf group goes where the innermost paired eval frame was, leaf-ward of its group;
// extra leaf eval frames stay native. With no eval frame at all, every group goes after the last
// native frame. When the native stack was cut short
// (`native_truncated`), the root of it is missing instead: pairs are made from the leaf and the
// extra groups go after the last native frame.
std::vector<SplicedFrame> SpliceStacks(const std::vector<bool>& native_is_eval,
                                       const std::vector<bool>& python_entry, bool native_truncated,
                                       SpliceStats* stats);

// The working vectors of a splice, kept by a caller that splices every sample: once grown to a
// stack's size, splicing allocates nothing.
struct SpliceScratch {
  struct Group {
    uint32_t begin = 0;  // Python frame indexes [begin, end), leaf first
    uint32_t end = 0;
  };
  std::vector<Group> groups;
  std::vector<uint32_t> evals;
  std::vector<int> group_for_eval;
};

// SpliceStacks into `out` (cleared first), with the working vectors of `scratch`.
void SpliceStacksInto(const std::vector<bool>& native_is_eval,
                      const std::vector<bool>& python_entry, bool native_truncated,
                      SpliceStats* stats, SpliceScratch& scratch, std::vector<SplicedFrame>& out);

}  // namespace ember::python
