// The run-long flame graph's two costs (issue 7): merging an interval's stacks (FlameGraph::Add,
// per interval) and writing the whole page (WriteHtml, at most once a minute), on synthetic
// intervals shaped like bench/overhead_work's: 4096 call paths of 24 to 39 frames under one
// process, so the tree grows to the node bound as a long run's does.
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "output/flame_graph.h"

namespace ember {
namespace {

// Frames named like a workload's functions, and the interval's samples drawn from 4096 paths.
struct Workload {
  std::vector<Frame> frames;
  std::vector<std::vector<const Frame*>> paths;  // leaf first, as the aggregator hands them over
  explicit Workload(unsigned seed) {
    frames.resize(2000);
    for (size_t i = 0; i < frames.size(); ++i) {
      frames[i].function = absl::StrCat("ow_function_", i, "(unsigned long, work_state*)");
      frames[i].module = "/usr/bin/overhead_work";
    }
    std::mt19937 random(seed);
    for (int p = 0; p < 4096; ++p) {
      std::vector<const Frame*> path(24 + random() % 16);
      for (const Frame*& f : path) f = &frames[random() % frames.size()];
      path.back() = &frames[0];  // main
      paths.push_back(std::move(path));
    }
  }
  IntervalProfile Interval(size_t stacks, std::mt19937& random) const {
    IntervalProfile p;
    p.period_ns = 10'101'010;
    p.duration_ns = 10'000'000'000;
    for (size_t i = 0; i < stacks; ++i) {
      p.samples.push_back({.pid = 100 + static_cast<uint32_t>(i % 2),
                           .process = "overhead_work",
                           .thread = "overhead_work",
                           .frames = paths[random() % paths.size()],
                           .count = 1});
    }
    return p;
  }
};

// Grows `graph` to `nodes` with intervals of other workloads' paths (new processes' stacks).
void Grow(FlameGraph& graph, size_t nodes) {
  std::mt19937 random(3);
  for (unsigned seed = 100; graph.nodes() < nodes; ++seed) {
    graph.Add(Workload(seed).Interval(2000, random));
  }
}

// One 10 s interval at 99 Hz on 2 CPUs (about 2000 stacks) into a graph already holding `nodes`.
void BM_FlameGraphAddInterval(benchmark::State& state) {
  Workload workload(1);
  std::mt19937 random(2);
  FlameGraph graph;
  Grow(graph, static_cast<size_t>(state.range(0)));
  std::vector<IntervalProfile> intervals;
  for (int i = 0; i < 16; ++i) intervals.push_back(workload.Interval(2000, random));
  size_t next = 0;
  for (auto _ : state) graph.Add(intervals[next++ % intervals.size()]);
  state.counters["nodes"] = static_cast<double>(graph.nodes());
  state.counters["stacks_per_s"] = benchmark::Counter(
      2000.0 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FlameGraphAddInterval)->Arg(20000)->Arg(100000)->Unit(benchmark::kMillisecond);

// The page written with `nodes` nodes.
void BM_FlameGraphWriteHtml(benchmark::State& state) {
  Workload workload(1);
  std::mt19937 random(2);
  FlameGraph graph;
  Grow(graph, static_cast<size_t>(state.range(0)));
  const std::string path = absl::StrCat("/tmp/ember-flame-graph-benchmark-", getpid(), ".html");
  for (auto _ : state) {
    if (!graph.WriteHtml(path, "benchmark").ok()) state.SkipWithError("write failed");
  }
  unlink(path.c_str());
  state.counters["nodes"] = static_cast<double>(graph.nodes());
}
BENCHMARK(BM_FlameGraphWriteHtml)
    ->Arg(20000)
    ->Arg(100000)
    ->Arg(200000)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ember

BENCHMARK_MAIN();
