// Profiles the Go CPU-accounting fixture (tests/fixtures/go/phases) as built by Debian's Go 1.19
// and by the newer Go, plain and stripped (-s -w): every way, its functions are named from Go's
// own symbol table with their files and lines, typed go, its inlined function shows, its stacks
// end at runtime.goexit, and the leaf shares match the program's own accounting.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "profiled_run.h"
#include "support/pprof_reader.h"

namespace ember::testing {
namespace {

constexpr int kGoFrameType = 12;  // FlameGraph::NodeType::kGo
const std::vector<std::string> kSpins = {"main.spinA", "main.spinB", "main.spinC"};
// Where every phase runs: the goroutine of main.
const std::vector<std::string> kCallers = {"main.runPhase", "main.runPhases", "main.main",
                                           "runtime.main", "runtime.goexit"};

size_t LeafIndex(const NamedSample& s) {
  for (size_t i = 0; i < s.functions.size(); ++i) {
    if (!IsKernelModule(s.modules[i])) return i;
  }
  return s.functions.size();
}

std::string LeafOf(const NamedSample& s) {
  size_t leaf = LeafIndex(s);
  return leaf < s.functions.size() ? s.functions[leaf] : "";
}

// The lines of tests/fixtures/go/phases/main.go from "func <name>(" to the closing "}".
std::pair<uint32_t, uint32_t> SourceSpan(const std::string& function) {
  std::ifstream in(EMBER_GO_PHASES_SOURCE);
  const std::string head = "func " + function.substr(function.find('.') + 1) + "(";
  uint32_t number = 0, begin = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (begin == 0 && absl::StartsWith(line, head)) begin = number;
    if (begin != 0 && line == "}") return {begin, number};
  }
  ADD_FAILURE() << "no " << head << " in " << EMBER_GO_PHASES_SOURCE;
  return {0, 0};
}

// (function, file, line) of every line of every location of the process's samples, with counts.
struct SourceLine {
  std::string function, file;
  int64_t line;
  auto operator<=>(const SourceLine&) const = default;
};
std::map<SourceLine, int64_t> LinesOf(const std::string& dir, int64_t pid) {
  std::map<SourceLine, int64_t> lines;
  for (const std::string& path : PprofFilesIn(dir)) {
    absl::StatusOr<perftools::profiles::Profile> profile = ReadPprofFile(path);
    if (!profile.ok()) continue;
    std::map<uint64_t, const perftools::profiles::Location*> locations;
    std::map<uint64_t, const perftools::profiles::Function*> functions;
    for (const auto& l : profile->location()) locations[l.id()] = &l;
    for (const auto& f : profile->function()) functions[f.id()] = &f;
    for (const auto& sample : profile->sample()) {
      bool ours = false;
      for (const auto& label : sample.label()) {
        ours |= profile->string_table(label.key()) == "pid" && label.num() == pid;
      }
      if (!ours) continue;
      for (uint64_t id : sample.location_id()) {
        for (const auto& line : locations[id]->line()) {
          const perftools::profiles::Function* f = functions[line.function_id()];
          lines[{profile->string_table(f->name()), profile->string_table(f->filename()),
                 line.line()}] += sample.value(0);
        }
      }
    }
  }
  return lines;
}

struct GoBuild {
  const char* name;
  const char* path;
};

void PrintTo(const GoBuild& build, std::ostream* out) { *out << build.name; }

class GoProfileTest : public ::testing::TestWithParam<GoBuild> {
 protected:
  struct Run {
    ProfiledRun run;
    std::vector<NamedSample> samples;
    std::map<SourceLine, int64_t> lines;
    std::map<std::string, std::set<int>> types;
  };
  static const Run& RunOf(const GoBuild& build) {
    static std::map<std::string, Run>* runs = new std::map<std::string, Run>();
    auto it = runs->find(build.name);
    if (it == runs->end()) {
      Run r;
      r.run = ProfileFixture({build.path, "8"}, 199);
      r.samples = SamplesOf(r.run.output_dir, r.run.pid);
      r.lines = LinesOf(r.run.output_dir, r.run.pid);
      r.types = FlameGraphTypes(r.run.output_dir + "/flamegraph.html");
      std::filesystem::remove_all(r.run.output_dir);
      it = runs->emplace(build.name, std::move(r)).first;
    }
    return it->second;
  }
  void SetUp() override {
    run_ = &RunOf(GetParam());
    total_ = 0;
    for (const NamedSample& s : run_->samples) {
      ASSERT_EQ(s.functions.size(), s.modules.size());
      total_ += s.count;
    }
    ASSERT_GT(total_, 0) << run_->run.agent_log;
  }

  const Run* run_ = nullptr;
  int64_t total_ = 0;
};

TEST_P(GoProfileTest, EverySampleIsThere) { ExpectSamplesComplete(run_->run, total_); }

TEST_P(GoProfileTest, LeafSharesMatchTheProgramsOwnAccounting) {
  std::map<std::string, double> measured_ns = MeasuredCpuNs(run_->run.fixture_output);
  ASSERT_EQ(measured_ns.size(), 3u) << run_->run.fixture_output;
  double measured_total = 0;
  for (const auto& [name, ns] : measured_ns) measured_total += ns;
  std::map<std::string, int64_t> leaf_counts;
  for (const NamedSample& s : run_->samples) leaf_counts[LeafOf(s)] += s.count;
  int64_t in_measured = 0;
  for (const auto& [leaf, ns] : measured_ns) in_measured += leaf_counts[leaf];
  ASSERT_GT(in_measured, 0) << CommonStacks(
      run_->samples, [](const NamedSample&) { return true; }, 5);
  for (const auto& [leaf, ns] : measured_ns) {
    const double measured_share = ns / measured_total;
    const double profiled_share = Share(leaf_counts[leaf], in_measured);
    std::printf("%s: profile %.1f%% (%lld of %lld samples), program's own measure %.1f%%\n",
                leaf.c_str(), 100 * profiled_share, static_cast<long long>(leaf_counts[leaf]),
                static_cast<long long>(in_measured), 100 * measured_share);
    EXPECT_NEAR(profiled_share, measured_share, 0.03) << leaf;
  }
}

// A goroutine's stack is whole from the leaf to runtime.goexit, stripped or not.
TEST_P(GoProfileTest, PhasesUnwindToGoexit) {
  int64_t with_leaf = 0, whole = 0;
  for (const NamedSample& s : run_->samples) {
    const size_t i = LeafIndex(s);
    if (i == s.functions.size() ||
        std::find(kSpins.begin(), kSpins.end(), s.functions[i]) == kSpins.end()) {
      continue;
    }
    with_leaf += s.count;
    if (s.functions.size() == i + 1 + kCallers.size() &&
        std::equal(kCallers.begin(), kCallers.end(), s.functions.begin() + i + 1)) {
      whole += s.count;
    }
  }
  std::printf("phase stacks whole to runtime.goexit: %lld of %lld\n", static_cast<long long>(whole),
              static_cast<long long>(with_leaf));
  ASSERT_GT(with_leaf, 0);
  EXPECT_GE(Share(whole, with_leaf), 0.98) << CommonStacks(
      run_->samples, [](const NamedSample& s) { return absl::StartsWith(LeafOf(s), "main.spin"); },
      5);
}

// Every stack of the program ends where a goroutine or thread starts, not at "[truncated]".
TEST_P(GoProfileTest, StacksEndAtThreadStarts) {
  int64_t ended = 0;
  for (const NamedSample& s : run_->samples) {
    const std::string& last = s.functions.empty() ? "" : s.functions.back();
    if (last == "runtime.goexit" || last == "runtime.mstart" || last == "runtime.rt0_go") {
      ended += s.count;
    }
  }
  std::printf("stacks ending at a thread start: %lld of %lld\n", static_cast<long long>(ended),
              static_cast<long long>(total_));
  EXPECT_GE(Share(ended, total_), 0.97) << CommonStacks(
      run_->samples,
      [](const NamedSample& s) {
        return s.functions.empty() || s.functions.back() != "runtime.goexit";
      },
      5);
}

// Lines of the program's functions lie in those functions, in its source file; main.mixB shows
// inlined into main.spinB.
TEST_P(GoProfileTest, FunctionsHaveTheirFilesAndLines) {
  int64_t in_main = 0, mix_b = 0, spin_b = 0;
  for (const auto& [line, count] : run_->lines) {
    if (!absl::StartsWith(line.function, "main.")) continue;
    in_main += count;
    EXPECT_TRUE(absl::EndsWith(line.file, "/tests/fixtures/go/phases/main.go")) << line.file;
    const auto [begin, end] = SourceSpan(line.function);
    EXPECT_GE(line.line, begin) << line.function;
    EXPECT_LE(line.line, end) << line.function;
    if (line.function == "main.mixB") mix_b += count;
    if (line.function == "main.spinB") spin_b += count;
  }
  EXPECT_GT(in_main, 0);
  std::printf("main.mixB inlined in %lld of %lld main.spinB lines\n", static_cast<long long>(mix_b),
              static_cast<long long>(spin_b));
  EXPECT_GE(Share(mix_b, spin_b), 0.5);
  // As real frames (not inlined), mixB never shows: it has no frame of its own.
  for (const NamedSample& s : run_->samples) {
    EXPECT_EQ(std::find(s.functions.begin(), s.functions.end(), "main.mixB"), s.functions.end());
  }
}

TEST_P(GoProfileTest, GoFramesAreTypedGo) {
  int checked = 0;
  for (const auto& [name, types] : run_->types) {
    if (!absl::StartsWith(name, "main.") && !absl::StartsWith(name, "runtime.")) continue;
    ++checked;
    // An inlined function is a node of its own type below its frame's.
    std::set<int> allowed = {kGoFrameType, 6};
    for (int type : types) EXPECT_TRUE(allowed.count(type)) << name << " typed " << type;
  }
  EXPECT_GE(checked, 6);
  ASSERT_TRUE(run_->types.count("main.spinA"));
  EXPECT_EQ(run_->types.at("main.spinA"), std::set<int>{kGoFrameType});
}

const GoBuild kBuilds[] = {{"Go119", EMBER_GO_FIXTURES "/phases_go119"},
                           {"Go119Stripped", EMBER_GO_FIXTURES "/phases_go119_stripped"},
                           {"GoNew", EMBER_GO_FIXTURES "/phases_gonew"},
                           {"GoNewStripped", EMBER_GO_FIXTURES "/phases_gonew_stripped"}};

// The program's own functions, as real frames, of one run.
std::set<std::string> MainFunctions(const std::vector<NamedSample>& samples) {
  std::set<std::string> names;
  for (const NamedSample& s : samples) {
    for (const std::string& f : s.functions) {
      if (absl::StartsWith(f, "main.")) names.insert(f);
    }
  }
  return names;
}

TEST_P(GoProfileTest, SameFunctionsEveryWay) {
  const std::set<std::string> expected = {"main.spinA",    "main.spinB",     "main.spinC",
                                          "main.runPhase", "main.runPhases", "main.main"};
  std::set<std::string> names = MainFunctions(run_->samples);
  // threadCPUNs, and what time.Now costs, may or may not be sampled; the rest always is.
  names.erase("main.threadCPUNs");
  EXPECT_EQ(names, expected);
}

INSTANTIATE_TEST_SUITE_P(Builds, GoProfileTest, ::testing::ValuesIn(kBuilds),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ember::testing
