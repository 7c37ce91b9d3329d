// Building a file's BPF unwind table (BuildUnwindTable: every .eh_frame row, read through libdw)
// for big system files. The agent builds one per file once processes that map it have been
// sampled a few times (BpfUnwindTables), so this is the CPU a newly busy binary costs (issue 7).
// Reports the time per row.
//
//   build/unwind_table_benchmark [Google Benchmark flags]
#include <memory>
#include <string>

#include "benchmark/benchmark.h"
#include "unwind/elf_image.h"
#include "unwind/unwind_table.h"

namespace ember {
namespace {

constexpr const char* kFiles[] = {
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
    "/usr/bin/bash",
};

void BM_BuildUnwindTable(benchmark::State& state) {
  const char* path = kFiles[state.range(0)];
  absl::StatusOr<std::shared_ptr<ElfImage>> image = ElfImage::Open(path);
  if (!image.ok()) {
    state.SkipWithError(std::string(image.status().message()).c_str());
    return;
  }
  state.SetLabel(path);
  size_t rows = 0;
  for (auto _ : state) {
    absl::StatusOr<std::vector<ember_unwind_row>> table = BuildUnwindTable(**image);
    if (!table.ok()) {
      state.SkipWithError(std::string(table.status().message()).c_str());
      return;
    }
    rows = table->size();
    benchmark::DoNotOptimize(table->data());
  }
  state.counters["rows"] = static_cast<double>(rows);
  // CPU seconds per row ("259n" is 259 ns).
  state.counters["per_row"] =
      benchmark::Counter(static_cast<double>(rows) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_BuildUnwindTable)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ember

BENCHMARK_MAIN();
