// The standard Prometheus process metrics (process_cpu_seconds_total,
// process_resident_memory_bytes, process_open_fds, process_start_time_seconds), read from /proc
// when scraped. Parsing takes bytes so tests run on fixtures; only AddProcessMetrics reads files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "status/metrics_registry.h"

namespace ember {

struct ProcStat {
  uint64_t utime_ticks = 0;
  uint64_t stime_ticks = 0;
  uint64_t start_ticks = 0;  // since boot
  uint64_t rss_pages = 0;
};

// /proc/PID/stat. The command name may hold spaces and parentheses, so fields are counted from
// the last ')'.
std::optional<ProcStat> ParseProcStat(absl::string_view stat);
// The "btime" line of /proc/stat: boot time in seconds since the epoch.
std::optional<uint64_t> ParseBootTime(absl::string_view proc_stat);

// Registers the four process_* series for the process `pid` ("self") under `proc_root`. Each is
// computed at scrape time and left out of a scrape when its file cannot be read.
absl::Status AddProcessMetrics(MetricsRegistry& registry, std::string proc_root = "/proc",
                               std::string pid = "self");

}  // namespace ember
