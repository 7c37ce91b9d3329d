// The run-long flame graph: every interval's stacks merged into one bounded call tree and written
// as a single self-contained HTML page (no network access needed to view it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/profile.h"

namespace ember {

// The whole run's stacks merged into one tree (root -> process name -> outermost frame -> ... ->
// leaf), written as one self-contained HTML page. A frame's inlined functions are nodes of their
// own below it (outermost first), typed kInlined. Samples with a trace context (a span, thread
// context attributes) also count, per distinct context, at the node where their stack ends, so
// that the page can narrow the graph to one trace id, span id or attribute value.
class FlameGraph {
 public:
  // What a node stands for; decides its colour on the page. Values are part of the page's JSON.
  enum class NodeType : uint8_t {
    kRoot = 0,
    kProcess = 1,
    kNative = 2,
    kKernel = 3,
    kUnknown = 4,  // "[truncated]", unnamed "module+0x..." frames
    kOther = 5,    // children folded away by the node bound
    kInlined = 6,  // a function inlined into its parent node: no frame of its own at run time
    // Frames of managed code, by runtime (FrameKind).
    kJit = 7,
    kV8Js = 8,
    kJvm = 9,
    kDotnet = 10,
    kCPython = 11,
    kGo = 12,
  };

  // beyond it, new children fold into an "[other]" child: bounded memory. The "[other]" children
  // are leaves and at most one per node, so the tree never exceeds 2 * max_nodes nodes. Trace
  // contexts are bounded apart: at most max_nodes distinct ones, whose bytes (ids, attribute keys
  // and values) take at most max_context_bytes, and max_nodes (node, context) counts.
  explicit FlameGraph(size_t max_nodes = 200000, size_t max_context_bytes = 8 << 20);

  void Add(const IntervalProfile& profile);  // copies names; holds no pointers into profile
  int64_t total_samples() const { return total_samples_; }
  size_t nodes() const { return nodes_.size(); }

  // Atomically (tmp + rename) writes the page. No network access from the page: all JS/CSS inline,
  // data embedded as JSON (escape </script>, quotes, control chars, non-ASCII safely).
  absl::Status WriteHtml(const std::string& path, const std::string& title) const;

  // The JSON the page embeds: run summary, a name table and the tree in pre-order as flat
  // [name index, NodeType, samples, child count] quadruples, children by descending samples.
  // When samples had trace contexts, also "contexts": {"strings": [text...], "list": [[trace id,
  // span id, key, value, key, value, ...] per distinct context, as indices into strings (ids in
  // lowercase hex; -1 for none)], "samples": [tree position of the node where the stacks ended,
  // context, samples, ...], "folded_samples": samples whose context went over the bounds}.
  std::string ToJson() const;

  // For tests and diagnostics.
  size_t node_count() const { return nodes_.size(); }
  int64_t folded_samples() const { return folded_samples_; }
  size_t contexts() const { return contexts_.size(); }
  // Samples with a context that the page cannot filter: beyond the bounds of the contexts.
  int64_t context_folded_samples() const { return context_folded_samples_; }
  // Samples of the node reached from the root by `path` (process name, then frame names
  // outermost first, inlined functions after their frame; a step matches a child of any type),
  // or -1 if there is no such node.
  int64_t SamplesAt(const std::vector<std::string>& path) const;

 private:
  // A node's name id and type in one word: name << 4 | type. A name id fits in 28 bits: names are
  // only added with nodes (and "[other]"), at most max_nodes + 1 of them.
  static uint32_t NameAndType(uint32_t name, NodeType type) {
    return name << 4 | static_cast<uint32_t>(type);
  }
  // 16 bytes. Its parent is only in the child index or in the parent's last_child, which ToJson
  // reads the tree from.
  struct Node {
    uint32_t name_and_type;
    // The child this node's last stack stepped to, tried before the child index: below the first
    // few levels most nodes have one child, and a path's nodes, made one after another, lie next
    // to each other, so a walk down a known path reads memory in order instead of hashing.
    // A node's only child is here alone: the index holds the children of nodes with two or more
    // (all of them), so a stack that reaches new nodes makes its chain of only children without
    // a hash insert each (a cache miss in the index's megabytes).
    uint32_t last_child;
    int64_t samples;
    uint32_t name() const { return name_and_type >> 4; }
    NodeType type() const { return static_cast<NodeType>(name_and_type & 15); }
  };
  // A child by its parent, name and type in 8 bytes (12-byte index slots, not 16).
  struct ChildKey {
    uint32_t parent;
    uint32_t name_and_type;
    bool operator==(const ChildKey&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const ChildKey& k) {
      return H::combine(std::move(h), uint64_t{k.parent} << 32 | k.name_and_type);
    }
  };

  // One stack of an interval as Add merges it: its frames, outermost first, are
  // frames[begin, end) of Add's one array for the whole interval.
  struct Path {
    uint32_t process;  // the rank of its process's name (or "pid N") among the interval's
    uint32_t begin;
    uint32_t end;
    uint32_t context;  // into Add's list of the interval's contexts; kNoContext: none
    int64_t count;
  };
  // A distinct trace context, its texts as ids into context_strings_.
  struct Context {
    int32_t trace_id = -1;  // lowercase hex; -1: none
    int32_t span_id = -1;
    std::vector<uint32_t> attributes;  // key, value, key, value, ...
  };
  // The child a frame or an inlined function of the interval steps to, worked out once per frame.
  struct Step {
    absl::string_view name;
    uint32_t name_id;  // kNoName while the name is not in the table
    NodeType type;
  };

  // Adds `count` to the child of `parent` that `step` names, creating it if the bound allows.
  // Returns the child, or kFolded if the count went to the parent's "[other]" leaf instead.
  uint32_t AddToChild(uint32_t parent, Step& step, int64_t count);
  // AddToChild's work when the parent's last child is not the one: through the child index.
  uint32_t FindOrAddChild(uint32_t parent, Step& step, int64_t count);
  // The child of `parent` with this name and type, or kNoChild.
  uint32_t FindChild(uint32_t parent, uint32_t name_and_type) const;
  // Makes a new child of `parent`, known to have none of this name and type, and its last child.
  uint32_t AddChild(uint32_t parent, uint32_t name, NodeType type);
  // ToJson's text, appended to *out (the page is written around it without copying it).
  void AppendJson(std::string* out) const;
  uint32_t InternName(absl::string_view name);
  uint32_t NameId(absl::string_view name) const;  // kNoName if not interned
  uint32_t NewNode(uint32_t name, NodeType type);
  // Counts `count` samples of `context` (not empty) at `node`, where their stack ended.
  void AddContextSamples(uint32_t node, const SampleContext& context, int64_t count);
  // The id of `context` in contexts_, added if new; kNoContext when the bound is reached.
  uint32_t ContextId(const SampleContext& context);
  uint32_t ContextString(absl::string_view text);
  void AppendContextsJson(const std::vector<uint32_t>& position, std::string* out) const;

  static constexpr uint32_t kFolded = UINT32_MAX;
  static constexpr uint32_t kNoChild = 0;  // the root is no node's child
  static constexpr uint32_t kNoName = UINT32_MAX;
  static constexpr uint32_t kNoContext = UINT32_MAX;

  size_t max_nodes_;
  size_t max_context_bytes_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<ChildKey, uint32_t> children_;  // of nodes with two children or more
  // A deque so the views in name_ids_ stay valid as names are added.
  std::deque<std::string> names_;
  absl::flat_hash_map<absl::string_view, uint32_t> name_ids_;
  uint32_t other_name_ = kNoName;  // "[other]" enters the name table with the first fold
  uint32_t last_other_ = 0;        // the "[other]" node the last fold counted at

  // The contexts (bounded by max_nodes_), their texts, and the samples per (node, context).
  std::vector<Context> contexts_;
  absl::flat_hash_map<std::string, uint32_t> context_ids_;  // by the context's bytes
  std::string context_key_;                                 // ContextId's, reused
  std::deque<std::string> context_strings_;
  absl::flat_hash_map<absl::string_view, uint32_t> context_string_ids_;
  absl::flat_hash_map<uint64_t, int64_t> context_samples_;  // node << 32 | context -> samples
  int64_t context_folded_samples_ = 0;
  size_t context_bytes_ = 0;  // of context_ids_' keys and context_strings_

  int64_t total_samples_ = 0;
  int64_t folded_samples_ = 0;
  int64_t cpu_ns_ = 0;
  int64_t intervals_ = 0;
  int64_t first_start_ns_ = 0;
  int64_t last_end_ns_ = 0;
  int64_t period_ns_ = 0;
  bool warned_full_ = false;
};

}  // namespace ember
