// The self-metrics of DWARF unwinding: the cached call-frame rows and how frames were stepped.
#pragma once

#include "status/metrics_registry.h"
#include "unwind/dwarf_unwinder.h"

namespace ember {

// The unwinder belongs to the sampling thread and keeps plain counters; Publish copies them into
// the registry (once per export interval).
class CfiCacheMetrics {
 public:
  // Registers every series in `registry`, which must outlive this object.
  explicit CfiCacheMetrics(MetricsRegistry& registry);

  // Sets the gauge and adds to the counters what the unwinder counted since the last call.
  void Publish(const DwarfUnwinder& unwinder);

 private:
  Gauge* cfi_bytes_ = nullptr;
  CounterMirror cfi_rows_evicted_;
  CounterMirror compact_steps_;
  CounterMirror libdwfl_steps_;
};

}  // namespace ember
