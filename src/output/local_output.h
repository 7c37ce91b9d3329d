// The profiles written to --output-dir: a pprof file per interval, and flamegraph.html with every
// interval of the run. A failed write loses that file, not the agent: it is logged and counted.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/profile.h"
#include "output/flame_graph.h"
#include "status/metrics_registry.h"

namespace ember {

// How often flamegraph.html is rewritten while the agent runs (it is also written at the end).
inline constexpr std::chrono::seconds kFlameGraphRewrite{60};

class LocalOutput {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  // Registers ember_pprof_files_written_total, ember_output_write_failures_total and
  // ember_flame_graph_nodes in `metrics`, which outlives this. `clock` times the flame graph's
  // rewrites.
  LocalOutput(
      std::string dir, MetricsRegistry& metrics,
      Clock clock = [] { return std::chrono::steady_clock::now(); });

  // Creates the folder; an error names --output-dir.
  absl::Status CreateDir() const;

  // Writes the interval's pprof file, named after `now` (wall clock), and adds the interval to
  // the flame graph. `samples`: the interval's sample count, for the log.
  void Write(const IntervalProfile& profile, int64_t samples, absl::Time now);

  // Writes flamegraph.html when intervals were added since it was last written: the first time,
  // then at most once per kFlameGraphRewrite, and whenever `last` (at exit). Whether it tried.
  bool UpdateFlameGraph(bool last);

  // <dir>/cpu-<UTC time>.pb.gz, or with "_2", "_3"... for a file already there.
  std::string NextPprofPath(absl::Time now) const;

  uint64_t files_written() const { return files_written_metric_->Value(); }
  uint64_t write_failures() const { return write_failures_metric_->Value(); }

  // The run's last line: where the flame graph is, when it has samples.
  void LogSummary() const;

 private:
  std::string FlameGraphPath() const { return dir_ + "/flamegraph.html"; }

  std::string dir_;
  Clock clock_;
  FlameGraph flame_graph_;
  bool flame_graph_changed_ = false;  // intervals were added since the page was last written
  std::optional<std::chrono::steady_clock::time_point> flame_graph_written_at_;
  Counter* files_written_metric_;
  Counter* write_failures_metric_;
  Gauge* flame_graph_nodes_metric_;
};

}  // namespace ember
