// Writing the interval profiles and the flame graph to the output folder.
#include "output/local_output.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "output/pprof_writer.h"
#include "spdlog/spdlog.h"

namespace ember {

LocalOutput::LocalOutput(std::string dir, MetricsRegistry& metrics, Clock clock)
    : dir_(std::move(dir)), clock_(std::move(clock)) {
  // Registration fails only on a programming error (a bad or duplicate name).
  files_written_metric_ = metrics
                              .AddCounter("ember_pprof_files_written_total",
                                          "Interval profiles written as pprof files.")
                              .value();
  write_failures_metric_ = metrics
                               .AddCounter("ember_output_write_failures_total",
                                           "Failed writes of pprof files or the flame graph.")
                               .value();
  flame_graph_nodes_metric_ =
      metrics
          .AddGauge("ember_flame_graph_nodes",
                    "Call-tree nodes of flamegraph.html, which holds every interval of the run "
                    "(bounded at 200,000).")
          .value();
}

absl::Status LocalOutput::CreateDir() const {
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("--output-dir: cannot create '", dir_, "': ", error.message()));
  }
  return absl::OkStatus();
}

void LocalOutput::Write(const IntervalProfile& profile, int64_t samples, absl::Time now) {
  // A full or read-only disk loses this interval, not the agent: it keeps sampling.
  std::string path = NextPprofPath(now);
  if (absl::Status status = WritePprofFile(profile, path); status.ok()) {
    files_written_metric_->Increment();
    spdlog::info("wrote {} ({} samples, {} stacks)", path, samples, profile.samples.size());
  } else {
    write_failures_metric_->Increment();
    spdlog::error("interval of {} samples lost: {}", samples, std::string(status.message()));
  }
  flame_graph_.Add(profile);
  flame_graph_changed_ = true;
  flame_graph_nodes_metric_->Set(static_cast<double>(flame_graph_.nodes()));
}

bool LocalOutput::UpdateFlameGraph(bool last) {
  // The page holds every interval so far, so writing it costs the whole graph (up to 200,000
  // nodes), not this interval: it is rewritten at most once a minute, and at the end.
  // Timed on the steady clock, like the export schedule: a wall clock step must not stop it.
  const auto started = clock_();
  if (!flame_graph_changed_ || !(last || !flame_graph_written_at_.has_value() ||
                                 started - *flame_graph_written_at_ >= kFlameGraphRewrite)) {
    return false;
  }
  if (absl::Status status = flame_graph_.WriteHtml(FlameGraphPath(), "Ember CPU profile");
      !status.ok()) {
    write_failures_metric_->Increment();
    spdlog::error("flame graph not updated: {}", std::string(status.message()));
  } else {
    spdlog::debug(
        "flame graph written ({} nodes) in {} ms", flame_graph_.nodes(),
        std::chrono::duration_cast<std::chrono::milliseconds>(clock_() - started).count());
  }
  flame_graph_changed_ = false;
  flame_graph_written_at_ = started;
  return true;
}

std::string LocalOutput::NextPprofPath(absl::Time now) const {
  std::string stem =
      absl::StrCat(dir_, "/cpu-", absl::FormatTime("%Y%m%dT%H%M%SZ", now, absl::UTCTimeZone()));
  std::string path = stem + ".pb.gz";
  std::error_code error;
  // A second interval written within the same second (the loop catching up after a slow write):
  // "_2" sorts after ".pb.gz", so the files list in the order they were written.
  for (int n = 2; std::filesystem::exists(path, error); ++n) {
    path = absl::StrCat(stem, "_", n, ".pb.gz");
  }
  return path;
}

void LocalOutput::LogSummary() const {
  if (flame_graph_.total_samples() == 0) return;
  std::error_code error;
  auto page = std::filesystem::absolute(FlameGraphPath(), error).lexically_normal();
  spdlog::info("flame graph: {}", page.string());
}

}  // namespace ember
