// The aggregator's cost per sample (issue 7): counting an interval's samples by (process, thread,
// stack) and handing the interval over, on stacks shaped like bench/overhead_work's (24 to 39
// frames), all distinct (a new key per sample, the workload's case) or drawn from 512 paths (the
// counts of known keys).
#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "stacks/aggregator.h"

namespace ember {
namespace {

constexpr int kSamplesPerInterval = 10000;

std::vector<std::vector<const Frame*>> Stacks(const std::vector<Frame>& frames, size_t count) {
  std::mt19937 random(5);
  std::vector<std::vector<const Frame*>> stacks(count);
  for (auto& stack : stacks) {
    stack.resize(24 + random() % 16);
    for (const Frame*& f : stack) f = &frames[random() % frames.size()];
  }
  return stacks;
}

// One interval: kSamplesPerInterval samples over `paths` distinct stacks, then TakeInterval.
void BM_AggregatorInterval(benchmark::State& state) {
  const std::vector<Frame> frames(2000);
  const auto stacks = Stacks(frames, static_cast<size_t>(state.range(0)));
  Aggregator aggregator;
  size_t taken = 0;
  for (auto _ : state) {
    for (int i = 0; i < kSamplesPerInterval; ++i) {
      aggregator.Add(100 + i % 2, "overhead_work", "overhead_work", stacks[i % stacks.size()]);
    }
    IntervalProfile profile = aggregator.TakeInterval(0, 1, 1);
    taken += profile.samples.size();
    benchmark::DoNotOptimize(profile.samples.data());
  }
  state.SetItemsProcessed(state.iterations() * kSamplesPerInterval);
  state.counters["stacks"] = static_cast<double>(taken) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_AggregatorInterval)->Arg(512)->Arg(kSamplesPerInterval)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ember

BENCHMARK_MAIN();
