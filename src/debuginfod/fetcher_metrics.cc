// Registration of the debuginfod fetcher's metrics.
#include "debuginfod/fetcher_metrics.h"

#include <string>

#include "common/status_macros.h"

namespace ember {

absl::Status RegisterDebuginfodMetrics(MetricsRegistry& registry, const DebugFileFetcher& fetcher) {
  const DebugFileFetcher* f = &fetcher;
  for (size_t result = 0; result < kFetchResults; ++result) {
    RETURN_IF_ERROR(registry.AddCallbackCounter(
        "ember_debuginfod_fetches_total",
        "Separate debug files asked of the debuginfod servers, by result: ok (kept in the "
        "cache), not_found, error (a failed connection or server), timeout, refused (an answer "
        "that is not the build id's debug file: ember_debuginfod_refusals_total).",
        {{"result", std::string(FetchResultName(static_cast<FetchResult>(result)))}},
        [f, result] { return static_cast<double>(f->stats().results[result]); }));
  }
  for (size_t reason = 0; reason < kFetchRefusals; ++reason) {
    RETURN_IF_ERROR(registry.AddCallbackCounter(
        "ember_debuginfod_refusals_total",
        "Debuginfod answers refused, by reason: too_big (over --debuginfod-cache-bytes), "
        "not_elf, build_id_mismatch.",
        {{"reason", std::string(FetchRefusalName(static_cast<FetchRefusal>(reason)))}},
        [f, reason] { return static_cast<double>(f->stats().refusals[reason]); }));
  }
  RETURN_IF_ERROR(
      registry.AddCallbackGauge("ember_debuginfod_cache_bytes",
                                "Bytes of fetched debug files in --debuginfod-cache-dir (at most "
                                "--debuginfod-cache-bytes).",
                                {}, [f] { return static_cast<double>(f->stats().cache_bytes); }));
  RETURN_IF_ERROR(registry.AddCallbackCounter(
      "ember_debuginfod_cache_evictions_total",
      "Fetched debug files deleted, least recently used first, to stay within "
      "--debuginfod-cache-bytes.",
      {}, [f] { return static_cast<double>(f->stats().evictions); }));
  return registry.AddCallbackCounter(
      "ember_debuginfod_requests_dropped_total",
      "Build ids not queued for a fetch because 1024 were waiting already (asked again at a "
      "later export).",
      {}, [f] { return static_cast<double>(f->stats().queue_full); });
}

}  // namespace ember
