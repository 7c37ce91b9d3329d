// Process metrics from /proc, named and computed as the Prometheus client libraries do.
#include "status/process_metrics.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace ember {
namespace {

std::optional<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return text.str();
}

}  // namespace

std::optional<ProcStat> ParseProcStat(absl::string_view stat) {
  size_t close = stat.rfind(')');
  if (close == absl::string_view::npos) return std::nullopt;
  // Fields from 3 (state) on; field N of proc(5) is fields[N - 3].
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::StripAsciiWhitespace(stat.substr(close + 1)), ' ', absl::SkipEmpty());
  if (fields.size() < 22) return std::nullopt;
  ProcStat out;
  if (!absl::SimpleAtoi(fields[14 - 3], &out.utime_ticks) ||
      !absl::SimpleAtoi(fields[15 - 3], &out.stime_ticks) ||
      !absl::SimpleAtoi(fields[22 - 3], &out.start_ticks) ||
      !absl::SimpleAtoi(fields[24 - 3], &out.rss_pages)) {
    return std::nullopt;
  }
  return out;
}

std::optional<uint64_t> ParseBootTime(absl::string_view proc_stat) {
  for (absl::string_view line : absl::StrSplit(proc_stat, '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) {
      uint64_t seconds = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &seconds)) return seconds;
      return std::nullopt;
    }
  }
  return std::nullopt;
}

absl::Status AddProcessMetrics(MetricsRegistry& registry, std::string proc_root, std::string pid) {
  const std::string process_dir = proc_root + "/" + pid;
  const double ticks_per_second = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page_size = static_cast<double>(sysconf(_SC_PAGESIZE));
  auto read_stat = [process_dir] {
    std::optional<std::string> text = ReadSmallFile(process_dir + "/stat");
    return text ? ParseProcStat(*text) : std::nullopt;
  };

  RETURN_IF_ERROR(registry.AddCallbackCounter(
      "process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", {},
      [read_stat, ticks_per_second]() -> std::optional<double> {
        std::optional<ProcStat> stat = read_stat();
        if (!stat) return std::nullopt;
        return static_cast<double>(stat->utime_ticks + stat->stime_ticks) / ticks_per_second;
      }));
  RETURN_IF_ERROR(
      registry.AddCallbackGauge("process_resident_memory_bytes", "Resident memory size in bytes.",
                                {}, [read_stat, page_size]() -> std::optional<double> {
                                  std::optional<ProcStat> stat = read_stat();
                                  if (!stat) return std::nullopt;
                                  return static_cast<double>(stat->rss_pages) * page_size;
                                }));
  RETURN_IF_ERROR(registry.AddCallbackGauge(
      "process_open_fds", "Number of open file descriptors.", {},
      [fd_dir = process_dir + "/fd"]() -> std::optional<double> {
        std::error_code error;
        std::filesystem::directory_iterator it(fd_dir, error);
        if (error) return std::nullopt;
        double count = 0;
        for (; it != std::filesystem::directory_iterator(); it.increment(error)) ++count;
        if (error) return std::nullopt;
        return count;
      }));
  RETURN_IF_ERROR(registry.AddCallbackGauge(
      "process_start_time_seconds", "Start time of the process since unix epoch in seconds.", {},
      [read_stat, ticks_per_second, system_stat = proc_root + "/stat"]() -> std::optional<double> {
        std::optional<ProcStat> stat = read_stat();
        std::optional<std::string> text = ReadSmallFile(system_stat);
        std::optional<uint64_t> boot = text ? ParseBootTime(*text) : std::nullopt;
        if (!stat || !boot) return std::nullopt;
        return static_cast<double>(*boot) +
               static_cast<double>(stat->start_ticks) / ticks_per_second;
      }));
  return absl::OkStatus();
}

}  // namespace ember
