// The self-metrics of the /proc/PID reads that failed for sampled processes, by file.
#pragma once

#include <cstdint>

#include "process/process_table.h"
#include "status/metrics_registry.h"

namespace ember {

// ember_proc_read_failures_total{file}. The process table and the cgroup resolver count in plain
// integers on the sampling thread; Sync brings the registry's counters up to them.
class ProcReadFailureMetrics {
 public:
  // Registers every series in `registry`, which must outlive this object.
  explicit ProcReadFailureMetrics(MetricsRegistry& registry);

  // Adds to each counter what was counted since the last call: the process table's `failures`
  // (stat, maps) and the cgroup resolver's reads of /proc/PID/cgroup.
  void Sync(const ProcReadFailures& failures, uint64_t cgroup_read_failures);

 private:
  CounterMirror stat_;
  CounterMirror maps_;
  CounterMirror cgroup_;
};

}  // namespace ember
