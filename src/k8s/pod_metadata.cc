// Pod JSON -> PodInfo. Every member is type-checked before use, so an odd object from the API
// server (or a proxy in between) is an error for the three identity fields and an empty value for
// everything else, never an exception.
#include "k8s/pod_metadata.h"

#include <initializer_list>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace ember {
namespace {

using Json = nlohmann::json;

constexpr char kServiceNameAnnotation[] = "resource.opentelemetry.io/service.name";
constexpr char kAppNameLabel[] = "app.kubernetes.io/name";
constexpr char kPodTemplateHashLabel[] = "pod-template-hash";

constexpr size_t kContainerIdLength = 64;

// find() on a non-object is end() in nlohmann, but say so here rather than rely on it.
const Json* Member(const Json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// nullptr when missing or not a string.
const std::string* StringMember(const Json& object, const char* key) {
  const Json* value = Member(object, key);
  if (value == nullptr || !value->is_string()) return nullptr;
  return &value->get_ref<const std::string&>();
}

std::string OptionalString(const Json& object, const char* key) {
  const std::string* s = StringMember(object, key);
  return s == nullptr ? std::string() : *s;
}

// A value of labels or annotations; "" when the map or the entry is missing or not a string.
std::string MapValue(const Json* map, const char* key) {
  if (map == nullptr || !map->is_object()) return {};
  auto it = map->find(key);
  if (it == map->end() || !it->is_string()) return {};
  return it->get<std::string>();
}

// `pod` names the object in the message: "Pod object", or "Pod <namespace>/<name>" once known.
absl::Status RequiredString(const Json& metadata, const char* key, absl::string_view pod,
                            std::string* out) {
  const Json* value = Member(metadata, key);
  if (value == nullptr || value->is_null()) {
    return absl::InvalidArgumentError(absl::StrCat(pod, ": metadata.", key, " is missing"));
  }
  if (!value->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(pod, ": metadata.", key, " is a ", value->type_name(), ", not a string"));
  }
  if (value->get_ref<const std::string&>().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(pod, ": metadata.", key, " is empty"));
  }
  *out = value->get<std::string>();
  return absl::OkStatus();
}

bool IsLowerHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// "containerd://<id>", "cri-o://<id>", "docker://<id>" -> <id>, when <id> is what the cgroup
// paths carry (64 lowercase hex); anything else cannot be matched to a sample, so it is "".
std::string ContainerIdFromStatus(absl::string_view container_id) {
  size_t scheme = container_id.find("://");
  if (scheme == absl::string_view::npos) return {};
  absl::string_view id = container_id.substr(scheme + 3);
  if (id.size() != kContainerIdLength) return {};
  for (char c : id) {
    if (!IsLowerHex(c)) return {};
  }
  return std::string(id);
}

// The Deployment controller's pod-template-hash is rand.SafeEncodeString (k8s.io/apimachinery)
// of a 32-bit hash printed in decimal: 1 to 10 characters, each digit mapped through
// alphanums[byte % 27] of "bcdfghjklmnpqrstvwxz2456789", which takes '0'..'9' to "456789bcdf".
// Fewer than 6 characters happens for one hash in 40000, and accepting them would take in
// suffixes such as "-v2" or "-db" of hand-named ReplicaSets.
bool LooksLikePodTemplateHash(absl::string_view s) {
  if (s.size() < 6 || s.size() > 10) return false;
  for (char c : s) {
    if (absl::string_view("456789bcdf").find(c) == absl::string_view::npos) return false;
  }
  return true;
}

// The CronJob controller names a Job "<cronjob>-<scheduled time in minutes since the epoch>",
// which has had 8 digits since 1989 and keeps them until 2160. Fewer digits are a hand-named
// Job such as "migrate-2024", which no CronJob made.
constexpr size_t kMinCronJobSuffixDigits = 8;

// "<prefix>-<suffix>" split at the last dash; false without one or with an empty side.
bool SplitLastDash(absl::string_view name, absl::string_view* prefix, absl::string_view* suffix) {
  size_t dash = name.rfind('-');
  if (dash == absl::string_view::npos || dash == 0 || dash + 1 == name.size()) return false;
  *prefix = name.substr(0, dash);
  *suffix = name.substr(dash + 1);
  return true;
}

// The Deployment that made ReplicaSet `replicaset`. With the pod's pod-template-hash label (the
// Deployment controller always sets it) the name must end in "-<hash>"; a pod without the label
// is judged by the shape of the last segment, as the OpenTelemetry k8sattributes processor does,
// but only when that segment could be a hash.
std::string DeploymentOf(absl::string_view replicaset, const Json* labels) {
  std::string hash = MapValue(labels, kPodTemplateHashLabel);
  absl::string_view prefix, suffix;
  if (!SplitLastDash(replicaset, &prefix, &suffix)) return {};
  if (!hash.empty()) return suffix == hash ? std::string(prefix) : std::string();
  if (labels != nullptr && labels->is_object() && labels->contains(kPodTemplateHashLabel)) {
    return {};  // there, but not a string (or empty): the label says "not a Deployment's hash"
  }
  return LooksLikePodTemplateHash(suffix) ? std::string(prefix) : std::string();
}

std::string CronJobOf(absl::string_view job) {
  absl::string_view prefix, suffix;
  if (!SplitLastDash(job, &prefix, &suffix)) return {};
  if (suffix.size() < kMinCronJobSuffixDigits) return {};
  for (char c : suffix) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return {};
  }
  return std::string(prefix);
}

// The managing owner: the one with controller: true, else the first usable one (objects made
// by hand or by older tools may not set the flag).
const Json* ControllerOwner(const Json& metadata) {
  const Json* owners = Member(metadata, "ownerReferences");
  if (owners == nullptr || !owners->is_array()) return nullptr;
  const Json* first = nullptr;
  for (const Json& owner : *owners) {
    if (StringMember(owner, "kind") == nullptr || StringMember(owner, "name") == nullptr) continue;
    const Json* controller = Member(owner, "controller");
    if (controller != nullptr && controller->is_boolean() && controller->get<bool>()) return &owner;
    if (first == nullptr) first = &owner;
  }
  return first;
}

// Kinds are matched without their API group, as k8sattributes does: OpenKruise's Advanced
// StatefulSet and DaemonSet (apps.kruise.io) are statefulsets and daemonsets to a user too.
PodWorkload WorkloadOf(const Json& metadata) {
  PodWorkload workload;
  const Json* owner = ControllerOwner(metadata);
  if (owner == nullptr) return workload;
  const std::string& kind = *StringMember(*owner, "kind");
  const std::string& name = *StringMember(*owner, "name");
  if (name.empty()) return workload;
  if (kind == "ReplicaSet") {
    workload.replicaset = name;
    workload.deployment = DeploymentOf(name, Member(metadata, "labels"));
  } else if (kind == "Job") {
    workload.job = name;
    workload.cronjob = CronJobOf(name);
  } else if (kind == "DaemonSet") {
    workload.daemonset = name;
  } else if (kind == "StatefulSet") {
    workload.statefulset = name;
  }
  // Other owners (a Node for static pods' mirrors, operators' custom resources) are not among
  // the semantic-convention workloads.
  return workload;
}

// Containers of one spec list, then the ids of the matching status list. A status without a
// spec entry (a spec dropped by a field selector or a proxy) still names a container. `index`
// maps names to positions in `out` across all three lists: Kubernetes keeps names unique in a pod.
void AddContainers(const Json& spec, const char* spec_key, const Json& status,
                   const char* status_key, absl::flat_hash_map<std::string, size_t>* index,
                   std::vector<PodContainer>* out) {
  size_t begin = out->size();
  auto add = [&](const std::string& name) -> PodContainer* {
    if (name.empty() || !index->emplace(name, out->size()).second) return nullptr;
    out->push_back(PodContainer{name, ""});
    return &out->back();
  };
  if (const Json* list = Member(spec, spec_key); list != nullptr && list->is_array()) {
    for (const Json& c : *list) {
      if (const std::string* name = StringMember(c, "name")) add(*name);
    }
  }
  const Json* statuses = Member(status, status_key);
  if (statuses == nullptr || !statuses->is_array()) return;
  for (const Json& s : *statuses) {
    const std::string* name = StringMember(s, "name");
    if (name == nullptr || name->empty()) continue;
    PodContainer* container = nullptr;
    if (auto it = index->find(*name); it != index->end()) {
      if (it->second < begin) continue;  // another list's name: Kubernetes forbids that
      container = &(*out)[it->second];
    } else {
      container = add(*name);
    }
    if (const std::string* id = StringMember(s, "containerID")) {
      container->container_id = ContainerIdFromStatus(*id);
    }
  }
}

absl::StatusOr<PodInfo> ParsePodUnchecked(const Json& object) {
  if (!object.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Pod object: expected a JSON object, got ", object.type_name()));
  }
  if (const std::string* kind = StringMember(object, "kind"); kind != nullptr && *kind != "Pod") {
    return absl::InvalidArgumentError(
        absl::StrCat("Pod object: kind is \"", *kind, "\", not \"Pod\""));
  }
  const Json* metadata = Member(object, "metadata");
  if (metadata == nullptr || !metadata->is_object()) {
    return absl::InvalidArgumentError(
        metadata == nullptr
            ? std::string("Pod object: metadata is missing")
            : absl::StrCat("Pod object: metadata is a ", metadata->type_name(), ", not an object"));
  }
  PodInfo pod;
  absl::Status status = RequiredString(*metadata, "namespace", "Pod object", &pod.namespace_name);
  if (status.ok()) status = RequiredString(*metadata, "name", "Pod object", &pod.name);
  if (status.ok()) {
    status = RequiredString(*metadata, "uid",
                            absl::StrCat("Pod ", pod.namespace_name, "/", pod.name), &pod.uid);
  }
  if (!status.ok()) return status;

  pod.resource_version = OptionalString(*metadata, "resourceVersion");
  static const Json kEmpty = Json::object();
  const Json* spec = Member(object, "spec");
  const Json* pod_status = Member(object, "status");
  if (spec == nullptr) spec = &kEmpty;
  if (pod_status == nullptr) pod_status = &kEmpty;
  pod.node_name = OptionalString(*spec, "nodeName");
  pod.workload = WorkloadOf(*metadata);

  pod.service_name = MapValue(Member(*metadata, "annotations"), kServiceNameAnnotation);
  if (pod.service_name.empty())
    pod.service_name = MapValue(Member(*metadata, "labels"), kAppNameLabel);
  if (pod.service_name.empty()) pod.service_name = pod.workload.TopName();

  absl::flat_hash_map<std::string, size_t> seen;
  AddContainers(*spec, "containers", *pod_status, "containerStatuses", &seen, &pod.containers);
  AddContainers(*spec, "initContainers", *pod_status, "initContainerStatuses", &seen,
                &pod.containers);
  AddContainers(*spec, "ephemeralContainers", *pod_status, "ephemeralContainerStatuses", &seen,
                &pod.containers);
  return pod;
}

}  // namespace

const std::string& PodWorkload::TopName() const {
  for (const std::string* name : {&deployment, &cronjob, &replicaset, &daemonset, &statefulset}) {
    if (!name->empty()) return *name;
  }
  return job;
}

absl::StatusOr<PodInfo> ParsePod(const nlohmann::json& object) {
  // Every access above checks the type first; the catch is a backstop so that a slip there is
  // one bad pod, not a dead watcher thread.
  try {
    return ParsePodUnchecked(object);
  } catch (const nlohmann::json::exception& e) {
    return absl::InternalError(absl::StrCat("Pod object: unexpected JSON shape: ", e.what()));
  }
}

ContainerMetadata ContainerMetadataOf(const PodInfo& pod, const PodContainer& container) {
  ContainerMetadata m;
  m.namespace_name = pod.namespace_name;
  m.pod_name = pod.name;
  m.pod_uid = pod.uid;
  m.container_name = container.name;
  m.node_name = pod.node_name;
  m.workload = pod.workload;
  m.service_name = pod.service_name.empty() ? container.name : pod.service_name;
  return m;
}

std::vector<std::pair<std::string, std::string>> KubernetesAttributes(
    const ContainerMetadata& metadata) {
  const std::pair<const char*, const std::string*> fields[] = {
      {"k8s.namespace.name", &metadata.namespace_name},
      {"k8s.pod.name", &metadata.pod_name},
      {"k8s.pod.uid", &metadata.pod_uid},
      {"k8s.container.name", &metadata.container_name},
      {"k8s.node.name", &metadata.node_name},
      {"k8s.deployment.name", &metadata.workload.deployment},
      {"k8s.replicaset.name", &metadata.workload.replicaset},
      {"k8s.daemonset.name", &metadata.workload.daemonset},
      {"k8s.statefulset.name", &metadata.workload.statefulset},
      {"k8s.job.name", &metadata.workload.job},
      {"k8s.cronjob.name", &metadata.workload.cronjob},
  };
  std::vector<std::pair<std::string, std::string>> attributes;
  for (const auto& [key, value] : fields) {
    if (!value->empty()) attributes.emplace_back(key, *value);
  }
  return attributes;
}

}  // namespace ember
