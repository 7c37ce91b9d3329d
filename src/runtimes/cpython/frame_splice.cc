// SpliceStacks: pairs eval-call groups of Python frames with native eval frames.
#include "runtimes/cpython/frame_splice.h"

#include <algorithm>

namespace ember::python {
namespace {

using Group = SpliceScratch::Group;

void Groups(const std::vector<bool>& python_entry, std::vector<Group>& groups) {
  groups.clear();
  uint32_t begin = 0;
  for (uint32_t i = 0; i < python_entry.size(); ++i) {
    if (python_entry[i]) {
      groups.push_back({begin, i + 1});
      begin = i + 1;
    }
  }
  if (begin < python_entry.size())
    groups.push_back({begin, static_cast<uint32_t>(python_entry.size())});
}

void AppendGroup(const Group& group, std::vector<SplicedFrame>* out) {
  for (uint32_t j = group.begin; j < group.end; ++j) {
    out->push_back({SplicedFrame::Kind::kPython, j});
  }
}

}  // namespace

std::vector<SplicedFrame> SpliceStacks(const std::vector<bool>& native_is_eval,
                                       const std::vector<bool>& python_entry, bool native_truncated,
                                       SpliceStats* stats) {
  SpliceScratch scratch;
  std::vector<SplicedFrame> out;
  SpliceStacksInto(native_is_eval, python_entry, native_truncated, stats, scratch, out);
  return out;
}

void SpliceStacksInto(const std::vector<bool>& native_is_eval,
                      const std::vector<bool>& python_entry, bool native_truncated,
                      SpliceStats* stats, SpliceScratch& scratch, std::vector<SplicedFrame>& out) {
  std::vector<Group>& groups = scratch.groups;
  Groups(python_entry, groups);
  std::vector<uint32_t>& evals = scratch.evals;
  evals.clear();
  for (uint32_t i = 0; i < native_is_eval.size(); ++i) {
    if (native_is_eval[i]) evals.push_back(i);
  }
  const size_t pairs = std::min(groups.size(), evals.size());
  // group_for_eval[k]: the group replacing eval frame k, or -1.
  std::vector<int>& group_for_eval = scratch.group_for_eval;
  group_for_eval.assign(evals.size(), -1);
  size_t first_paired_eval = 0, first_paired_group = 0;  // leaf-most paired, in each list
  if (native_truncated) {
    for (size_t k = 0; k < pairs; ++k) group_for_eval[k] = static_cast<int>(k);
  } else {
    first_paired_eval = evals.size() - pairs;
    first_paired_group = groups.size() - pairs;
    for (size_t k = 0; k < pairs; ++k) {
      group_for_eval[first_paired_eval + k] = static_cast<int>(first_paired_group + k);
    }
  }
  if (stats != nullptr) {
    stats->eval_frames_left_native += static_cast<uint32_t>(evals.size() - pairs);
    stats->python_groups_unplaced += static_cast<uint32_t>(groups.size() - pairs);
  }

  out.clear();
  size_t next_eval = 0;
  for (uint32_t i = 0; i < native_is_eval.size(); ++i) {
    if (!native_is_eval[i]) {
      out.push_back({SplicedFrame::Kind::kNative, i});
      continue;
    }
    size_t k = next_eval++;
    if (group_for_eval[k] < 0) {
      out.push_back({SplicedFrame::Kind::kNative, i});
      continue;
    }
    if (!native_truncated && k == first_paired_eval) {
      // Leaf groups without an eval frame of their own: calls being set up right here.
      for (size_t g = 0; g < first_paired_group; ++g) AppendGroup(groups[g], &out);
    }
    AppendGroup(groups[static_cast<size_t>(group_for_eval[k])], &out);
  }
  if (pairs == 0 || native_truncated) {
    // No eval frame to anchor to, or the native root is missing: the rest go at the root end.
    size_t from = native_truncated ? pairs : 0;
    for (size_t g = from; g < groups.size(); ++g) AppendGroup(groups[g], &out);
  }
}

}  // namespace ember::python
