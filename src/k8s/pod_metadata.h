// Kubernetes Pod objects as the API server sends them (v1 Pod JSON), reduced to what a profile
// says about a container: its pod, namespace, node, owning workload and service name, with the
// OpenTelemetry semantic-convention keys.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace ember {

// The controllers that own a pod, from its ownerReferences (the one with controller: true, else
// the first). A ReplicaSet named "<deployment>-<pod-template-hash>" (the pod's
// `pod-template-hash` label) belongs to that Deployment; for a pod without the label, a last
// dash-segment that can be a pod-template-hash (6 to 10 characters of "456789bcdf", what the
// controller's encoding makes of decimal digits) is stripped, as the OpenTelemetry k8sattributes
// processor strips the last segment. A Job named "<cronjob>-<8 or more digits>" (the scheduled
// time in minutes since the epoch) belongs to that CronJob. Owner kinds are matched without their
// API group; other kinds (Node for mirror pods, custom resources) leave all fields empty. Empty
// fields are unknown or not applicable.
struct PodWorkload {
  std::string deployment = {};
  std::string replicaset = {};
  std::string daemonset = {};
  std::string statefulset = {};
  std::string job = {};
  std::string cronjob = {};
  // The workload a user deployed: the deployment, else cronjob, else replicaset, daemonset,
  // statefulset or job; "" for a bare pod.
  const std::string& TopName() const;
  bool operator==(const PodWorkload&) const = default;
};

struct PodContainer {
  std::string name = {};          // spec name, e.g. "nginx"
  std::string container_id = {};  // from status.containerStatuses[].containerID without the
                                  // "containerd://" (or other runtime) prefix; "" while not
                                  // started, or when the rest is not 64 lowercase hex characters
};

struct PodInfo {
  std::string uid = {};
  std::string name = {};
  std::string namespace_name = {};
  std::string node_name = {};
  std::string resource_version = {};  // metadata.resourceVersion
  PodWorkload workload = {};
  // The service name derived as the OpenTelemetry Kubernetes conventions recommend, for the
  // pod as a whole: the `resource.opentelemetry.io/service.name` annotation, then the
  // `app.kubernetes.io/name` label, then the workload name; "" when none (the container name is
  // the last fallback, per container: see ContainerMetadataOf). The conventions' list also has
  // the `app.kubernetes.io/instance` label before the name label, and the pod name before the
  // container name; both are left out here: an instance is usually a Helm release, not a service,
  // and a pod name changes with every rollout, splitting one service's profiles.
  std::string service_name = {};
  // Containers, init containers and ephemeral containers, with ids once they have started.
  std::vector<PodContainer> containers = {};
};

// A Pod object (one item of a PodList, or the `object` of a watch event). An error names what is
// missing, empty or of the wrong type (metadata.uid, metadata.name, metadata.namespace are
// required), or says the object is not a Pod (a `kind` other than "Pod"); anything else that is
// missing or odd is left empty. Never throws.
absl::StatusOr<PodInfo> ParsePod(const nlohmann::json& object);

// What a profile carries for one container of one pod.
struct ContainerMetadata {
  std::string namespace_name = {};
  std::string pod_name = {};
  std::string pod_uid = {};
  std::string container_name = {};
  std::string node_name = {};
  PodWorkload workload = {};
  std::string service_name = {};  // the pod's, else the container name

  bool operator==(const ContainerMetadata&) const = default;
};

ContainerMetadata ContainerMetadataOf(const PodInfo& pod, const PodContainer& container);

// The OpenTelemetry resource attributes of `metadata`, non-empty values only, in this order:
// k8s.namespace.name, k8s.pod.name, k8s.pod.uid, k8s.container.name, k8s.node.name,
// k8s.deployment.name, k8s.replicaset.name, k8s.daemonset.name, k8s.statefulset.name,
// k8s.job.name, k8s.cronjob.name. service.name is not among them: the
// caller decides its precedence.
std::vector<std::pair<std::string, std::string>> KubernetesAttributes(
    const ContainerMetadata& metadata);

}  // namespace ember
