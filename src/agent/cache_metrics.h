// The self-metrics of the agent's bounded caches: how much each holds, how often a limit evicted
// entries, and symbol cache hits and misses. The caches belong to the sampling thread and keep
// plain counters; Publish copies them into the registry once per export interval.
#pragma once

#include <cstdint>

#include "process/process_table.h"
#include "stacks/frame_resolver.h"
#include "status/metrics_registry.h"
#include "symbolize/elf_module.h"
#include "unwind/dwarf_unwinder.h"

namespace ember {

class CacheMetrics {
 public:
  // Registers every series in `registry`, which must outlive this object.
  explicit CacheMetrics(MetricsRegistry& registry);

  // Sets the gauges and adds to the counters what the caches counted since the last call.
  void Publish(const ProcessTable& processes, const ModuleCache& modules,
               const FrameResolver& frames, const DwarfUnwinder& unwinder);

 private:
  // A counter mirroring a total kept elsewhere.
  struct Mirror {
    Counter* metric = nullptr;
    uint64_t published = 0;
    void Publish(uint64_t total);
  };

  Gauge* processes_ = nullptr;
  Mirror processes_evicted_;
  Gauge* perf_map_bytes_ = nullptr;
  Mirror perf_map_entries_evicted_;
  Mirror perf_map_budget_evictions_;
  Gauge* mapping_bytes_ = nullptr;
  Mirror mapping_long_paths_;
  Mirror mappings_dropped_;
  Mirror mapping_evictions_;
  Gauge* module_bytes_ = nullptr;
  Gauge* frame_bytes_ = nullptr;
  Mirror modules_evicted_;
  Mirror frames_evicted_;
  Mirror module_hits_;
  Mirror module_misses_;
  Mirror frame_hits_;
  Mirror frame_misses_;
  Gauge* cfi_bytes_ = nullptr;
  Mirror cfi_rows_evicted_;
  Mirror compact_steps_;
  Mirror libdwfl_steps_;
};

}  // namespace ember
