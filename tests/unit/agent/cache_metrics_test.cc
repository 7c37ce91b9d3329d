// The cache metrics as /metrics renders them: names, labels, and values that follow the caches.
#include "agent/cache_metrics.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "runtimes/perf_map/perf_map_runtime.h"
#include "status/exposition_checker.h"

namespace ember {
namespace {

const std::string kProcRoot = std::string(EMBER_TEST_DATA_DIR) + "/proc";

double Sample(const testing::Exposition& exposition, const std::string& series) {
  auto it = exposition.samples.find(series);
  EXPECT_NE(it, exposition.samples.end()) << series;
  return it == exposition.samples.end() ? -1 : it->second;
}

// Three processes (100 to 102) with the fixture's maps; 100 has a perf map of 1000 entries.
class CacheMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / "ember-cache-metrics-test";
    std::filesystem::remove_all(root_);
    for (int pid = 100; pid < 103; ++pid) {
      const std::string dir = absl::StrCat(root_, "/", pid);
      std::filesystem::create_directories(dir + "/root/tmp");
      std::ofstream(dir + "/stat") << pid << " (p) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 7 0 0\n";
      std::ofstream(dir + "/comm") << "p\n";
      std::filesystem::copy_file(kProcRoot + "/4242/maps", dir + "/maps");
    }
    std::ofstream map(root_ + "/100/root/tmp/perf-100.map");
    for (int i = 0; i < 1000; ++i) map << absl::StrFormat("%x 10 jitted_%d\n", 0x10000 + i * 16, i);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::string root_;
};

TEST_F(CacheMetricsTest, RenderWithPrometheusNamesAndFollowTheCaches) {
  MetricsRegistry registry;
  CacheMetrics metrics(registry);
  ProcessTable processes(root_, std::chrono::hours(1), ProcessTableLimits{.max_processes = 2});
  ModuleCache modules;
  FrameResolver frames(&processes, &modules, nullptr);
  DwarfUnwinder unwinder;
  // JIT code is named by the perf-map runtime, which keeps its own metrics in the same registry.
  PerfMapRuntimeLimits jit_limits{.min_refresh = std::chrono::milliseconds(0)};
  jit_limits.per_process.max_bytes = 8192;
  RuntimeSet runtimes;
  auto owned = std::make_unique<PerfMapRuntime>(processes, registry, jit_limits);
  PerfMapRuntime* jit_names = owned.get();
  runtimes.Add(std::move(owned));
  processes.Subscribe(&runtimes);
  frames.set_runtimes(&runtimes);

  // Before anything happened: every series is there, at zero.
  metrics.Publish(processes, modules, frames, unwinder);
  runtimes.SyncMetrics();
  auto empty = testing::ParseExposition(registry.Render());
  ASSERT_TRUE(empty.ok()) << empty.status();
  for (const char* series :
       {"ember_processes_tracked",
        "ember_processes_evicted_total",
        "ember_processes_evicted_remembered",
        "ember_perf_map_bytes",
        "ember_perf_map_entries_evicted_total",
        "ember_perf_map_budget_evictions_total",
        "ember_mapping_bytes",
        "ember_mapping_long_paths_total",
        "ember_mappings_dropped_total",
        "ember_mapping_evictions_total",
        "ember_symbol_cache_bytes{cache=\"elf_modules\"}",
        "ember_symbol_cache_bytes{cache=\"frames\"}",
        "ember_symbol_cache_evictions_total{cache=\"elf_modules\"}",
        "ember_symbol_cache_evictions_total{cache=\"frames\"}",
        "ember_symbol_cache_lookups_total{cache=\"frames\",result=\"hit\"}",
        "ember_symbol_cache_lookups_total{cache=\"frames\",result=\"miss\"}",
        "ember_symbol_cache_lookups_total{cache=\"elf_modules\",result=\"hit\"}",
        "ember_symbol_cache_lookups_total{cache=\"elf_modules\",result=\"miss\"}",
        "ember_cfi_cache_bytes",
        "ember_cfi_cache_evictions_total",
        "ember_unwind_steps_total{method=\"compact_row\"}",
        "ember_unwind_steps_total{method=\"libdwfl\"}"}) {
    EXPECT_EQ(Sample(*empty, series), 0) << series;
  }
  EXPECT_EQ(empty->types.at("ember_symbol_cache_bytes"), "gauge");
  EXPECT_EQ(empty->types.at("ember_processes_evicted_total"), "counter");
  EXPECT_EQ(empty->types.at("ember_processes_evicted_remembered"), "gauge");

  // Three processes through a table of two; JIT frames named from a capped perf map, one twice.
  Process* jit = processes.Get(100);
  ASSERT_NE(jit, nullptr);
  ASSERT_EQ(frames.User(jit, 0x10000 + 999 * 16, false)->function, "jitted_999");
  ASSERT_EQ(frames.User(jit, 0x10000 + 999 * 16, false)->function, "jitted_999");
  ASSERT_EQ(frames.User(jit, 0x10000 + 998 * 16, false)->function, "jitted_998");
  ASSERT_NE(processes.Get(101), nullptr);
  ASSERT_NE(processes.Get(102), nullptr);
  metrics.Publish(processes, modules, frames, unwinder);
  runtimes.SyncMetrics();
  auto after = testing::ParseExposition(registry.Render());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(Sample(*after, "ember_processes_tracked"), 2);
  EXPECT_EQ(Sample(*after, "ember_processes_evicted_total"), 1);
  // Process 100, the least recently used, was evicted and is remembered until it exits.
  EXPECT_EQ(Sample(*after, "ember_processes_evicted_remembered"), 1);
  EXPECT_EQ(processes.evicted_size(), 1u);
  EXPECT_GT(Sample(*after, "ember_perf_map_entries_evicted_total"), 900);
  // Its perf map stays with the runtime as long as the process runs.
  EXPECT_EQ(Sample(*after, "ember_perf_map_bytes"), static_cast<double>(jit_names->HeldBytes()));
  EXPECT_GT(jit_names->HeldBytes(), 0u);
  EXPECT_EQ(Sample(*after, "ember_symbol_cache_lookups_total{cache=\"frames\",result=\"hit\"}"), 1);
  EXPECT_EQ(Sample(*after, "ember_symbol_cache_lookups_total{cache=\"frames\",result=\"miss\"}"),
            2);
  EXPECT_EQ(Sample(*after, "ember_symbol_cache_bytes{cache=\"frames\"}"),
            static_cast<double>(frames.bytes()));
  EXPECT_GT(frames.bytes(), 0u);
  EXPECT_EQ(Sample(*after, "ember_mapping_bytes"), static_cast<double>(processes.mapping_bytes()));
  EXPECT_GT(processes.mapping_bytes(), 0u);

  // Counters only add what is new at the next publication.
  metrics.Publish(processes, modules, frames, unwinder);
  runtimes.SyncMetrics();
  auto again = testing::ParseExposition(registry.Render());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Sample(*again, "ember_processes_evicted_total"), 1);
  EXPECT_EQ(Sample(*again, "ember_symbol_cache_lookups_total{cache=\"frames\",result=\"miss\"}"),
            2);
}

}  // namespace
}  // namespace ember
