// Registration and publication of the unwinder's metrics.
#include "unwind/cfi_cache_metrics.h"

#include "absl/strings/string_view.h"

namespace ember {

CfiCacheMetrics::CfiCacheMetrics(MetricsRegistry& registry) {
  // Registration fails only on a programming error (a bad or duplicate name).
  cfi_bytes_ = registry
                   .AddGauge("ember_cfi_cache_bytes",
                             "Estimated bytes of the call-frame rows cached for DWARF unwinding, "
                             "every file together (--max-cfi-cache-bytes).")
                   .value();
  cfi_rows_evicted_ =
      CounterMirror(registry
                        .AddCounter("ember_cfi_cache_evictions_total",
                                    "Call-frame rows dropped, biggest files first, to stay within "
                                    "--max-cfi-cache-bytes (read again from the file when needed).")
                        .value());
  constexpr absl::string_view kSteps = "ember_unwind_steps_total";
  constexpr absl::string_view kStepsHelp =
      "Frames stepped in DWARF unwinding, by how: a cached compact call-frame row, or libdwfl "
      "(expressions, signal frames, code without CFI).";
  compact_steps_ =
      CounterMirror(registry.AddCounter(kSteps, kStepsHelp, {{"method", "compact_row"}}).value());
  libdwfl_steps_ =
      CounterMirror(registry.AddCounter(kSteps, kStepsHelp, {{"method", "libdwfl"}}).value());
}

void CfiCacheMetrics::Publish(const DwarfUnwinder& unwinder) {
  cfi_bytes_->Set(static_cast<double>(unwinder.row_cache_bytes()));
  cfi_rows_evicted_.Publish(unwinder.rows_evicted());
  const ModuleCfi::RowStats steps = unwinder.row_stats();
  compact_steps_.Publish(steps.compact_steps);
  libdwfl_steps_.Publish(steps.libdwfl_steps);
}

}  // namespace ember
