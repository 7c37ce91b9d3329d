// Registration and publication of the process table's metrics.
#include "process/process_table_metrics.h"

#include <utility>

#include "absl/strings/string_view.h"

namespace ember {

ProcessTableMetrics::ProcessTableMetrics(MetricsRegistry& registry) {
  // Registration fails only on a programming error (a bad or duplicate name).
  auto counter = [&](absl::string_view name, absl::string_view help) {
    return CounterMirror(registry.AddCounter(name, help).value());
  };
  auto gauge = [&](absl::string_view name, absl::string_view help) {
    return registry.AddGauge(name, help).value();
  };
  processes_ = gauge("ember_processes_tracked", "Processes in the agent's process table.");
  processes_evicted_ =
      counter("ember_processes_evicted_total",
              "Processes dropped from the process table at --max-processes, least recently "
              "sampled first (read again when they are sampled again).");
  perf_map_bytes_ =
      gauge("ember_perf_map_bytes",
            "Estimated bytes of the JIT names read from perf maps, every process together.");
  perf_map_entries_evicted_ =
      counter("ember_perf_map_entries_evicted_total",
              "Perf map entries evicted, oldest first, when a process's map reached "
              "--max-perf-map-bytes or every map together --max-perf-map-total-bytes.");
  perf_map_budget_evictions_ =
      counter("ember_perf_map_budget_evictions_total",
              "Times the perf maps of every process together reached --max-perf-map-total-bytes "
              "and the largest map lost its oldest half.");
  mapping_bytes_ = gauge("ember_mapping_bytes",
                         "Estimated bytes of the executable mappings kept, every process together "
                         "(--max-mapping-bytes).");
  mapping_long_paths_ =
      counter("ember_mapping_long_paths_total",
              "Executable mappings read whose path was too long to keep (over 1 KiB): each keeps "
              "its range and file identity, and its frames are named [long path].");
  mappings_dropped_ =
      counter("ember_mappings_dropped_total",
              "Executable mappings read but not kept, over --max-mappings-per-process.");
  mapping_evictions_ =
      counter("ember_mapping_evictions_total",
              "Processes whose mappings were evicted, least recently sampled first, to stay "
              "within --max-mapping-bytes (read again when sampled).");
}

void ProcessTableMetrics::Publish(const ProcessTable& processes) {
  processes_->Set(static_cast<double>(processes.size()));
  processes_evicted_.Publish(processes.stats().evicted);
  perf_map_bytes_->Set(static_cast<double>(processes.perf_map_bytes()));
  perf_map_entries_evicted_.Publish(processes.stats().perf_map_entries_evicted);
  perf_map_budget_evictions_.Publish(processes.stats().perf_map_budget_evictions);
  mapping_bytes_->Set(static_cast<double>(processes.mapping_bytes()));
  mapping_long_paths_.Publish(processes.stats().mapping_long_paths);
  mappings_dropped_.Publish(processes.stats().mappings_dropped);
  mapping_evictions_.Publish(processes.stats().mapping_evictions);
}

}  // namespace ember
