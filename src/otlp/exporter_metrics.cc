// Registration of the OTLP exporter's metrics.
#include "otlp/exporter_metrics.h"

#include <cstdint>
#include <utility>

#include "common/status_macros.h"

namespace ember {

absl::Status RegisterExporterMetrics(MetricsRegistry& registry, const ProfileExporter& exporter) {
  const ProfileExporter* e = &exporter;
  using Field = uint64_t ExporterStats::*;
  const std::pair<const char*, Field> outcomes[] = {
      {"sent", &ExporterStats::intervals_sent},
      {"rejected", &ExporterStats::failed},
      {"dropped_queue_full", &ExporterStats::dropped_queue_full},
      {"dropped_at_shutdown", &ExporterStats::dropped_at_shutdown}};
  for (const auto& [outcome, field] : outcomes) {
    RETURN_IF_ERROR(registry.AddCallbackCounter(
        "ember_otlp_intervals_total",
        "OTLP export requests (one an interval, more for one over --otlp-max-request-bytes), by "
        "outcome.",
        {{"outcome", outcome}},
        [e, member = field] { return static_cast<double>(e->stats().*member); }));
  }
  RETURN_IF_ERROR(registry.AddCallbackCounter(
      "ember_otlp_retries_total", "OTLP export attempts that failed and were tried again.", {},
      [e] { return static_cast<double>(e->stats().retries); }));
  RETURN_IF_ERROR(registry.AddCallbackCounter(
      "ember_otlp_sent_bytes_total", "Serialized OTLP request bytes delivered (before gzip).", {},
      [e] { return static_cast<double>(e->stats().bytes_sent); }));
  return registry.AddCallbackGauge("ember_otlp_queue_bytes",
                                   "Serialized OTLP requests waiting to be sent.", {},
                                   [e] { return static_cast<double>(e->stats().queued_bytes); });
}

}  // namespace ember
