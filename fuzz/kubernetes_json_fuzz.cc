// What a Kubernetes API server (or anything answering in its place) sends: a Pod object, as an item
// of a list or the object of a watch event. ParsePod must refuse or accept it, never throw, and
// the index must stay consistent whatever it is fed.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "k8s/pod_index.h"
#include "k8s/pod_metadata.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json object = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto pod = ember::ParsePod(object);
  if (!pod.ok()) return 0;
  if (pod->uid.empty() || pod->name.empty() || pod->namespace_name.empty()) __builtin_trap();
  ember::PodIndex index({.max_pods = 2});
  index.Upsert(*pod);
  for (const ember::PodContainer& container : pod->containers) {
    auto found = index.Lookup(container.container_id, pod->uid);
    if (!found) __builtin_trap();  // the pod uid alone finds it
    ember::KubernetesAttributes(*found);
  }
  index.Remove(pod->uid);
  if (index.stats().pods != 0 || index.stats().containers != 0) __builtin_trap();
  return 0;
}
