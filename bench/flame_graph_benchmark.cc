// The run-long flame graph's two costs (issue 7): merging an interval's stacks (FlameGraph::Add,
// per interval) and writing the whole page (WriteHtml, at most once a minute), on synthetic
// intervals shaped like bench/overhead_work's: 4096 call paths of 24 to 39 frames under one
// process, so the tree grows to the node bound as a long run's does.
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <string_view>
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
  // With `spans`, each sample served a span of its own (the worst case: no two stacks share a
  // context), of one of 8 traces, with one of 3 routes as its thread context's attribute.
  IntervalProfile Interval(size_t stacks, std::mt19937& random, bool spans = false) const {
    static constexpr std::string_view kRoutes[] = {"/checkout", "/search", "/cart"};
    IntervalProfile p;
    p.period_ns = 10'101'010;
    p.duration_ns = 10'000'000'000;
    for (size_t i = 0; i < stacks; ++i) {
      SampleContext context;
      SampleAttribute route;
      if (spans) {
        const uint32_t span = static_cast<uint32_t>(random() >> 4);
        context.link.trace_id[0] = static_cast<uint8_t>(1 + span % 8);
        std::memcpy(context.link.span_id.data(), &span, sizeof(span));
        route = {"http.route", kRoutes[span % 3]};
        context.attributes = {&route, 1};
      }
      p.AddSample(100 + static_cast<uint32_t>(i % 2), "overhead_work", "overhead_work",
                  paths[random() % paths.size()], 1, context);
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

// The same, every sample with a trace context (docs/trace-context.md): what the page's filter
// costs the merge. Spans are random here, so after a few intervals the contexts reach their bound
// and the cost is that of looking them up.
void BM_FlameGraphAddIntervalWithSpans(benchmark::State& state) {
  Workload workload(1);
  std::mt19937 random(2);
  FlameGraph graph;
  Grow(graph, 100000);
  std::vector<IntervalProfile> intervals;
  for (int i = 0; i < 16; ++i) intervals.push_back(workload.Interval(2000, random, true));
  size_t next = 0;
  for (auto _ : state) graph.Add(intervals[next++ % intervals.size()]);
  state.counters["contexts"] = static_cast<double>(graph.contexts());
  state.counters["stacks_per_s"] = benchmark::Counter(
      2000.0 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FlameGraphAddIntervalWithSpans)->Unit(benchmark::kMillisecond);

// Stacks as the agent sees bench/overhead_work's once samples stop anywhere in a descent: every
// sample a call path of its own, 24 to 39 frames of eight step functions below main and ow_unit,
// so that nearly every stack reaches new nodes a few levels down.
struct DistinctStacks {
  std::vector<Frame> frames;  // main, ow_unit, then the eight steps
  DistinctStacks() {
    frames.resize(10);
    frames[0].function = "main";
    frames[1].function = "ow_unit(unsigned long)";
    for (size_t i = 2; i < frames.size(); ++i) {
      frames[i].function = absl::StrCat("ow_step_", i - 2, "(unsigned long, int)");
    }
    for (Frame& f : frames) f.module = "/usr/bin/overhead_work";
  }
  IntervalProfile Interval(std::mt19937& random) const {
    IntervalProfile p;
    p.period_ns = 10'101'010;
    p.duration_ns = 10'000'000'000;
    for (size_t i = 0; i < kStacksPerInterval; ++i) {
      std::vector<const Frame*> path(24 + random() % 16);  // leaf first
      for (const Frame*& f : path) f = &frames[2 + random() % 8];
      path.end()[-1] = &frames[0];
      path.end()[-2] = &frames[1];
      p.AddSample(100 + static_cast<uint32_t>(i % 2), "overhead_work", "overhead_work", path, 1);
    }
    return p;
  }
  static constexpr size_t kStacksPerInterval = 2000;
};

// Bytes of heap allocated, mmapped chunks (large arrays) included, and bytes resident: reserved
// but untouched room counts in the first only. Freed heap memory goes back to the system first.
double HeapBytes() {
  malloc_trim(0);
  const struct mallinfo2 info = mallinfo2();
  return static_cast<double>(info.uordblks + info.hblkhd);
}
double ResidentBytes() {
  malloc_trim(0);
  long pages = 0, resident = 0;
  if (FILE* statm = fopen("/proc/self/statm", "r")) {
    if (fscanf(statm, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(statm);
  }
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

void SetTimePerStack(benchmark::State& state, double stacks) {
  // Seconds per stack: "3.4u" is 3.4 us.
  state.counters["time_per_stack"] =
      benchmark::Counter(stacks, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// Distinct stacks into an empty graph until it reaches the default node bound: the first minute
// or so of a run, where most of every stack becomes new nodes. Every graph starts on memory the
// process has not touched yet, as a run's does: page faults are part of growing.
void BM_FlameGraphAddDistinctGrowing(benchmark::State& state) {
  DistinctStacks stacks;
  std::mt19937 random(4);
  std::vector<IntervalProfile> intervals;
  for (int i = 0; i < 8; ++i) intervals.push_back(stacks.Interval(random));
  double added = 0;
  size_t nodes = 0;
  for (auto _ : state) {
    auto graph = std::make_unique<FlameGraph>();
    size_t next = 0;
    while (graph->nodes() < 200000 && next < intervals.size()) graph->Add(intervals[next++]);
    state.PauseTiming();
    added += static_cast<double>(next * DistinctStacks::kStacksPerInterval);
    nodes = graph->nodes();
    graph.reset();
    malloc_trim(0);
    state.ResumeTiming();
  }
  if (nodes < 200000) state.SkipWithError("too few intervals to reach the bound");
  state.counters["nodes"] = static_cast<double>(nodes);
  SetTimePerStack(state, added);
}
BENCHMARK(BM_FlameGraphAddDistinctGrowing)->Unit(benchmark::kMillisecond);

// Distinct stacks into a graph at the node bound: the rest of the run, where each stack is looked
// up down to its first unknown node and folded into "[other]" there.
void BM_FlameGraphAddDistinctAtBound(benchmark::State& state) {
  DistinctStacks stacks;
  std::mt19937 random(5);
  std::vector<IntervalProfile> growing, intervals;
  for (int i = 0; i < 8; ++i) growing.push_back(stacks.Interval(random));
  for (int i = 0; i < 32; ++i) intervals.push_back(stacks.Interval(random));
  const double heap_before = HeapBytes(), resident_before = ResidentBytes();
  FlameGraph graph;
  for (const IntervalProfile& interval : growing) {
    if (graph.nodes() < 200000) graph.Add(interval);
  }
  if (graph.nodes() < 200000) state.SkipWithError("too few intervals to reach the bound");
  // The graph's own memory at the bound, and after the timed intervals' "[other]" nodes.
  state.counters["heap_at_bound"] = HeapBytes() - heap_before;
  state.counters["rss_at_bound"] = ResidentBytes() - resident_before;
  size_t next = 0;
  for (auto _ : state) graph.Add(intervals[next++ % intervals.size()]);
  state.counters["heap_after"] = HeapBytes() - heap_before;
  state.counters["rss_after"] = ResidentBytes() - resident_before;
  state.counters["nodes"] = static_cast<double>(graph.nodes());
  SetTimePerStack(state,
                  static_cast<double>(state.iterations() * DistinctStacks::kStacksPerInterval));
}
BENCHMARK(BM_FlameGraphAddDistinctAtBound)->Unit(benchmark::kMillisecond);

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
