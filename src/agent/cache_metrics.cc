// Registration and publication of the cache metrics.
#include "agent/cache_metrics.h"

#include <utility>

#include "absl/strings/string_view.h"

namespace ember {

void CacheMetrics::Mirror::Publish(uint64_t total) {
  if (total > published) metric->Increment(total - published);
  published = total;
}

CacheMetrics::CacheMetrics(MetricsRegistry& registry) {
  // Registration fails only on a programming error (a bad or duplicate name).
  auto counter = [&](absl::string_view name, absl::string_view help, MetricLabels labels = {}) {
    return registry.AddCounter(name, help, std::move(labels)).value();
  };
  auto gauge = [&](absl::string_view name, absl::string_view help, MetricLabels labels = {}) {
    return registry.AddGauge(name, help, std::move(labels)).value();
  };
  processes_ = gauge("ember_processes_tracked", "Processes in the agent's process table.");
  processes_evicted_.metric =
      counter("ember_processes_evicted_total",
              "Processes dropped from the process table at --max-processes, least recently "
              "sampled first (read again when they are sampled again).");
  perf_map_bytes_ =
      gauge("ember_perf_map_bytes",
            "Estimated bytes of the JIT names read from perf maps, every process together.");
  perf_map_entries_evicted_.metric =
      counter("ember_perf_map_entries_evicted_total",
              "Perf map entries evicted, oldest first, when a process's map reached "
              "--max-perf-map-bytes or every map together --max-perf-map-total-bytes.");
  perf_map_budget_evictions_.metric =
      counter("ember_perf_map_budget_evictions_total",
              "Times the perf maps of every process together reached --max-perf-map-total-bytes "
              "and the largest map lost its oldest half.");
  mapping_bytes_ = gauge("ember_mapping_bytes",
                         "Estimated bytes of the executable mappings kept, every process together "
                         "(--max-mapping-bytes).");
  mapping_long_paths_.metric =
      counter("ember_mapping_long_paths_total",
              "Executable mappings read whose path was too long to keep (over 1 KiB): each keeps "
              "its range and file identity, and its frames are named [long path].");
  mappings_dropped_.metric =
      counter("ember_mappings_dropped_total",
              "Executable mappings read but not kept, over --max-mappings-per-process.");
  mapping_evictions_.metric =
      counter("ember_mapping_evictions_total",
              "Processes whose mappings were evicted, least recently sampled first, to stay "
              "within --max-mapping-bytes (read again when sampled).");

  constexpr absl::string_view kBytes = "ember_symbol_cache_bytes";
  constexpr absl::string_view kBytesHelp =
      "Estimated bytes held by the symbol caches (--max-symbol-cache-bytes): ELF modules with "
      "their symbol tables and DWARF data, and symbolized frames.";
  module_bytes_ = gauge(kBytes, kBytesHelp, {{"cache", "elf_modules"}});
  frame_bytes_ = gauge(kBytes, kBytesHelp, {{"cache", "frames"}});
  constexpr absl::string_view kEvictions = "ember_symbol_cache_evictions_total";
  constexpr absl::string_view kEvictionsHelp =
      "Entries evicted from the symbol caches, least recently used first, to stay within "
      "--max-symbol-cache-bytes.";
  modules_evicted_.metric = counter(kEvictions, kEvictionsHelp, {{"cache", "elf_modules"}});
  frames_evicted_.metric = counter(kEvictions, kEvictionsHelp, {{"cache", "frames"}});
  constexpr absl::string_view kLookups = "ember_symbol_cache_lookups_total";
  constexpr absl::string_view kLookupsHelp =
      "Symbol cache lookups: frames (a hit reuses a symbolized frame, a miss symbolizes one) and "
      "ELF modules (a miss opens the file).";
  frame_hits_.metric = counter(kLookups, kLookupsHelp, {{"cache", "frames"}, {"result", "hit"}});
  frame_misses_.metric = counter(kLookups, kLookupsHelp, {{"cache", "frames"}, {"result", "miss"}});
  module_hits_.metric =
      counter(kLookups, kLookupsHelp, {{"cache", "elf_modules"}, {"result", "hit"}});
  module_misses_.metric =
      counter(kLookups, kLookupsHelp, {{"cache", "elf_modules"}, {"result", "miss"}});

  cfi_bytes_ = gauge("ember_cfi_cache_bytes",
                     "Estimated bytes of the call-frame rows cached for DWARF unwinding, every "
                     "file together (--max-cfi-cache-bytes).");
  cfi_rows_evicted_.metric =
      counter("ember_cfi_cache_evictions_total",
              "Call-frame rows dropped, biggest files first, to stay within "
              "--max-cfi-cache-bytes (read again from the file when needed).");
  constexpr absl::string_view kSteps = "ember_unwind_steps_total";
  constexpr absl::string_view kStepsHelp =
      "Frames stepped in DWARF unwinding, by how: a cached compact call-frame row, or libdwfl "
      "(expressions, signal frames, code without CFI).";
  compact_steps_.metric = counter(kSteps, kStepsHelp, {{"method", "compact_row"}});
  libdwfl_steps_.metric = counter(kSteps, kStepsHelp, {{"method", "libdwfl"}});
}

void CacheMetrics::Publish(const ProcessTable& processes, const ModuleCache& modules,
                           const FrameResolver& frames, const DwarfUnwinder& unwinder) {
  cfi_bytes_->Set(static_cast<double>(unwinder.row_cache_bytes()));
  cfi_rows_evicted_.Publish(unwinder.rows_evicted());
  const ModuleCfi::RowStats steps = unwinder.row_stats();
  compact_steps_.Publish(steps.compact_steps);
  libdwfl_steps_.Publish(steps.libdwfl_steps);
  processes_->Set(static_cast<double>(processes.size()));
  processes_evicted_.Publish(processes.stats().evicted);
  perf_map_bytes_->Set(static_cast<double>(processes.perf_map_bytes()));
  perf_map_entries_evicted_.Publish(processes.stats().perf_map_entries_evicted);
  perf_map_budget_evictions_.Publish(processes.stats().perf_map_budget_evictions);
  mapping_bytes_->Set(static_cast<double>(processes.mapping_bytes()));
  mapping_long_paths_.Publish(processes.stats().mapping_long_paths);
  mappings_dropped_.Publish(processes.stats().mappings_dropped);
  mapping_evictions_.Publish(processes.stats().mapping_evictions);
  module_bytes_->Set(static_cast<double>(modules.bytes()));
  frame_bytes_->Set(static_cast<double>(frames.bytes()));
  modules_evicted_.Publish(modules.stats().evicted);
  frames_evicted_.Publish(frames.stats().evicted);
  module_hits_.Publish(modules.stats().hits);
  module_misses_.Publish(modules.stats().misses);
  frame_hits_.Publish(frames.stats().hits);
  frame_misses_.Publish(frames.stats().misses);
}

}  // namespace ember
