// Registration and publication of the symbol caches' metrics.
#include "stacks/symbol_cache_metrics.h"

#include <utility>

#include "absl/strings/string_view.h"

namespace ember {

SymbolCacheMetrics::SymbolCacheMetrics(MetricsRegistry& registry) {
  // Registration fails only on a programming error (a bad or duplicate name).
  auto counter = [&](absl::string_view name, absl::string_view help, MetricLabels labels) {
    return CounterMirror(registry.AddCounter(name, help, std::move(labels)).value());
  };
  auto gauge = [&](absl::string_view name, absl::string_view help, MetricLabels labels) {
    return registry.AddGauge(name, help, std::move(labels)).value();
  };
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
  modules_evicted_ = counter(kEvictions, kEvictionsHelp, {{"cache", "elf_modules"}});
  frames_evicted_ = counter(kEvictions, kEvictionsHelp, {{"cache", "frames"}});
  constexpr absl::string_view kLookups = "ember_symbol_cache_lookups_total";
  constexpr absl::string_view kLookupsHelp =
      "Symbol cache lookups: frames (a hit reuses a symbolized frame, a miss symbolizes one) and "
      "ELF modules (a miss opens the file).";
  frame_hits_ = counter(kLookups, kLookupsHelp, {{"cache", "frames"}, {"result", "hit"}});
  frame_misses_ = counter(kLookups, kLookupsHelp, {{"cache", "frames"}, {"result", "miss"}});
  module_hits_ = counter(kLookups, kLookupsHelp, {{"cache", "elf_modules"}, {"result", "hit"}});
  module_misses_ = counter(kLookups, kLookupsHelp, {{"cache", "elf_modules"}, {"result", "miss"}});
}

void SymbolCacheMetrics::Publish(const ModuleCache& modules, const FrameResolver& frames) {
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
