// Merges interval profiles into one call tree held as a flat node array plus a (parent, name,
// type) -> child index, and serializes it into the embedded HTML template.
#include "output/flame_graph.h"

#include <algorithm>
#include <charconv>
#include <numeric>
#include <span>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/names.h"
#include "output/atomic_file.h"
#include "output/flame_graph_template.h"
#include "output/html_json.h"
#include "spdlog/spdlog.h"

namespace ember {
namespace {

constexpr absl::string_view kOtherName = "[other]";
// Keeps name ids within ChildKey's 28 bits; a graph this big would take gigabytes anyway.
constexpr size_t kMostNodes = (size_t{1} << 28) - 2;
static_assert(static_cast<uint32_t>(FlameGraph::NodeType::kGo) < 16,
              "ChildKey keeps a node type in 4 bits");

// "module+0x1a2b" is how the symbolizer names a frame it could not resolve.
bool IsUnresolvedName(absl::string_view name) {
  const size_t plus = name.rfind("+0x");
  if (plus == absl::string_view::npos || plus == 0 || plus + 3 == name.size()) return false;
  return std::all_of(name.begin() + plus + 3, name.end(),
                     [](char c) { return absl::ascii_isxdigit(static_cast<unsigned char>(c)); });
}

FlameGraph::NodeType TypeOf(const Frame& frame) {
  if (frame.function.empty() || frame.function == "[truncated]" ||
      IsUnresolvedName(frame.function)) {
    return FlameGraph::NodeType::kUnknown;
  }
  switch (frame.kind) {
    case FrameKind::kNative:
      return FlameGraph::NodeType::kNative;
    case FrameKind::kKernel:
      return FlameGraph::NodeType::kKernel;
    case FrameKind::kJit:
      return FlameGraph::NodeType::kJit;
    case FrameKind::kV8Js:
      return FlameGraph::NodeType::kV8Js;
    case FrameKind::kJvm:
      return FlameGraph::NodeType::kJvm;
    case FrameKind::kDotnet:
      return FlameGraph::NodeType::kDotnet;
    case FrameKind::kCPython:
      return FlameGraph::NodeType::kCPython;
    case FrameKind::kGo:
      return FlameGraph::NodeType::kGo;
  }
  return FlameGraph::NodeType::kNative;
}

}  // namespace

FlameGraph::FlameGraph(size_t max_nodes, size_t max_context_bytes)
    : max_nodes_(std::clamp<size_t>(max_nodes, 1, kMostNodes)),
      max_context_bytes_(max_context_bytes) {
  NewNode(InternName("all"), NodeType::kRoot);
}

uint32_t FlameGraph::InternName(absl::string_view name) {
  // Names come cut from the symbolizers; this keeps the page bounded for any other caller.
  std::string cut;
  if (name.size() > kMaxNameBytes) {
    cut.assign(name.data(), name.size());
    CapName(cut, NameKind::kOutput);
    name = cut;
  }
  if (auto it = name_ids_.find(name); it != name_ids_.end()) return it->second;
  names_.emplace_back(name);
  const auto id = static_cast<uint32_t>(names_.size() - 1);
  name_ids_.emplace(names_.back(), id);
  return id;
}

uint32_t FlameGraph::NameId(absl::string_view name) const {
  std::string cut;
  if (name.size() > kMaxNameBytes) {  // as InternName keeps it
    cut.assign(name.data(), name.size());
    CutName(cut);
    name = cut;
  }
  auto it = name_ids_.find(name);
  return it == name_ids_.end() ? kNoName : it->second;
}

uint32_t FlameGraph::NewNode(uint32_t name, NodeType type) {
  nodes_.push_back(Node{NameAndType(name, type), kNoChild, 0});
  return static_cast<uint32_t>(nodes_.size() - 1);
}

uint32_t FlameGraph::AddToChild(uint32_t parent, Step& step, int64_t count) {
  if (const uint32_t last = nodes_[parent].last_child; last != kNoChild) {
    Node& child = nodes_[last];
    if (step.name_id != kNoName && child.name_and_type == NameAndType(step.name_id, step.type)) {
      child.samples += count;
      return last;
    }
  }
  const uint32_t child = FindOrAddChild(parent, step, count);
  if (child != kFolded) nodes_[parent].last_child = child;
  return child;
}

uint32_t FlameGraph::FindChild(uint32_t parent, uint32_t name_and_type) const {
  const uint32_t last = nodes_[parent].last_child;
  if (last == kNoChild) return kNoChild;
  if (nodes_[last].name_and_type == name_and_type) return last;
  // An only child is not in the index: the lookup then finds nothing, as it should.
  auto it = children_.find(ChildKey{parent, name_and_type});
  return it == children_.end() ? kNoChild : it->second;
}

uint32_t FlameGraph::AddChild(uint32_t parent, uint32_t name, NodeType type) {
  const uint32_t child = NewNode(name, type);
  const uint32_t first = nodes_[parent].last_child;
  if (first != kNoChild) {
    // A second child puts the first in the index too, unless an earlier one did.
    children_.try_emplace(ChildKey{parent, nodes_[first].name_and_type}, first);
    children_.emplace(ChildKey{parent, NameAndType(name, type)}, child);
  }
  nodes_[parent].last_child = child;
  return child;
}

uint32_t FlameGraph::FindOrAddChild(uint32_t parent, Step& step, int64_t count) {
  // A step still without a name id has no node yet: names come in with their first node.
  uint32_t child =
      step.name_id == kNoName ? kNoChild : FindChild(parent, NameAndType(step.name_id, step.type));
  if (child == kNoChild && nodes_.size() < max_nodes_) {
    if (step.name_id == kNoName) step.name_id = InternName(step.name);
    child = AddChild(parent, step.name_id, step.type);
  }
  if (child != kNoChild) {
    nodes_[child].samples += count;
    return child;
  }
  // Full: only existing children count, and a name that would only be folded away must not grow
  // the name table either.
  if (!warned_full_) {
    warned_full_ = true;
    spdlog::warn(
        "flame graph reached {} nodes; further new call paths are folded into \"[other]\" frames",
        max_nodes_);
  }
  if (other_name_ == kNoName) other_name_ = InternName(kOtherName);
  uint32_t other = FindChild(parent, NameAndType(other_name_, NodeType::kOther));
  if (other == kNoChild) other = AddChild(parent, other_name_, NodeType::kOther);
  nodes_[other].samples += count;
  folded_samples_ += count;
  last_other_ = other;
  return kFolded;
}

void FlameGraph::Add(const IntervalProfile& profile) {
  if (intervals_ == 0 || profile.start_unix_ns < first_start_ns_) {
    first_start_ns_ = profile.start_unix_ns;
  }
  last_end_ns_ = std::max(last_end_ns_, profile.start_unix_ns + profile.duration_ns);
  period_ns_ = profile.period_ns;
  if (intervals_ == 0) {
    // The nodes, with room for some "[other]" leaves past the bound: each doubling of the
    // array copied it and faulted in fresh pages (growing to the bound took 14% longer, from
    // untouched memory). The pages fill in order, so only the ones in use are resident. (The
    // child index is not reserved: it holds only the children of branching nodes, a twentieth
    // of the nodes on the distinct-stack benchmark.)
    nodes_.reserve(max_nodes_ + max_nodes_ / 8);
  }
  ++intervals_;
  // The step of each of this interval's frames (and inlined functions), by address: frames are
  // shared by many stacks, and hashing a pointer is cheaper than typing and hashing a name.
  absl::flat_hash_map<const void*, Step> steps;
  auto step_of = [&](const Frame& frame) -> Step& {
    auto [it, inserted] = steps.try_emplace(&frame);
    if (inserted) {
      const absl::string_view name = frame.function.empty() ? absl::string_view("[unknown]")
                                                            : absl::string_view(frame.function);
      it->second = Step{name, NameId(name), TypeOf(frame)};
    }
    return it->second;
  };
  auto step_of_inlined = [&](const InlineFrame& in) -> Step& {
    auto [it, inserted] = steps.try_emplace(&in);
    if (inserted) it->second = Step{in.function, NameId(in.function), NodeType::kInlined};
    return it->second;
  };
  // Stacks in order of their process, then their frames outermost first: each then shares the
  // longest possible prefix of nodes with the one before, whose nodes only need the count added
  // (no lookups), and only the rest of the stack is looked up. Processes are numbered in name
  // order, so that the sort compares numbers.
  std::deque<std::string> pid_names;
  absl::flat_hash_map<absl::string_view, uint32_t> process_ids;  // numbered as they come
  std::vector<absl::string_view> processes;
  std::vector<const Frame*> frames;
  std::vector<Path> paths;
  paths.reserve(profile.samples.size());
  std::vector<const SampleContext*> contexts;  // of the samples that have one
  for (const StackSample& s : profile.samples) {
    if (s.count <= 0) continue;
    absl::string_view process(s.process.data(), s.process.size());
    if (process.empty()) process = pid_names.emplace_back(absl::StrCat("pid ", s.pid));
    const auto [id, inserted] = process_ids.try_emplace(process, processes.size());
    if (inserted) processes.push_back(process);
    const auto begin = static_cast<uint32_t>(frames.size());
    for (auto it = s.frames.rbegin(); it != s.frames.rend(); ++it) {
      if (*it != nullptr) frames.push_back(*it);
    }
    uint32_t context = kNoContext;
    if (!s.context.empty()) {
      context = static_cast<uint32_t>(contexts.size());
      contexts.push_back(&s.context);
    }
    paths.push_back(
        Path{id->second, begin, static_cast<uint32_t>(frames.size()), context, s.count});
  }
  std::vector<uint32_t> by_name(processes.size());
  std::iota(by_name.begin(), by_name.end(), 0);
  std::sort(by_name.begin(), by_name.end(),
            [&](uint32_t a, uint32_t b) { return processes[a] < processes[b]; });
  std::vector<uint32_t> rank(processes.size());
  for (uint32_t i = 0; i < by_name.size(); ++i) rank[by_name[i]] = i;
  for (Path& path : paths) path.process = rank[path.process];
  std::sort(paths.begin(), paths.end(), [&](const Path& a, const Path& b) {
    if (a.process != b.process) return a.process < b.process;
    return std::lexicographical_compare(frames.begin() + a.begin, frames.begin() + a.end,
                                        frames.begin() + b.begin, frames.begin() + b.end,
                                        std::less<const Frame*>());
  });

  // The nodes the previous stack went through, its process node first, and after how many of
  // them each of its frames (with its inlined functions) ended.
  std::vector<uint32_t> nodes_on_path;
  std::vector<size_t> frame_ends;
  const Path* previous = nullptr;
  for (const Path& path : paths) {
    const int64_t count = path.count;
    total_samples_ += count;
    cpu_ns_ += count * profile.period_ns;
    nodes_[0].samples += count;
    const size_t size = path.end - path.begin;
    size_t shared = 0;  // frames shared with the previous stack, all of whose nodes exist
    if (previous != nullptr && previous->process == path.process) {
      const size_t limit = std::min(frame_ends.size(), size);
      while (shared < limit && frames[path.begin + shared] == frames[previous->begin + shared]) {
        ++shared;
      }
      const size_t node_end = shared == 0 ? 1 : frame_ends[shared - 1];
      for (size_t i = 0; i < node_end; ++i) nodes_[nodes_on_path[i]].samples += count;
      nodes_on_path.resize(node_end);
      frame_ends.resize(shared);
    } else {
      nodes_on_path.clear();
      frame_ends.clear();
      const absl::string_view name = processes[by_name[path.process]];
      Step process{name, NameId(name), NodeType::kProcess};
      const uint32_t node = AddToChild(0, process, count);
      previous = nullptr;
      if (node == kFolded) {
        if (path.context != kNoContext) {
          AddContextSamples(last_other_, *contexts[path.context], count);
        }
        continue;
      }
      nodes_on_path.push_back(node);
    }
    previous = &path;
    uint32_t node = nodes_on_path.back();
    for (size_t i = shared; i < size && node != kFolded; ++i) {
      const Frame& frame = *frames[path.begin + i];
      node = AddToChild(node, step_of(frame), count);
      if (node != kFolded) nodes_on_path.push_back(node);
      // Inlined functions are listed innermost first; the tree grows outermost first here too.
      for (auto in = frame.inlined.rbegin(); in != frame.inlined.rend() && node != kFolded; ++in) {
        node = AddToChild(node, step_of_inlined(*in), count);
        if (node != kFolded) nodes_on_path.push_back(node);
      }
      // A frame counts as on the path only with all its nodes: one folded away ends the path.
      if (node != kFolded) frame_ends.push_back(nodes_on_path.size());
    }
    // The stack ended at the last node it reached, or in the "[other]" leaf it was folded into.
    if (path.context != kNoContext) {
      AddContextSamples(node == kFolded ? last_other_ : nodes_on_path.back(),
                        *contexts[path.context], count);
    }
  }
}

void FlameGraph::AddContextSamples(uint32_t node, const SampleContext& context, int64_t count) {
  const uint32_t id = ContextId(context);
  if (id == kNoContext) {
    context_folded_samples_ += count;
    return;
  }
  const uint64_t key = uint64_t{node} << 32 | id;
  if (auto it = context_samples_.find(key); it != context_samples_.end()) {
    it->second += count;
  } else if (context_samples_.size() < max_nodes_) {
    context_samples_.emplace(key, count);
  } else {
    context_folded_samples_ += count;
  }
}

uint32_t FlameGraph::ContextId(const SampleContext& context) {
  // The context's bytes: ids, then each attribute's key and value, each after its length.
  context_key_.assign(reinterpret_cast<const char*>(context.link.trace_id.data()),
                      context.link.trace_id.size());
  context_key_.append(reinterpret_cast<const char*>(context.link.span_id.data()),
                      context.link.span_id.size());
  for (const SampleAttribute& attribute : context.attributes) {
    for (std::string_view text : {attribute.key, attribute.value}) {
      const auto size = static_cast<uint32_t>(text.size());
      context_key_.append(reinterpret_cast<const char*>(&size), sizeof(size));
      context_key_.append(text);
    }
  }
  if (auto it = context_ids_.find(context_key_); it != context_ids_.end()) return it->second;
  // The texts a new context adds are at most its key's bytes over again (hex ids: twice).
  if (contexts_.size() >= max_nodes_ ||
      context_bytes_ + 3 * context_key_.size() > max_context_bytes_) {
    return kNoContext;
  }
  context_bytes_ += context_key_.size();
  Context& entry = contexts_.emplace_back();
  if (!context.link.empty()) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string hex;
    const auto to_hex = [&](std::span<const uint8_t> bytes) {
      hex.clear();
      for (uint8_t b : bytes) {
        hex.push_back(kDigits[b >> 4]);
        hex.push_back(kDigits[b & 15]);
      }
      return static_cast<int32_t>(ContextString(hex));
    };
    entry.trace_id = to_hex(context.link.trace_id);
    const auto& span = context.link.span_id;
    if (std::any_of(span.begin(), span.end(), [](uint8_t b) { return b != 0; })) {
      entry.span_id = to_hex(span);
    }
  }
  for (const SampleAttribute& attribute : context.attributes) {
    entry.attributes.push_back(ContextString({attribute.key.data(), attribute.key.size()}));
    entry.attributes.push_back(ContextString({attribute.value.data(), attribute.value.size()}));
  }
  const auto id = static_cast<uint32_t>(contexts_.size() - 1);
  context_ids_.emplace(context_key_, id);
  return id;
}

uint32_t FlameGraph::ContextString(absl::string_view text) {
  if (auto it = context_string_ids_.find(text); it != context_string_ids_.end()) return it->second;
  context_strings_.emplace_back(text);
  context_bytes_ += text.size();
  const auto id = static_cast<uint32_t>(context_strings_.size() - 1);
  context_string_ids_.emplace(context_strings_.back(), id);
  return id;
}

int64_t FlameGraph::SamplesAt(const std::vector<std::string>& path) const {
  // A step may match children of several types (a real frame and an inlined function of one
  // name): try them in this order, and take the first that matches the whole path.
  constexpr NodeType kTypes[] = {NodeType::kProcess, NodeType::kNative,  NodeType::kKernel,
                                 NodeType::kJit,     NodeType::kV8Js,    NodeType::kJvm,
                                 NodeType::kDotnet,  NodeType::kCPython, NodeType::kGo,
                                 NodeType::kUnknown, NodeType::kOther,   NodeType::kInlined};
  const auto walk = [&](const auto& self, uint32_t node, size_t step) -> int64_t {
    if (step == path.size()) return nodes_[node].samples;
    auto name_it = name_ids_.find(path[step]);
    if (name_it == name_ids_.end()) return -1;
    for (NodeType type : kTypes) {
      const uint32_t child = FindChild(node, NameAndType(name_it->second, type));
      if (child == kNoChild) continue;
      if (int64_t samples = self(self, child, step + 1); samples >= 0) return samples;
    }
    return -1;
  };
  return walk(walk, 0, 0);
}

std::string FlameGraph::ToJson() const {
  std::string out;
  AppendJson(&out);
  return out;
}

void FlameGraph::AppendJson(std::string* json) const {
  std::string& out = *json;
  const size_t n = nodes_.size();
  // Children lists in one array (CSR), sorted so the page draws the heaviest callee first.
  std::vector<uint32_t> first(n + 1, 0);
  // Every node but the root is the child of one index entry, or its parent's only child.
  for (const auto& [key, child] : children_) ++first[key.parent + 1];
  for (size_t i = 0; i < n; ++i) {
    if (first[i + 1] == 0 && nodes_[i].last_child != kNoChild) first[i + 1] = 1;
  }
  std::partial_sum(first.begin(), first.end(), first.begin());
  std::vector<uint32_t> kids(n > 0 ? n - 1 : 0);
  std::vector<uint32_t> fill(first.begin(), first.end() - 1);
  for (const auto& [key, child] : children_) kids[fill[key.parent]++] = child;
  for (size_t i = 0; i < n; ++i) {
    if (fill[i] == first[i] && first[i + 1] == first[i] + 1) kids[fill[i]++] = nodes_[i].last_child;
  }
  for (size_t i = 0; i < n; ++i) {
    // The index's order is its hash's: ties end on the node number, so the page is the same for
    // the same tree.
    std::sort(kids.begin() + first[i], kids.begin() + first[i + 1], [&](uint32_t a, uint32_t b) {
      if (nodes_[a].samples != nodes_[b].samples) return nodes_[a].samples > nodes_[b].samples;
      if (nodes_[a].name() != nodes_[b].name()) {
        return names_[nodes_[a].name()] < names_[nodes_[b].name()];
      }
      return a < b;
    });
  }

  int64_t processes = static_cast<int64_t>(first[1] - first[0]);
  out.reserve(out.size() + 256 + names_.size() * 24 + n * 16);
  absl::StrAppend(&out, "{\"version\":1,\"samples\":", total_samples_, ",\"cpu_ns\":", cpu_ns_,
                  ",\"period_ns\":", period_ns_, ",\"start_ns\":", first_start_ns_,
                  ",\"end_ns\":", last_end_ns_, ",\"intervals\":", intervals_,
                  ",\"processes\":", processes, ",\"nodes\":", n,
                  ",\"folded_samples\":", folded_samples_, ",\"names\":[");
  for (size_t i = 0; i < names_.size(); ++i) {
    if (i > 0) out.push_back(',');
    AppendJsonString(&out, names_[i]);
  }
  out.append("],\"tree\":[");
  // Iterative pre-order walk: call trees can be thousands of frames deep. Each quadruple is
  // formatted into a small buffer and appended once (StrAppend's pieces took two thirds of this).
  std::vector<uint32_t> stack = {0};
  // Each node's place in the pre-order, which the contexts' samples name it by.
  std::vector<uint32_t> position(contexts_.empty() ? 0 : n);
  uint32_t next_position = 0;
  char entry[1 + 4 * 21];  // a comma, then four numbers of at most 20 digits and a sign, and commas
  char* const entry_end = entry + sizeof(entry);
  bool first_entry = true;
  while (!stack.empty()) {
    const uint32_t i = stack.back();
    stack.pop_back();
    const Node& node = nodes_[i];
    if (!position.empty()) position[i] = next_position++;
    char* at = entry;
    if (!first_entry) *at++ = ',';
    first_entry = false;
    at = std::to_chars(at, entry_end, node.name()).ptr;
    *at++ = ',';
    at = std::to_chars(at, entry_end, static_cast<int>(node.type())).ptr;
    *at++ = ',';
    at = std::to_chars(at, entry_end, node.samples).ptr;
    *at++ = ',';
    at = std::to_chars(at, entry_end, first[i + 1] - first[i]).ptr;
    out.append(entry, at);
    for (uint32_t k = first[i + 1]; k > first[i]; --k) stack.push_back(kids[k - 1]);
  }
  out.append("]");
  // Left out without contexts, so the page of a run without any stays as it was.
  if (!contexts_.empty() || context_folded_samples_ > 0) AppendContextsJson(position, &out);
  out.append("}");
}

void FlameGraph::AppendContextsJson(const std::vector<uint32_t>& position,
                                    std::string* json) const {
  std::string& out = *json;
  out.append(",\"contexts\":{\"strings\":[");
  for (size_t i = 0; i < context_strings_.size(); ++i) {
    if (i > 0) out.push_back(',');
    AppendJsonString(&out, context_strings_[i]);
  }
  out.append("],\"list\":[");
  for (size_t i = 0; i < contexts_.size(); ++i) {
    const Context& context = contexts_[i];
    absl::StrAppend(&out, i > 0 ? ",[" : "[", context.trace_id, ",", context.span_id);
    for (uint32_t text : context.attributes) absl::StrAppend(&out, ",", text);
    out.push_back(']');
  }
  out.append("],\"samples\":[");
  // (position, context, samples) in tree order, so that the page is the same for the same data.
  std::vector<std::tuple<uint32_t, uint32_t, int64_t>> samples;
  samples.reserve(context_samples_.size());
  for (const auto& [key, count] : context_samples_) {
    samples.emplace_back(position[key >> 32], static_cast<uint32_t>(key), count);
  }
  std::sort(samples.begin(), samples.end());
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto& [at, context, count] = samples[i];
    absl::StrAppend(&out, i > 0 ? "," : "", at, ",", context, ",", count);
  }
  absl::StrAppend(&out, "],\"folded_samples\":", context_folded_samples_, "}");
}

absl::Status FlameGraph::WriteHtml(const std::string& path, const std::string& title) const {
  // The JSON (megabytes at the node bound) is written into the page in place, not made apart and
  // copied in.
  constexpr absl::string_view kData = "{{DATA}}";
  const absl::string_view page_template = kFlameGraphTemplate;
  const size_t data_at = page_template.find(kData);
  const std::vector<std::pair<absl::string_view, std::string>> escaped_title = {
      {"{{TITLE}}", HtmlEscape(title)}};
  std::string page = absl::StrReplaceAll(page_template.substr(0, data_at), escaped_title);
  if (data_at != absl::string_view::npos) {
    AppendJson(&page);
    page += absl::StrReplaceAll(page_template.substr(data_at + kData.size()), escaped_title);
  }
  return WriteFileAtomically(path, page);
}

}  // namespace ember
