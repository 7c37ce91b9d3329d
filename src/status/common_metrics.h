// The self-metrics of the counters src/common keeps for every reader (files refused, names cut):
// registered here, the lowest folder above common that knows the registry.
#pragma once

#include "absl/status/status.h"
#include "status/metrics_registry.h"

namespace ember {

// ember_file_open_refusals_total{reason}, read from OpenRefusalCount when scraped.
absl::Status RegisterFileOpenMetrics(MetricsRegistry& registry);

// ember_names_truncated_total{name}, read from NamesTruncated when scraped.
absl::Status RegisterNameMetrics(MetricsRegistry& registry);

}  // namespace ember
