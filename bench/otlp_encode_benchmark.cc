// What one export interval costs to encode as OTLP Profiles, and how many bytes it puts on the
// wire per sample after the shared dictionary and gzip (issue 4). The interval is synthetic but
// shaped like a busy node: hundreds of processes sharing libraries, thousands of distinct stacks
// made of frames from a common pool, long C++ names, kernel frames under some stacks.
//
//   build/otlp_encode_benchmark [--benchmark_filter=...]
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "common/gzip.h"
#include "common/profile.h"
#include "otlp/profiles_builder.h"
#include "output/pprof_writer.h"

namespace ember {
namespace {

struct Interval {
  std::vector<std::unique_ptr<Frame>> frames;  // owns what profile.samples point at
  IntervalProfile profile;
  int64_t samples = 0;
};

// `processes` processes, `stacks` distinct stacks in all, of 8 to 40 frames drawn from a pool of
// `pool` frames spread over 60 libraries; counts as at 19 Hz over 10 s on a 64-CPU node.
Interval MakeInterval(int processes, int stacks, int pool) {
  Interval interval;
  std::mt19937_64 random(42);
  for (int i = 0; i < pool; ++i) {
    auto frame = std::make_unique<Frame>();
    bool kernel = i % 10 == 0;
    frame->kind = kernel ? FrameKind::kKernel : FrameKind::kNative;
    int library = i % 60;
    frame->module = kernel ? "[kernel.kallsyms]"
                           : absl::StrCat("/usr/lib/x86_64-linux-gnu/lib", library, ".so.1");
    frame->function = kernel ? absl::StrCat("kernel_function_", i)
                             : absl::StrCat("company::service::Handler<std::string>::Process", i,
                                            "(std::vector<int> const&)");
    frame->source_file = kernel ? "" : absl::StrCat("/src/service/handler_", i % 400, ".cc");
    frame->line = static_cast<uint32_t>(random() % 2000);
    frame->address = 0x1000 + random() % 0x1000000;
    frame->build_id = kernel ? "" : absl::StrCat("5f0c1e2d3a4b5c6d7e8f", library);
    interval.frames.push_back(std::move(frame));
  }
  interval.profile.start_unix_ns = 1'700'000'000'000'000'000;
  interval.profile.duration_ns = 10'000'000'000;
  interval.profile.period_ns = 1'000'000'000 / 19;
  for (int s = 0; s < stacks; ++s) {
    const uint32_t pid = 1000 + static_cast<uint32_t>(s % processes);
    const std::string process = absl::StrCat("service-", s % processes);
    const std::string thread = absl::StrCat("worker-", s % 16);
    std::vector<const Frame*> frames(8 + random() % 33);
    for (const Frame*& frame : frames) {
      frame = interval.frames[random() % interval.frames.size()].get();
    }
    const int64_t count = 1 + static_cast<int64_t>(random() % 4);
    interval.samples += count;
    interval.profile.AddSample(pid, process, thread, frames, count);
    if (!interval.profile.process_metadata.contains(pid)) {
      interval.profile.AttachProcessMetadata(
          pid, {.executable_name = absl::StrCat("service-", pid),
                .executable_path = absl::StrCat("/usr/bin/service-", pid)});
    }
  }
  return interval;
}

ResourceContext Context() {
  ResourceContext context;
  context.host_name = "node-1";
  context.scope_version = "bench";
  return context;
}

void BM_BuildAndSerialize(benchmark::State& state) {
  Interval interval =
      MakeInterval(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                   static_cast<int>(state.range(2)));
  ResourceContext context = Context();
  std::string bytes;
  std::string gzipped;
  for (auto _ : state) {
    auto request = BuildExportRequest(interval.profile, context);
    bytes = request.SerializeAsString();
    benchmark::DoNotOptimize(bytes.data());
  }
  if (!GzipCompress(bytes, &gzipped).ok()) state.SkipWithError("gzip failed");
  state.SetItemsProcessed(state.iterations() * interval.samples);
  state.counters["samples"] = static_cast<double>(interval.samples);
  state.counters["bytes/sample"] = static_cast<double>(bytes.size()) / interval.samples;
  state.counters["gzip_bytes/sample"] = static_cast<double>(gzipped.size()) / interval.samples;
}
// processes, distinct stacks, frame pool
BENCHMARK(BM_BuildAndSerialize)
    ->Args({300, 3000, 20000})
    ->Args({300, 12000, 50000})
    ->Args({50, 1000, 5000})
    ->Unit(benchmark::kMillisecond);

void BM_Gzip(benchmark::State& state) {
  Interval interval = MakeInterval(300, 3000, 20000);
  std::string bytes = BuildExportRequest(interval.profile, Context()).SerializeAsString();
  std::string gzipped;
  for (auto _ : state) {
    if (!GzipCompress(bytes, &gzipped).ok()) state.SkipWithError("gzip failed");
    benchmark::DoNotOptimize(gzipped.data());
  }
  state.SetItemsProcessed(state.iterations() * interval.samples);
}
BENCHMARK(BM_Gzip)->Unit(benchmark::kMillisecond);

// The local output's pprof file of one interval: its three steps (the message, its bytes, gzip),
// then all three as the agent does them (EncodePprofFile, whose message is on an arena).
void BM_Pprof(benchmark::State& state) {
  Interval interval =
      MakeInterval(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                   static_cast<int>(state.range(2)));
  const int step = static_cast<int>(state.range(3));
  const perftools::profiles::Profile built = BuildPprof(interval.profile);
  const std::string bytes = built.SerializeAsString();
  std::string out;
  for (auto _ : state) {
    if (step == 0) {
      benchmark::DoNotOptimize(BuildPprof(interval.profile).sample_size());
    } else if (step == 1) {
      out = built.SerializeAsString();
    } else if (step == 2) {
      if (!GzipCompress(bytes, &out).ok()) state.SkipWithError("gzip failed");
    } else {
      absl::StatusOr<std::string> file = EncodePprofFile(interval.profile);
      if (!file.ok()) state.SkipWithError("encoding failed");
      out = *std::move(file);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() *
                          static_cast<int64_t>(interval.profile.samples.size()));
  state.counters["bytes/stack"] =
      static_cast<double>(bytes.size()) / static_cast<double>(interval.profile.samples.size());
}
// processes, distinct stacks, frame pool, step (0 build, 1 serialize, 2 gzip, 3 the whole file
// as the agent encodes it)
BENCHMARK(BM_Pprof)
    ->ArgsProduct({{2}, {2000}, {20}, {0, 1, 2, 3}})
    ->ArgsProduct({{300}, {3000}, {20000}, {0, 1, 2, 3}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ember

BENCHMARK_MAIN();
