// FlameGraph: merging, the node bound, hostile names in the embedded JSON, and the written page
// rendered by headless Chromium through tests/support/check_flamegraph.sh.
#include "output/flame_graph.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/names.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "support/subprocess.h"
#include "support/test_samples.h"

namespace ember {
namespace {

using ::ember::testing::OwnedSample;

using ::testing::HasSubstr;
using ::testing::Not;

Frame Native(std::string name) {
  Frame f;
  f.function = std::move(name);
  f.module = "/usr/bin/app";
  return f;
}

Frame Kernel(std::string name) {
  Frame f = Native(std::move(name));
  f.kind = FrameKind::kKernel;
  f.module = "[kernel.kallsyms]";
  return f;
}

IntervalProfile Interval(const std::vector<OwnedSample>& samples) {
  IntervalProfile p;
  p.start_unix_ns = 1'700'000'000'000'000'000;
  p.duration_ns = 10'000'000'000;
  p.period_ns = 10'000'000;
  ::ember::testing::AddSamples(p, samples);
  return p;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(FlameGraphTest, MergesIntervalsIntoOneTree) {
  Frame main_fn = Native("main"), work = Native("Work"), idle = Native("Idle");
  Frame syscall = Kernel("do_syscall_64"), kernel_work = Kernel("Work");
  FlameGraph graph;
  graph.Add(Interval({
      {1, "app", "app", {&work, &main_fn}, 5},
      {1, "app", "app", {&syscall, &work, &main_fn}, 2},
      {2, "db", "db", {&idle, &main_fn}, 4},
  }));
  // A second interval from another thread of app, with frames that are different objects.
  Frame main_again = Native("main"), work_again = Native("Work");
  graph.Add(Interval({
      {3, "app", "other", {&work_again, &main_again}, 1},
      {3, "app", "other", {&kernel_work, &main_again}, 7},
      {4, "", "", {&main_again}, 1},
      {5, "app", "x", {&main_fn}, 0},
  }));

  EXPECT_EQ(graph.total_samples(), 20);
  EXPECT_EQ(graph.SamplesAt({}), 20);
  EXPECT_EQ(graph.SamplesAt({"app"}), 15);
  EXPECT_EQ(graph.SamplesAt({"app", "main"}), 15);
  EXPECT_EQ(graph.SamplesAt({"app", "main", "Work"}), 8);  // native Work only
  EXPECT_EQ(graph.SamplesAt({"app", "main", "Work", "do_syscall_64"}), 2);
  EXPECT_EQ(graph.SamplesAt({"db", "main", "Idle"}), 4);
  EXPECT_EQ(graph.SamplesAt({"pid 4", "main"}), 1);
  EXPECT_EQ(graph.SamplesAt({"db", "Idle"}), -1);
  // root, app, db, pid 4, 3x main, Work (native), Work (kernel), do_syscall_64, Idle.
  EXPECT_EQ(graph.node_count(), 11u);
  EXPECT_EQ(graph.folded_samples(), 0);
}

// A frame's inlined functions hang below it, outermost first, as nodes apart from a real frame
// of the same name.
TEST(FlameGraphTest, InlinedFunctionsAreNodesBelowTheirFrame) {
  Frame main_fn = Native("main"), run = Native("Run"), work = Native("Work");
  Frame run_inlining = Native("Run");
  run_inlining.inlined = {{"Scale", "app.h", 12}, {"Work", "app.h", 18}};  // innermost first
  FlameGraph graph;
  graph.Add(Interval({
      {1, "app", "app", {&run_inlining, &main_fn}, 3},
      {1, "app", "app", {&work, &run, &main_fn}, 2},
  }));
  EXPECT_EQ(graph.SamplesAt({"app", "main", "Run"}), 5);
  EXPECT_EQ(graph.SamplesAt({"app", "main", "Run", "Work", "Scale"}), 3);
  // root, app, main, Run, Work (real frame), Work (inlined), Scale (inlined).
  EXPECT_EQ(graph.node_count(), 7u);
  const std::string json = graph.ToJson();
  EXPECT_THAT(json, HasSubstr(",6,3,1,")) << "inlined Work: type 6, 3 samples, one child";
  EXPECT_THAT(json, HasSubstr(",6,3,0,")) << "inlined Scale: type 6, 3 samples, a leaf";
}

TEST(FlameGraphTest, JitFramesAreTypedByRuntime) {
  Frame main_fn = Native("main");
  Frame js{FrameKind::kV8Js, "JS:*leaf /srv/app.js:3:1", "", 0, 0x7f00, "/tmp/perf-7.map", ""};
  Frame java{FrameKind::kJvm, "void Phases.leaf()", "", 0, 0x7f10, "/tmp/perf-8.map", ""};
  Frame net{FrameKind::kDotnet, "App.Leaf()", "", 0, 0x7f20, "/tmp/perf-9.map", ""};
  Frame py{FrameKind::kCPython, "leaf", "app.py", 3, 0, "", ""};
  Frame jit{FrameKind::kJit, "stub", "", 0, 0x7f30, "/tmp/perf-10.map", ""};
  Frame go{FrameKind::kGo, "main.leaf", "main.go", 9, 0x401000, "/srv/app", ""};
  FlameGraph graph;
  graph.Add(Interval({{1, "node", "node", {&js, &main_fn}, 2},
                      {2, "java", "java", {&java, &main_fn}, 3},
                      {3, "dotnet", "dotnet", {&net, &main_fn}, 4},
                      {4, "python3", "python3", {&py, &main_fn}, 5},
                      {5, "app", "app", {&jit, &main_fn}, 6},
                      {6, "goapp", "goapp", {&go, &main_fn}, 7}}));
  EXPECT_EQ(graph.SamplesAt({"node", "main", "JS:*leaf /srv/app.js:3:1"}), 2);
  const std::string json = graph.ToJson();
  // [name, type, samples, children]: v8js 8, jvm 9, dotnet 10, cpython 11, jit 7, go 12.
  EXPECT_THAT(json, HasSubstr(",8,2,0")) << json;
  EXPECT_THAT(json, HasSubstr(",9,3,0")) << json;
  EXPECT_THAT(json, HasSubstr(",10,4,0")) << json;
  EXPECT_THAT(json, HasSubstr(",11,5,0")) << json;
  EXPECT_THAT(json, HasSubstr(",7,6,0")) << json;
  EXPECT_THAT(json, HasSubstr(",12,7,0")) << json;
}

TEST(FlameGraphTest, NodeBoundFoldsNewPathsIntoOther) {
  constexpr size_t kMaxNodes = 20;
  FlameGraph graph(kMaxNodes);
  Frame main_fn = Native("main");
  std::vector<Frame> leaves;
  leaves.reserve(1000);
  for (int i = 0; i < 1000; ++i) leaves.push_back(Native(absl::StrCat("leaf", i)));
  int64_t total = 0;
  for (int round = 0; round < 3; ++round) {
    std::vector<OwnedSample> samples;
    for (int i = 0; i < 1000; ++i) {
      samples.push_back({1, "app", "app", {&leaves[i], &main_fn}, 1});
      ++total;
    }
    graph.Add(Interval(std::move(samples)));
  }
  EXPECT_LE(graph.node_count(), 2 * kMaxNodes);
  EXPECT_EQ(graph.total_samples(), total);
  EXPECT_EQ(graph.SamplesAt({"app", "main"}), total) << "no sample may be lost";
  // root, app, main and 17 leaves fit; everything after that is folded under main.
  EXPECT_EQ(graph.SamplesAt({"app", "main", "leaf0"}), 3) << "existing nodes keep counting";
  EXPECT_EQ(graph.SamplesAt({"app", "main", "leaf16"}), 3);
  EXPECT_EQ(graph.SamplesAt({"app", "main", "leaf17"}), -1);
  EXPECT_EQ(graph.SamplesAt({"app", "main", "[other]"}), 3 * (1000 - 17));
  EXPECT_EQ(graph.folded_samples(), 3 * (1000 - 17));

  // A deep new stack under a full tree folds at the first missing frame, not deeper.
  std::vector<Frame> deep;
  for (int i = 0; i < 50; ++i) deep.push_back(Native(absl::StrCat("deep", i)));
  OwnedSample s{1, "app", "app", {}, 1};
  for (Frame& f : deep) s.frames.push_back(&f);
  s.frames.push_back(&main_fn);
  graph.Add(Interval({s}));
  EXPECT_EQ(graph.SamplesAt({"app", "main", "[other]"}), 3 * (1000 - 17) + 1);
  EXPECT_LE(graph.node_count(), 2 * kMaxNodes);
  EXPECT_THAT(graph.ToJson(), Not(HasSubstr("deep")));
}

// Stacks that share their outer frames share nodes: each node must count exactly the samples of
// the stacks through it, whatever order the stacks come in and whichever prefix they share.
TEST(FlameGraphTest, EveryPrefixCountsTheSamplesOfTheStacksThroughIt) {
  std::mt19937 random(7);
  std::vector<Frame> pool;
  for (int i = 0; i < 6; ++i) pool.push_back(Native(absl::StrCat("f", i)));
  pool[2].inlined = {{.function = "inner2"}, {.function = "outer2"}};  // innermost first
  const std::vector<std::string> processes = {"app", "db", ""};        // "" is named "pid N"
  std::map<std::vector<std::string>, int64_t> expected;  // path from the process down -> samples
  FlameGraph graph;
  FlameGraph bounded(30);
  int64_t total = 0;
  for (int interval = 0; interval < 5; ++interval) {
    std::vector<OwnedSample> samples;
    for (int i = 0; i < 200; ++i) {
      OwnedSample s;
      s.pid = 40 + static_cast<uint32_t>(random() % 3);
      s.process = processes[s.pid - 40];
      s.count = 1 + static_cast<int64_t>(random() % 4);
      const size_t depth = 1 + random() % 8;
      for (size_t d = 0; d < depth; ++d) s.frames.push_back(&pool[random() % pool.size()]);
      if (random() % 10 == 0) s.frames.insert(s.frames.begin() + 1, nullptr);  // skipped
      std::vector<std::string> path = {s.process.empty() ? absl::StrCat("pid ", s.pid) : s.process};
      expected[path] += s.count;
      for (auto it = s.frames.rbegin(); it != s.frames.rend(); ++it) {
        if (*it == nullptr) continue;
        path.push_back((*it)->function);
        expected[path] += s.count;
        for (auto in = (*it)->inlined.rbegin(); in != (*it)->inlined.rend(); ++in) {
          path.push_back(in->function);
          expected[path] += s.count;
        }
      }
      total += s.count;
      samples.push_back(std::move(s));
    }
    graph.Add(Interval(samples));
    bounded.Add(Interval(std::move(samples)));
  }
  EXPECT_EQ(graph.total_samples(), total);
  for (const auto& [path, samples] : expected) {
    EXPECT_EQ(graph.SamplesAt(path), samples) << absl::StrJoin(path, ";");
    // Under the bound a node may have been made after samples through it were folded away.
    const int64_t in_bounded = bounded.SamplesAt(path);
    EXPECT_TRUE(in_bounded == -1 || (in_bounded > 0 && in_bounded <= samples))
        << absl::StrJoin(path, ";") << ": " << in_bounded << " of " << samples;
  }
  EXPECT_EQ(bounded.total_samples(), total);
  EXPECT_LE(bounded.node_count(), 2 * 30u);
}

// FlameGraph's merge done the plain way, for checking the real one's output: each stack walked
// from the root one node at a time in a std::map tree, in the order Add takes an interval's stacks
// (by process name, then by the frames' addresses outermost first), which decides which stacks
// get the last nodes under the bound. Names must need no JSON escaping.
class ReferenceGraph {
 public:
  explicit ReferenceGraph(size_t max_nodes) : max_nodes_(max_nodes) {
    nodes_.push_back({Intern("all"), 0, 0, 0});
  }

  void Add(const IntervalProfile& profile) {
    if (intervals_ == 0 || profile.start_unix_ns < start_ns_) start_ns_ = profile.start_unix_ns;
    end_ns_ = std::max(end_ns_, profile.start_unix_ns + profile.duration_ns);
    period_ns_ = profile.period_ns;
    ++intervals_;
    // (process, frames outermost first without the null ones, count)
    std::vector<std::tuple<std::string, std::vector<const Frame*>, int64_t>> stacks;
    for (const StackSample& s : profile.samples) {
      if (s.count <= 0) continue;
      std::vector<const Frame*> frames;
      for (auto it = s.frames.rbegin(); it != s.frames.rend(); ++it) {
        if (*it != nullptr) frames.push_back(*it);
      }
      stacks.emplace_back(s.process.empty() ? absl::StrCat("pid ", s.pid) : s.process,
                          std::move(frames), s.count);
    }
    std::stable_sort(stacks.begin(), stacks.end(), [](const auto& a, const auto& b) {
      return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
    });
    for (const auto& [process, frames, count] : stacks) {
      total_ += count;
      cpu_ns_ += count * profile.period_ns;
      nodes_[0].samples += count;
      std::optional<uint32_t> node = Step(0, process, 1, count);
      for (size_t i = 0; i < frames.size() && node; ++i) {
        const Frame& f = *frames[i];
        node = Step(*node, f.function.empty() ? "[unknown]" : f.function, TypeOf(f), count);
        for (auto in = f.inlined.rbegin(); in != f.inlined.rend() && node; ++in) {
          node = Step(*node, in->function, 6, count);
        }
      }
    }
  }

  std::string Json() const {
    std::vector<std::vector<uint32_t>> kids(nodes_.size());
    for (uint32_t i = 1; i < nodes_.size(); ++i) kids[nodes_[i].parent].push_back(i);
    std::string out = absl::StrCat("{\"version\":1,\"samples\":", total_, ",\"cpu_ns\":", cpu_ns_,
                                   ",\"period_ns\":", period_ns_, ",\"start_ns\":", start_ns_,
                                   ",\"end_ns\":", end_ns_, ",\"intervals\":", intervals_,
                                   ",\"processes\":", kids[0].size(), ",\"nodes\":", nodes_.size(),
                                   ",\"folded_samples\":", folded_, ",\"names\":[");
    for (size_t i = 0; i < names_.size(); ++i) {
      absl::StrAppend(&out, i > 0 ? "," : "", "\"", names_[i], "\"");
    }
    out.append("],\"tree\":[");
    const auto append = [&](const auto& self, uint32_t i) -> void {
      std::vector<uint32_t>& children = kids[i];
      std::sort(children.begin(), children.end(), [&](uint32_t a, uint32_t b) {
        if (nodes_[a].samples != nodes_[b].samples) return nodes_[a].samples > nodes_[b].samples;
        return names_[nodes_[a].name] < names_[nodes_[b].name];
      });
      absl::StrAppend(&out, i > 0 ? "," : "", nodes_[i].name, ",", nodes_[i].type, ",",
                      nodes_[i].samples, ",", children.size());
      for (uint32_t child : children) self(self, child);
    };
    append(append, 0);
    out.append("]}");
    return out;
  }

  size_t nodes() const { return nodes_.size(); }
  int64_t folded_samples() const { return folded_; }

 private:
  struct Node {
    uint32_t name;
    uint32_t parent;
    int64_t samples;
    int type;  // FlameGraph::NodeType's value
  };

  static int TypeOf(const Frame& f) {
    if (f.function.empty() || f.function == "[truncated]" ||
        f.function.find("+0x") != std::string::npos) {
      return 4;
    }
    constexpr int kByKind[] = {2, 3, 7, 8, 9, 10, 11, 12};  // FrameKind's order
    return kByKind[static_cast<int>(f.kind)];
  }

  uint32_t Intern(const std::string& name) {
    auto [it, inserted] = name_ids_.try_emplace(name, names_.size());
    if (inserted) names_.push_back(name);
    return it->second;
  }

  // The child of `parent` with this name and type, counting `count` more, made if the bound allows;
  // or none, with the count gone to the parent's "[other]" child.
  std::optional<uint32_t> Step(uint32_t parent, const std::string& name, int type, int64_t count) {
    auto it = children_.find({parent, name, type});
    if (it == children_.end() && nodes_.size() < max_nodes_) {
      it = children_.try_emplace({parent, name, type}, nodes_.size()).first;
      nodes_.push_back({Intern(name), parent, 0, type});
    }
    if (it != children_.end()) {
      nodes_[it->second].samples += count;
      return it->second;
    }
    const uint32_t other_name = Intern("[other]");
    auto [other, inserted] = children_.try_emplace({parent, "[other]", 5}, nodes_.size());
    if (inserted) nodes_.push_back({other_name, parent, 0, 5});
    nodes_[other->second].samples += count;
    folded_ += count;
    return std::nullopt;
  }

  size_t max_nodes_;
  std::vector<Node> nodes_;
  std::map<std::tuple<uint32_t, std::string, int>, uint32_t> children_;
  std::vector<std::string> names_;
  std::map<std::string, uint32_t> name_ids_;
  int64_t total_ = 0, folded_ = 0, cpu_ns_ = 0, intervals_ = 0;
  int64_t start_ns_ = 0, end_ns_ = 0, period_ns_ = 0;
};

// Random intervals of repeated and new stacks (several processes, inlined functions, frame kinds,
// frames of one name at several addresses, counts above one) give, at several node bounds, exactly
// the tree, names and fold counts of the plain merge: what Add does is a matter of speed only.
TEST(FlameGraphTest, MergesExactlyLikeThePlainReferenceMerge) {
  std::mt19937 random(11);
  // name, kind, inlined functions (innermost first); several share a name.
  struct FrameSpec {
    std::string function;
    FrameKind kind = FrameKind::kNative;
    std::vector<std::string> inlined = {};
  };
  const std::vector<FrameSpec> specs = {
      {"main"},
      {"Run"},
      {"Run"},
      {"Work", FrameKind::kNative, {"Scale", "Work"}},
      {"Work"},
      {"Work", FrameKind::kKernel},
      {"do_syscall_64", FrameKind::kKernel},
      {"Parse", FrameKind::kNative, {"Next"}},
      {"Parse", FrameKind::kNative, {"", "Next"}},
      {"", FrameKind::kNative},
      {"[truncated]"},
      {"libfoo.so+0x1a2b"},
      {"leaf", FrameKind::kV8Js},
      {"leaf", FrameKind::kJvm},
      {"leaf", FrameKind::kCPython},
      {"leaf", FrameKind::kGo},
      {"stub", FrameKind::kJit},
      {"Net", FrameKind::kDotnet},
  };
  std::vector<std::vector<size_t>> seen;  // stacks so far, as indices into frames, leaf first
  const std::vector<std::pair<uint32_t, std::string>> processes = {
      {10, "app"}, {11, "app"}, {20, "db"}, {30, ""}, {31, ""}, {40, "main"}};
  for (size_t max_nodes : {1, 2, 40, 150, 600, 200000}) {
    SCOPED_TRACE(absl::StrCat("max_nodes ", max_nodes));
    random.seed(11);
    seen.clear();
    FlameGraph graph(max_nodes);
    ReferenceGraph reference(max_nodes);
    for (int interval = 0; interval < 12; ++interval) {
      // Frames are new objects every interval, as a symbol cache's may be after an eviction.
      std::vector<Frame> frames;
      for (const FrameSpec& spec : specs) {
        Frame& f = frames.emplace_back(Native(spec.function));
        f.kind = spec.kind;
        for (const std::string& in : spec.inlined) f.inlined.emplace_back().function = in;
      }
      // And names that come and go, first met below the bound or only at it: one at two addresses.
      frames.push_back(Native(absl::StrCat("late", interval % 5)));
      frames.push_back(Native(absl::StrCat("late", interval % 5)));
      IntervalProfile profile = Interval({});
      profile.start_unix_ns += (interval % 3 == 2 ? -1 : interval) * 10'000'000'000;
      profile.period_ns = 10'000'000 + interval;
      for (int i = 0; i < 120; ++i) {
        std::vector<size_t> stack;
        if (!seen.empty() && random() % 2 == 0) {
          stack = seen[random() % seen.size()];
        } else {
          stack.resize(1 + random() % 9);
          for (size_t& s : stack) s = random() % frames.size();
          stack.back() = random() % 4 == 0 ? 0 : stack.back();  // often below main
          seen.push_back(stack);
        }
        const auto& [pid, process] = processes[random() % processes.size()];
        OwnedSample s;
        s.pid = pid;
        s.process = process;
        s.count = static_cast<int64_t>(random() % 6) - 1;  // -1 and 0 are skipped
        for (size_t frame : stack) s.frames.push_back(&frames[frame]);
        if (random() % 8 == 0) s.frames.insert(s.frames.begin() + 1, nullptr);
        profile.AddSample(s.pid, s.process, s.thread, s.frames, s.count);
      }
      graph.Add(profile);
      reference.Add(profile);
    }
    EXPECT_EQ(graph.ToJson(), reference.Json());
    EXPECT_EQ(graph.nodes(), reference.nodes());
    EXPECT_EQ(graph.folded_samples(), reference.folded_samples());
    if (max_nodes == 200000) {
      EXPECT_EQ(graph.folded_samples(), 0);
    } else {
      EXPECT_GT(graph.folded_samples(), 0);
    }
  }
}

TEST(FlameGraphTest, JsonEscapesHostileNames) {
  Frame script = Native("</script><script>alert(1)</script>");
  Frame quotes = Native("say \"hi\" \\ 'there'");
  Frame newline = Native("line1\nline2\r\x01");
  Frame utf8 = Native(
      "Gr\xC3\xBC\xC3\x9F"
      "e::na\xC3\xAFve() \xE2\x80\xA8 \xF0\x9F\x94\xA5");
  Frame bad_utf8 = Native("bad\xFF\xC3(");
  FlameGraph graph;
  graph.Add(Interval({{1, "<!--proc-->", "t", {&script, &quotes, &newline, &utf8, &bad_utf8}, 1}}));
  const std::string json = graph.ToJson();
  EXPECT_THAT(json, Not(HasSubstr("<")));
  EXPECT_THAT(json, Not(HasSubstr(">")));
  EXPECT_THAT(json,
              HasSubstr(R"(\u003c/script\u003e\u003cscript\u003ealert(1)\u003c/script\u003e)"));
  EXPECT_THAT(json, HasSubstr(R"(say \"hi\" \\ \u0027there\u0027)"));
  EXPECT_THAT(json, HasSubstr(R"(line1\nline2\u000d\u0001)"));
  EXPECT_THAT(json, HasSubstr("Gr\xC3\xBC\xC3\x9F"
                              "e::na\xC3\xAFve() \\u2028 \xF0\x9F\x94\xA5"));
  EXPECT_THAT(json, HasSubstr("bad\xEF\xBF\xBD\xEF\xBF\xBD("));
  for (char c : json) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << "raw control character";
}

TEST(FlameGraphTest, NamesAreCutToTheNameCap) {
  Frame huge = Native(std::string(100000, 'f'));
  FlameGraph graph;
  const uint64_t before = NamesTruncated(NameKind::kOutput);
  graph.Add(Interval({{1, "p", "t", {&huge}, 1}}));
  graph.Add(Interval({{1, "p", "t", {&huge}, 2}}));  // the same node, not a second one
  const std::string json = graph.ToJson();
  EXPECT_LT(json.size(), 2 * kMaxNameBytes);
  EXPECT_THAT(json, HasSubstr(std::string(kMaxNameBytes - 3, 'f') + "\xE2\x80\xA6"));
  EXPECT_THAT(json, Not(HasSubstr(std::string(kMaxNameBytes - 2, 'f'))));
  EXPECT_EQ(NamesTruncated(NameKind::kOutput), before + 1);
  EXPECT_EQ(graph.SamplesAt({"p", std::string(kMaxNameBytes - 3, 'f') + "\xE2\x80\xA6"}), 3);
}

// The page's contexts as the JSON gives them: per context its texts ("trace_id=…", "key=value"),
// and per (path from the process down, context texts joined by ' ') the samples counted there.
struct PageContexts {
  std::map<std::string, int64_t> samples;
  int64_t folded = 0;
};
PageContexts ContextsOf(const std::string& json) {
  const nlohmann::json data = nlohmann::json::parse(json);
  PageContexts out;
  if (!data.contains("contexts")) return out;
  const auto& names = data["names"];
  const auto& tree = data["tree"];
  // Each pre-order position's path, from the tree's quadruples.
  std::vector<std::string> paths;
  std::vector<std::pair<std::string, int64_t>> open;  // path, children left
  for (size_t i = 0; i + 3 < tree.size(); i += 4) {
    std::string path;
    if (!open.empty()) {
      path = open.back().first.empty()
                 ? names[tree[i].get<size_t>()].get<std::string>()
                 : open.back().first + ";" + names[tree[i].get<size_t>()].get<std::string>();
      --open.back().second;
    }
    paths.push_back(path);
    if (tree[i + 3].get<int64_t>() > 0) open.emplace_back(path, tree[i + 3].get<int64_t>());
    while (!open.empty() && open.back().second == 0) open.pop_back();
  }
  const auto& contexts = data["contexts"];
  const auto& strings = contexts["strings"];
  std::vector<std::string> texts;
  for (const auto& entry : contexts["list"]) {
    std::string text;
    const auto add = [&](const std::string& part) { text += (text.empty() ? "" : " ") + part; };
    if (entry[0].get<int>() >= 0)
      add("trace_id=" + strings[entry[0].get<size_t>()].get<std::string>());
    if (entry[1].get<int>() >= 0)
      add("span_id=" + strings[entry[1].get<size_t>()].get<std::string>());
    for (size_t a = 2; a + 1 < entry.size(); a += 2) {
      add(strings[entry[a].get<size_t>()].get<std::string>() + "=" +
          strings[entry[a + 1].get<size_t>()].get<std::string>());
    }
    texts.push_back(text);
  }
  const auto& samples = contexts["samples"];
  for (size_t i = 0; i + 2 < samples.size(); i += 3) {
    const std::string key =
        paths.at(samples[i].get<size_t>()) + " | " + texts.at(samples[i + 1].get<size_t>());
    EXPECT_FALSE(out.samples.contains(key)) << key << " twice";
    out.samples[key] += samples[i + 2].get<int64_t>();
  }
  out.folded = contexts["folded_samples"].get<int64_t>();
  return out;
}

// Each sample with a trace context counts, per context, at the node where its stack ended (the
// deepest inlined function of its leaf, or the "[other]" leaf it was folded into), over intervals.
TEST(FlameGraphTest, ContextsCountWhereTheirStacksEnd) {
  Frame main_fn = Native("main"), serve = Native("Serve"), parse = Native("Parse");
  parse.inlined = {{.function = "Next"}};
  const TraceLink checkout =
      ember::testing::LinkOf("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
  TraceLink no_span = checkout;
  no_span.span_id = {};
  const std::vector<std::pair<std::string, std::string>> route = {{"http.route", "/checkout"}};
  FlameGraph graph;
  for (int interval = 0; interval < 2; ++interval) {
    graph.Add(Interval({
        {10, "web", "a", {&parse, &serve, &main_fn}, 4, checkout, route},
        {10, "web", "a", {&parse, &serve, &main_fn}, 3, {}, {{"http.route", "/search"}}},
        {10, "web", "a", {&parse, &serve, &main_fn}, 5},  // no context: not recorded
        {10, "web", "a", {&serve, &main_fn}, 2, checkout, route},
        {11, "db", "b", {&main_fn}, 1, no_span, {}},
    }));
  }
  EXPECT_EQ(graph.SamplesAt({"web", "main", "Serve", "Parse", "Next"}), 24);
  EXPECT_EQ(graph.contexts(), 3u);
  const std::string checkout_text =
      "trace_id=0af7651916cd43dd8448eb211c80319c span_id=b7ad6b7169203331 http.route=/checkout";
  const PageContexts contexts = ContextsOf(graph.ToJson());
  EXPECT_EQ(contexts.samples, (std::map<std::string, int64_t>{
                                  {"web;main;Serve;Parse;Next | " + checkout_text, 8},
                                  {"web;main;Serve;Parse;Next | http.route=/search", 6},
                                  {"web;main;Serve | " + checkout_text, 4},
                                  {"db;main | trace_id=0af7651916cd43dd8448eb211c80319c", 2},
                              }));
  EXPECT_EQ(contexts.folded, 0);

  // Without any context the page's data stays as it was.
  FlameGraph plain;
  plain.Add(Interval({{10, "web", "a", {&serve, &main_fn}, 2}}));
  EXPECT_THAT(plain.ToJson(), Not(HasSubstr("contexts")));
}

// Under the node bound the contexts of folded stacks count at the "[other]" leaf; distinct
// contexts and (node, context) counts are bounded too, and what goes over is counted as such.
TEST(FlameGraphTest, ContextsAreBounded) {
  Frame main_fn = Native("main"), a = Native("A"), b = Native("B");
  FlameGraph graph(3);  // root, process, main
  std::vector<OwnedSample> samples;
  for (int i = 0; i < 10; ++i) {
    OwnedSample s{10, "web", "t", {&a, &main_fn}, 1};
    s.attributes = {{"request", std::to_string(i)}};
    samples.push_back(s);
  }
  graph.Add(Interval(samples));
  EXPECT_LE(graph.contexts(), 3u);
  EXPECT_EQ(graph.context_folded_samples(), 7);
  const PageContexts contexts = ContextsOf(graph.ToJson());
  int64_t counted = 0;
  for (const auto& [key, count] : contexts.samples) {
    EXPECT_THAT(key, ::testing::StartsWith("web;main;[other] | request=")) << key;
    counted += count;
  }
  EXPECT_EQ(counted, 3);
  EXPECT_EQ(contexts.folded, 7);
  EXPECT_EQ(graph.total_samples(), 10);

  // Big attribute values fill the byte bound before the count bound.
  FlameGraph by_bytes(1000, 64 * 1024);
  samples.clear();
  for (int i = 0; i < 200; ++i) {
    OwnedSample s{10, "web", "t", {&a, &main_fn}, 1};
    s.attributes = {{"request", std::string(250, 'a' + i % 26) + std::to_string(i)}};
    samples.push_back(s);
  }
  by_bytes.Add(Interval(samples));
  EXPECT_GT(by_bytes.contexts(), 0u);
  EXPECT_LT(by_bytes.contexts(), 200u);
  EXPECT_EQ(static_cast<int64_t>(by_bytes.contexts()) + by_bytes.context_folded_samples(), 200);
  // What the page carries of them stays within the bound.
  const std::string json = by_bytes.ToJson();
  const size_t contexts_at = json.find("\"contexts\":");
  ASSERT_NE(contexts_at, std::string::npos);
  EXPECT_LT(json.size() - contexts_at, 64u * 1024);
}

// Runs check_flamegraph.sh on page with the Chromium found at configure time.
ember::testing::RunResult CheckPage(const std::string& page,
                                    const std::vector<std::string>& names) {
  std::vector<std::string> argv = {"/usr/bin/env", std::string("CHROMIUM=") + EMBER_CHROMIUM_PATH,
                                   "/bin/bash", EMBER_CHECK_FLAMEGRAPH, page};
  argv.insert(argv.end(), names.begin(), names.end());
  return ember::testing::RunProgram(std::move(argv), std::chrono::seconds(120));
}

class FlameGraphPageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string chromium = EMBER_CHROMIUM_PATH;
    ASSERT_FALSE(chromium.empty() || chromium.ends_with("-NOTFOUND"))
        << "chromium was not found; run scripts/setup.sh and reconfigure";
  }
};

TEST_F(FlameGraphPageTest, ChromiumRendersFramesWithoutErrors) {
  Frame main_fn = Native("main"), serve = Native("Server::Serve(Request const&)");
  Frame parse = Native("ParseJson<std::string>"), hostile = Native("</script><b>x&y</b>");
  Frame utf8 = Native(
      "Gr\xC3\xBC\xC3\x9F"
      "e\xE2\x80\xA8::run");
  Frame unnamed = Native("libfoo.so+0x1a2b"), truncated = Native("[truncated]");
  Frame read = Kernel("ksys_read"), syscall = Kernel("do_syscall_64");
  FlameGraph graph;
  graph.Add(Interval({
      {10, "web", "web", {&parse, &serve, &main_fn}, 400},
      {10, "web", "web", {&read, &syscall, &serve, &main_fn}, 300},
      {10, "web", "web", {&hostile, &main_fn}, 150},
      {11, "batch", "batch", {&utf8, &unnamed, &truncated}, 100},
  }));
  const std::string page = ::testing::TempDir() + "/ember_flame_graph_test.html";
  ASSERT_TRUE(graph.WriteHtml(page, "Ember <test> & \"run\"").ok());

  const std::string html = ReadFile(page);
  EXPECT_THAT(html, HasSubstr("<title>Ember &lt;test&gt; &amp; &quot;run&quot;</title>"));
  EXPECT_THAT(html, Not(HasSubstr("{{"))) << "unfilled placeholder";
  EXPECT_THAT(html, Not(HasSubstr("http://")));
  EXPECT_THAT(html, Not(HasSubstr("https://")));
  EXPECT_THAT(html, Not(HasSubstr(" src=")));

  const auto [rc, out] = CheckPage(
      page, {"all", "web", "main", "Server::Serve(Request const&)", "ParseJson<std::string>",
             "ksys_read", "do_syscall_64", "</script><b>x&y</b>", "libfoo.so+0x1a2b", "batch"});
  EXPECT_EQ(rc, 0) << out;
}

// Drives the page like a user (search, hover, zoom, reset) from a script appended to it; a failed
// expectation throws, which the page's window.onerror reports and the checker turns into a failure.
TEST_F(FlameGraphPageTest, SearchTooltipAndZoomWork) {
  Frame main_fn = Native("main"), serve = Native("Server::Serve(Request const&)");
  Frame parse = Native("ParseJson"), read = Kernel("ksys_read"), idle = Native("Idle");
  FlameGraph graph;
  graph.Add(Interval({
      {10, "web", "web", {&parse, &serve, &main_fn}, 400},
      {10, "web", "web", {&read, &serve, &main_fn}, 300},
      {11, "batch", "batch", {&idle, &main_fn}, 250},
  }));
  const std::string page = ::testing::TempDir() + "/ember_flame_graph_ui.html";
  ASSERT_TRUE(graph.WriteHtml(page, "ui").ok());
  std::string html = ReadFile(page);
  const size_t body_end = html.rfind("</body>");
  ASSERT_NE(body_end, std::string::npos);
  html.insert(body_end, R"js(<script>
(function () {
  function check(ok, what) { if (!ok) throw new Error('ui check failed: ' + what); }
  function frame(name) {
    return Array.prototype.filter.call(document.querySelectorAll('#chart .f'),
                                       function (e) { return e.textContent === name; })[0];
  }
  var chart = document.getElementById('chart');
  var search = document.getElementById('search');
  search.value = 'serve';
  search.dispatchEvent(new Event('input'));
  var matched = document.getElementById('matched').textContent;
  check(matched.indexOf('73.7%') !== -1, 'matched share: ' + matched);
  check(frame('Server::Serve(Request const&)').classList.contains('hit'), 'match highlighted');
  check(!frame('main').classList.contains('hit'), 'non-match not highlighted');

  frame('ksys_read').dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: 50, clientY: 50}));
  var tip = document.getElementById('tip').textContent;
  check(tip.indexOf('ksys_read \u2014 300 samples, 31.6%') === 0, 'tooltip: ' + tip);

  frame('Server::Serve(Request const&)').click();
  check(!frame('batch'), 'zoom hides unrelated frames');
  check(parseFloat(frame('Server::Serve(Request const&)').style.width) >= chart.clientWidth - 1,
        'zoomed frame spans the chart');
  check(frame('ParseJson') && frame('web'), 'callees and ancestors stay drawn');
  document.getElementById('reset').click();
  check(frame('batch') && frame('Idle'), 'reset shows everything again');
  search.value = '';
  search.dispatchEvent(new Event('input'));
  check(document.querySelectorAll('#chart .hit').length === 0, 'clearing search clears highlights');
})();
</script>
)js");
  std::ofstream(page, std::ios::trunc) << html;
  const auto [rc, out] = CheckPage(page, {"web", "batch", "Idle", "ksys_read", "ParseJson"});
  EXPECT_EQ(rc, 0) << out;
}

// The filter narrows the graph to one trace, span or attribute value: frames no such sample
// reached disappear, shared ones shrink to the filtered samples, and clearing it restores all.
TEST_F(FlameGraphPageTest, FilterNarrowsTheGraphToOneTraceSpanOrAttribute) {
  Frame main_fn = Native("main"), serve = Native("Serve");
  Frame checkout = Native("Checkout"), search = Native("SearchIndex"), idle = Native("Idle");
  const TraceLink buy =
      ember::testing::LinkOf("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
  TraceLink buy_next = buy;
  buy_next.span_id[7] = 0x32;
  const TraceLink find =
      ember::testing::LinkOf("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
  FlameGraph graph;
  graph.Add(Interval({
      {10, "web", "a", {&checkout, &serve, &main_fn}, 300, buy, {{"http.route", "/checkout"}}},
      {10, "web", "a", {&checkout, &serve, &main_fn}, 100, buy_next, {{"http.route", "/checkout"}}},
      {10, "web", "a", {&serve, &main_fn}, 50, buy, {{"http.route", "/checkout"}}},
      {10, "web", "b", {&search, &serve, &main_fn}, 200, find, {{"http.route", "/search"}}},
      {10, "web", "c", {&idle, &main_fn}, 350},
      // Texts from the profiled process are as hostile as its frame names.
      {10, "web", "d", {&idle, &main_fn}, 1, {}, {{"note", "</script><b>x&y\u2028"}}},
  }));
  const std::string page = ::testing::TempDir() + "/ember_flame_graph_filter.html";
  ASSERT_TRUE(graph.WriteHtml(page, "filter").ok());
  std::string html = ReadFile(page);
  const size_t body_end = html.rfind("</body>");
  ASSERT_NE(body_end, std::string::npos);
  html.insert(body_end, R"js(<script>
(function () {
  function check(ok, what) { if (!ok) throw new Error('filter check failed: ' + what); }
  function frame(name) {
    return Array.prototype.filter.call(document.querySelectorAll('#chart .f'),
                                       function (e) { return e.textContent === name; })[0];
  }
  function samplesOf(name) {
    var f = frame(name);
    if (!f) return 0;
    f.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: 50, clientY: 50}));
    var tip = document.getElementById('tip').textContent;
    return parseInt(tip.slice(tip.indexOf('—') + 2).replace(/,/g, ''), 10);
  }
  var filter = document.getElementById('filter');
  var filtered = document.getElementById('filtered');
  function set(text) { filter.value = text; filter.dispatchEvent(new Event('input')); }
  check(!document.getElementById('filter-box').hidden, 'filter shown when samples have contexts');
  var offered = Array.prototype.map.call(document.querySelectorAll('#filter-values option'),
                                         function (o) { return o.value; });
  check(offered[0] === 'http.route=/checkout', 'commonest value offered first: ' + offered[0]);
  check(offered.indexOf('trace_id=4bf92f3577b34da6a3ce929d0e0e4736') !== -1, 'trace offered');
  check(offered.indexOf('span_id=b7ad6b7169203332') !== -1, 'span offered');
  check(samplesOf('all') === 1001 && samplesOf('Serve') === 650, 'unfiltered counts');
  check(offered.indexOf('note=<\/script><b>x&y\u2028') !== -1, 'hostile text offered as it is');

  set('http.route=/checkout');
  check(!frame('SearchIndex') && !frame('Idle'), 'other requests and idle work hidden');
  check(samplesOf('all') === 450, 'root counts the route: ' + samplesOf('all'));
  check(samplesOf('Serve') === 450 && samplesOf('Checkout') === 400, 'shared frames shrink');
  check(parseFloat(frame('Serve').style.width) >= document.getElementById('chart').clientWidth - 1,
        'the filtered samples fill the width');
  check(filtered.textContent.indexOf('45.0%') !== -1, 'share shown: ' + filtered.textContent);

  set('trace_id=4BF92F3577B34DA6A3CE929D0E0E4736');
  check(frame('SearchIndex') && !frame('Checkout'), 'one trace');
  check(samplesOf('SearchIndex') === 200, 'trace count');

  set('span_id=b7ad6b7169203331');
  check(samplesOf('Checkout') === 300 && samplesOf('Serve') === 350, 'one span');

  set('http.route=/nowhere');
  check(document.getElementById('chart').textContent === 'No samples match the filter.',
        'nothing matches: ' + document.getElementById('chart').textContent);

  set('checkout');
  check(filter.classList.contains('bad'), 'a filter without = is refused');
  check(samplesOf('Idle') === 351, 'a refused filter shows everything');

  set('http.route=/search');
  document.getElementById('search').value = 'Index';
  document.getElementById('search').dispatchEvent(new Event('input'));
  check(document.getElementById('matched').textContent.indexOf('100.0%') !== -1,
        'search shares are of the filtered samples');
  set('');
  check(frame('Idle') && frame('Checkout') && samplesOf('all') === 1001, 'clearing restores all');
  check(filtered.textContent === '', 'no filter, no share');
})();
</script>
)js");
  std::ofstream(page, std::ios::trunc) << html;
  const auto [rc, out] = CheckPage(page, {"web", "Idle", "Checkout", "SearchIndex"});
  EXPECT_EQ(rc, 0) << out;
}

// A page of samples without contexts offers no filter.
TEST_F(FlameGraphPageTest, NoFilterWithoutContexts) {
  Frame main_fn = Native("main");
  FlameGraph graph;
  graph.Add(Interval({{1, "app", "app", {&main_fn}, 1}}));
  const std::string page = ::testing::TempDir() + "/ember_flame_graph_no_filter.html";
  ASSERT_TRUE(graph.WriteHtml(page, "t").ok());
  std::string html = ReadFile(page);
  html.insert(html.rfind("</body>"), R"js(<script>
if (!document.getElementById('filter-box').hidden) throw new Error('filter shown without contexts');
</script>
)js");
  std::ofstream(page, std::ios::trunc) << html;
  const auto [rc, out] = CheckPage(page, {"main"});
  EXPECT_EQ(rc, 0) << out;
}

TEST_F(FlameGraphPageTest, InlinedFramesAreDrawnInItalicsAndSaySo) {
  Frame main_fn = Native("main");
  Frame serve = Native("Server::Serve(Request const&)");
  serve.inlined = {{"ParseHeader(char const*)", "http.h", 40}};
  FlameGraph graph;
  graph.Add(Interval({{10, "web", "web", {&serve, &main_fn}, 400}}));
  const std::string page = ::testing::TempDir() + "/ember_flame_graph_inlined.html";
  ASSERT_TRUE(graph.WriteHtml(page, "inlined").ok());
  std::string html = ReadFile(page);
  const size_t body_end = html.rfind("</body>");
  ASSERT_NE(body_end, std::string::npos);
  html.insert(body_end, R"js(<script>
(function () {
  function check(ok, what) { if (!ok) throw new Error('inline check failed: ' + what); }
  function frame(name) {
    return Array.prototype.filter.call(document.querySelectorAll('#chart .f'),
                                       function (e) { return e.textContent === name; })[0];
  }
  var inlined = frame('ParseHeader(char const*)');
  check(inlined && inlined.classList.contains('inlined'), 'inlined frame has the inlined class');
  check(getComputedStyle(inlined).fontStyle === 'italic', 'inlined frame is italic');
  check(!frame('Server::Serve(Request const&)').classList.contains('inlined'), 'real frame is not');
  inlined.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: 50, clientY: 50}));
  var tip = document.getElementById('tip').textContent;
  check(tip.indexOf('inlined into its caller') !== -1, 'tooltip: ' + tip);
})();
</script>
)js");
  std::ofstream(page, std::ios::trunc) << html;
  const auto [rc, out] =
      CheckPage(page, {"main", "Server::Serve(Request const&)", "ParseHeader(char const*)"});
  EXPECT_EQ(rc, 0) << out;
}

TEST_F(FlameGraphPageTest, CheckerRejectsMissingFramesAndScriptErrors) {
  Frame main_fn = Native("main");
  FlameGraph graph;
  graph.Add(Interval({{1, "app", "app", {&main_fn}, 1}}));
  const std::string page = ::testing::TempDir() + "/ember_flame_graph_missing.html";
  ASSERT_TRUE(graph.WriteHtml(page, "t").ok());
  auto [rc, out] = CheckPage(page, {"main", "NotAFrame"});
  EXPECT_NE(rc, 0);
  EXPECT_THAT(out, HasSubstr("NotAFrame"));

  const std::string broken = ::testing::TempDir() + "/ember_flame_graph_broken.html";
  std::ofstream(broken) << "<html><body><div id=\"errors\"></div>"
                           "<div class=\"f\">main</div><script>undefinedFunction();</script>"
                           "</body></html>";
  auto [broken_rc, broken_out] = CheckPage(broken, {"main"});
  EXPECT_NE(broken_rc, 0);
  EXPECT_THAT(broken_out, HasSubstr("undefinedFunction"));
}

TEST(FlameGraphFileTest, UnwritableDirectoryIsAnError) {
  FlameGraph graph;
  EXPECT_FALSE(graph.WriteHtml("/nonexistent-dir/flame.html", "t").ok());
}

}  // namespace
}  // namespace ember
