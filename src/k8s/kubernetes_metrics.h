// The self-metrics of the Kubernetes pod watch: pods known and evicted, sync, watch errors.
#pragma once

#include "absl/status/status.h"
#include "k8s/pod_index.h"
#include "k8s/pod_watcher.h"
#include "status/metrics_registry.h"

namespace ember {

// ember_kubernetes_* series, read from `pods` and `watcher` (which must outlive `registry`'s
// scrapes) when scraped.
absl::Status RegisterKubernetesMetrics(MetricsRegistry& registry, const PodIndex& pods,
                                       const PodWatcher& watcher);

}  // namespace ember
