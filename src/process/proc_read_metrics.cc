// Registration and synchronization of the /proc read failure metrics.
#include "process/proc_read_metrics.h"

#include <string>

#include "absl/strings/string_view.h"

namespace ember {
ProcReadFailureMetrics::ProcReadFailureMetrics(MetricsRegistry& registry) {
  constexpr absl::string_view kName = "ember_proc_read_failures_total";
  constexpr absl::string_view kHelp =
      "Reads of /proc/PID files of sampled processes that failed: stat (the process exited or is "
      "hidden; its samples get [process exited]), maps (its own and its threads'), cgroup.";
  // Registration fails only on a programming error (a bad or duplicate name).
  auto counter = [&](absl::string_view file) {
    return CounterMirror(registry.AddCounter(kName, kHelp, {{"file", std::string(file)}}).value());
  };
  stat_ = counter("stat");
  maps_ = counter("maps");
  cgroup_ = counter("cgroup");
}

void ProcReadFailureMetrics::Sync(const ProcReadFailures& failures, uint64_t cgroup_read_failures) {
  stat_.Publish(failures.stat);
  maps_.Publish(failures.maps);
  cgroup_.Publish(cgroup_read_failures);
}

}  // namespace ember
