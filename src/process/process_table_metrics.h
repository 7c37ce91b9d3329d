// The self-metrics of the process table's bounded state: processes, evicted processes, mappings.
#pragma once

#include "process/process_table.h"
#include "status/metrics_registry.h"

namespace ember {

// The table belongs to the sampling thread and keeps plain counters; Publish copies them into the
// registry (once per export interval).
class ProcessTableMetrics {
 public:
  // Registers every series in `registry`, which must outlive this object.
  explicit ProcessTableMetrics(MetricsRegistry& registry);

  // Sets the gauges and adds to the counters what the table counted since the last call.
  void Publish(const ProcessTable& processes);

 private:
  Gauge* processes_ = nullptr;
  CounterMirror processes_evicted_;
  Gauge* evicted_remembered_ = nullptr;
  Gauge* mapping_bytes_ = nullptr;
  CounterMirror mapping_long_paths_;
  CounterMirror mappings_dropped_;
  CounterMirror mapping_evictions_;
};

}  // namespace ember
