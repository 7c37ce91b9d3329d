// The self-metrics of the symbolizers' own counters: jitdump files refused, names left mangled.
#pragma once

#include "absl/status/status.h"
#include "status/metrics_registry.h"

namespace ember {

// ember_jitdump_refusals_total{reason}, read from JitDumpRefusalCount when scraped.
absl::Status RegisterJitDumpMetrics(MetricsRegistry& registry);

// ember_demangle_over_budget_total, read from DemangleOverBudget when scraped.
absl::Status RegisterDemangleMetrics(MetricsRegistry& registry);

}  // namespace ember
