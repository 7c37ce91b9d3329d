// The self-metrics of the agent's bounded caches: how much each holds, how often a limit evicted
// entries, and symbol cache hits and misses. Each cache's folder registers its own series; the
// caches belong to the sampling thread, and Publish copies their counters into the registry once
// per export interval.
#pragma once

#include "process/process_table.h"
#include "process/process_table_metrics.h"
#include "stacks/frame_resolver.h"
#include "stacks/symbol_cache_metrics.h"
#include "status/metrics_registry.h"
#include "symbolize/elf_module.h"
#include "unwind/cfi_cache_metrics.h"
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
  // In /metrics in this order.
  ProcessTableMetrics processes_;
  SymbolCacheMetrics symbols_;
  CfiCacheMetrics cfi_;
};

}  // namespace ember
