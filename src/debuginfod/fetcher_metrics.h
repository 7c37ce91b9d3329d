// The self-metrics of the debuginfod fetcher: fetches by result, refusals, its cache on disk.
#pragma once

#include "absl/status/status.h"
#include "debuginfod/debug_file_fetcher.h"
#include "status/metrics_registry.h"

namespace ember {

// ember_debuginfod_* series, read from `fetcher` (which must outlive `registry`'s scrapes) when
// scraped.
absl::Status RegisterDebuginfodMetrics(MetricsRegistry& registry, const DebugFileFetcher& fetcher);

}  // namespace ember
