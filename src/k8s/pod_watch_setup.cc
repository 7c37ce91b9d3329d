// The pod watch's set-up from flags and environment.
#include "k8s/pod_watch_setup.h"

#include <utility>

#include "spdlog/spdlog.h"

namespace ember {

absl::StatusOr<PodWatch> SetUpPodWatch(
    KubernetesMode mode, const KubeApiFlags& flags, size_t max_pods,
    absl::FunctionRef<std::optional<std::string>(const char*)> getenv) {
  const std::optional<std::string> service_host = getenv("KUBERNETES_SERVICE_HOST");
  const bool flags_given = flags.server || flags.token_file || flags.ca_file || flags.node_name;
  bool enabled = false;
  switch (mode) {
    case KubernetesMode::kOn:
      enabled = true;
      break;
    case KubernetesMode::kOff:
      enabled = false;
      break;
    case KubernetesMode::kAuto:  // in a pod, or pointed at an API server
      enabled = (service_host.has_value() && !service_host->empty()) || flags_given;
      break;
  }
  PodWatch watch;
  if (!enabled) return watch;
  auto config = ResolveKubeApiConfig(flags, getenv);
  if (!config.ok()) return absl::InvalidArgumentError(config.status().message());
  watch.pods = std::make_unique<PodIndex>(PodIndexLimits{.max_pods = max_pods});
  auto watcher = PodWatcher::Create(*config, watch.pods.get());
  if (!watcher.ok()) return absl::InvalidArgumentError(watcher.status().message());
  watch.watcher = std::move(watcher).value();
  spdlog::info("watching the pods of node {} at {}", config->node_name, config->server);
  return watch;
}

}  // namespace ember
