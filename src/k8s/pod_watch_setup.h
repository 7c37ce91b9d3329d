// Whether the agent watches its node's pods, and the index and watcher that do it: set up once
// from the --kubernetes and --kube-* flags and the in-cluster environment.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "k8s/kube_api_config.h"
#include "k8s/pod_index.h"
#include "k8s/pod_watcher.h"

namespace ember {

// --kubernetes: kAuto watches in a pod (KUBERNETES_SERVICE_HOST set) or when a --kube-* flag
// points at an API server.
enum class KubernetesMode { kAuto, kOn, kOff };

// Both null when the pods are not watched. The index outlives the watcher, which holds it.
struct PodWatch {
  std::unique_ptr<PodIndex> pods;
  std::unique_ptr<PodWatcher> watcher;
};

// The watcher is made, not started (PodWatcher::Start). Flag and configuration errors are
// InvalidArgument, one line naming what to set.
absl::StatusOr<PodWatch> SetUpPodWatch(
    KubernetesMode mode, const KubeApiFlags& flags, size_t max_pods,
    absl::FunctionRef<std::optional<std::string>(const char*)> getenv);

}  // namespace ember
