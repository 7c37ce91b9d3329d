// Registration of the pod watch's metrics.
#include "k8s/kubernetes_metrics.h"

#include "common/status_macros.h"

namespace ember {

absl::Status RegisterKubernetesMetrics(MetricsRegistry& registry, const PodIndex& pods,
                                       const PodWatcher& watcher) {
  const PodIndex* index = &pods;
  const PodWatcher* w = &watcher;
  RETURN_IF_ERROR(registry.AddCallbackGauge(
      "ember_kubernetes_pods", "Pods of this node known from the Kubernetes API.", {},
      [index] { return static_cast<double>(index->stats().pods); }));
  RETURN_IF_ERROR(registry.AddCallbackCounter(
      "ember_kubernetes_pods_evicted_total",
      "Pods dropped from the agent's pod cache at --max-pods, least recently used first.", {},
      [index] { return static_cast<double>(index->stats().pods_evicted); }));
  RETURN_IF_ERROR(registry.AddCallbackGauge(
      "ember_kubernetes_synced",
      "1 once this node's pods have been listed from the Kubernetes API, else 0.", {},
      [w] { return w->synced() ? 1.0 : 0.0; }));
  for (size_t kind = 0; kind < kKubeWatchErrorKinds; ++kind) {
    RETURN_IF_ERROR(registry.AddCallbackCounter(
        "ember_kubernetes_watch_errors_total",
        "Failed requests and streams of the Kubernetes pod watch, by kind.",
        {{"kind", KubeWatchErrorName(static_cast<KubeWatchError>(kind))}},
        [w, kind] { return static_cast<double>(w->stats().errors[kind]); }));
  }
  return absl::OkStatus();
}

}  // namespace ember
