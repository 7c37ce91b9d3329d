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
  evicted_remembered_ =
      gauge("ember_processes_evicted_remembered",
            "Processes dropped from the process table at --max-processes and not yet known to "
            "have exited: their unwind tables and runtime state stay until they exit (at most "
            "four per place in the table, the longest evicted told exited first).");
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
  evicted_remembered_->Set(static_cast<double>(processes.evicted_size()));
  mapping_bytes_->Set(static_cast<double>(processes.mapping_bytes()));
  mapping_long_paths_.Publish(processes.stats().mapping_long_paths);
  mappings_dropped_.Publish(processes.stats().mappings_dropped);
  mapping_evictions_.Publish(processes.stats().mapping_evictions);
}

}  // namespace ember
