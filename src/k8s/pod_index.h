// The pods of this node as last seen from the API server, indexed by container id and pod uid.
// The watcher thread writes it; the agent reads it once per process and export interval. All
// methods are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "k8s/pod_metadata.h"

namespace ember {

struct PodIndexLimits {
  // --max-pods. A node runs at most a few hundred (the kubelet's default is 110); more is an API
  // server gone wrong, or finished pods piling up.
  size_t max_pods = 4096;
};

struct PodIndexStats {
  size_t pods = 0;
  size_t containers = 0;      // containers with an id
  uint64_t pods_evicted = 0;  // least recently used pods dropped to make room at max_pods
  uint64_t replaced = 0;      // full relists applied
  uint64_t lookups = 0;
  uint64_t lookup_misses = 0;  // nullopt: neither id nor uid known (pod not listed yet, or
                               // not a pod's)
  uint64_t pod_fallbacks = 0;  // container id unknown, answered from the pod uid
};

class PodIndex {
 public:
  explicit PodIndex(PodIndexLimits limits = {});

  // A relist: exactly these pods from now on (the last max_pods of them; a uid listed twice
  // counts once, the later object winning).
  void Replace(std::vector<PodInfo> pods);
  // A watch ADDED or MODIFIED event. The pod's previous container ids are dropped; an id that
  // another pod claimed before now answers for this one. A new pod at max_pods first evicts the
  // least recently used one (updated or looked up longest ago; stats().pods_evicted), which
  // comes back with its next event or relist. Pods without a uid are ignored (ParsePod never
  // makes one).
  void Upsert(PodInfo pod);
  // A watch DELETED event.
  void Remove(const std::string& pod_uid);

  // The metadata of the container with this runtime id (64 hex characters, no runtime prefix).
  // When the id is not (yet) in any pod's status but `pod_uid` names a known pod (from the cgroup
  // path), the pod's metadata without a container name. nullopt when neither is known.
  std::optional<ContainerMetadata> Lookup(absl::string_view container_id,
                                          absl::string_view pod_uid = {}) const;

  PodIndexStats stats() const;

 private:
  struct Stored {
    PodInfo pod;
    mutable uint64_t last_used = 0;  // tick_ when last indexed or looked up
  };

  void IndexLocked(PodInfo pod);
  void UnindexLocked(const std::string& pod_uid);
  // Makes room for one more pod when the index is full.
  void EvictLeastRecentlyUsedLocked();

  PodIndexLimits limits_;
  mutable std::mutex mutex_;
  absl::flat_hash_map<std::string, Stored> pods_;  // by uid
  mutable uint64_t tick_ = 0;
  // container id -> (pod uid, index into that pod's containers)
  absl::flat_hash_map<std::string, std::pair<std::string, size_t>> containers_;
  mutable PodIndexStats stats_;
};

}  // namespace ember
