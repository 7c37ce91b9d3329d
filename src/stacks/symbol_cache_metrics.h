// The self-metrics of the symbol caches: the ELF modules and the symbolized frames, their bytes,
// evictions, hits and misses.
#pragma once

#include "stacks/frame_resolver.h"
#include "status/metrics_registry.h"
#include "symbolize/elf_module.h"

namespace ember {

// The caches belong to the sampling thread and keep plain counters; Publish copies them into the
// registry (once per export interval).
class SymbolCacheMetrics {
 public:
  // Registers every series in `registry`, which must outlive this object.
  explicit SymbolCacheMetrics(MetricsRegistry& registry);

  // Sets the gauges and adds to the counters what the caches counted since the last call.
  void Publish(const ModuleCache& modules, const FrameResolver& frames);

 private:
  Gauge* module_bytes_ = nullptr;
  Gauge* frame_bytes_ = nullptr;
  CounterMirror modules_evicted_;
  CounterMirror frames_evicted_;
  CounterMirror module_hits_;
  CounterMirror module_misses_;
  CounterMirror frame_hits_;
  CounterMirror frame_misses_;
};

}  // namespace ember
