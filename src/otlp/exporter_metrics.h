// The self-metrics of the OTLP exporter: requests by outcome, retries, bytes sent, its queue.
#pragma once

#include "absl/status/status.h"
#include "otlp/profile_exporter.h"
#include "status/metrics_registry.h"

namespace ember {

// ember_otlp_* series, read from `exporter` (which must outlive `registry`'s scrapes) when
// scraped.
absl::Status RegisterExporterMetrics(MetricsRegistry& registry, const ProfileExporter& exporter);

}  // namespace ember
