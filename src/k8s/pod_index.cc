// The pod index: pods by uid, and a container id -> (pod, container) map kept in step with them.
// A container id belongs to the pod that last claimed it; removing or updating a pod drops only
// the ids still pointing at that pod, so a stale claim can never unmap the current owner.
#include "k8s/pod_index.h"

#include <utility>

namespace ember {

PodIndex::PodIndex(PodIndexLimits limits) : limits_(limits) {
  if (limits_.max_pods == 0) limits_.max_pods = 1;
}

void PodIndex::Replace(std::vector<PodInfo> pods) {
  std::lock_guard<std::mutex> lock(mutex_);
  pods_.clear();
  containers_.clear();
  ++stats_.replaced;
  for (PodInfo& pod : pods) {
    if (pod.uid.empty()) continue;
    // A uid twice in one list: the later object wins, as a later watch event would.
    UnindexLocked(pod.uid);
    if (pods_.size() >= limits_.max_pods) EvictLeastRecentlyUsedLocked();
    IndexLocked(std::move(pod));
  }
}

void PodIndex::Upsert(PodInfo pod) {
  if (pod.uid.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  // The old version's ids go first: a restarted container has a new id, and the old one must
  // not keep answering for it.
  UnindexLocked(pod.uid);
  if (pods_.size() >= limits_.max_pods) EvictLeastRecentlyUsedLocked();
  IndexLocked(std::move(pod));
}

void PodIndex::EvictLeastRecentlyUsedLocked() {
  // A linear scan: it takes an index at its limit, which a healthy node never reaches.
  auto oldest = pods_.end();
  for (auto it = pods_.begin(); it != pods_.end(); ++it) {
    if (oldest == pods_.end() || it->second.last_used < oldest->second.last_used) oldest = it;
  }
  if (oldest == pods_.end()) return;
  const std::string uid = oldest->first;
  UnindexLocked(uid);
  ++stats_.pods_evicted;
}

void PodIndex::Remove(const std::string& pod_uid) {
  std::lock_guard<std::mutex> lock(mutex_);
  UnindexLocked(pod_uid);
}

std::optional<ContainerMetadata> PodIndex::Lookup(absl::string_view container_id,
                                                  absl::string_view pod_uid) const {
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.lookups;
  if (!container_id.empty()) {
    if (auto it = containers_.find(container_id); it != containers_.end()) {
      const Stored& stored = pods_.at(it->second.first);
      stored.last_used = ++tick_;
      return ContainerMetadataOf(stored.pod, stored.pod.containers[it->second.second]);
    }
  }
  if (!pod_uid.empty()) {
    if (auto it = pods_.find(pod_uid); it != pods_.end()) {
      ++stats_.pod_fallbacks;
      it->second.last_used = ++tick_;
      return ContainerMetadataOf(it->second.pod, PodContainer{});
    }
  }
  ++stats_.lookup_misses;
  return std::nullopt;
}

PodIndexStats PodIndex::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  PodIndexStats stats = stats_;
  stats.pods = pods_.size();
  stats.containers = containers_.size();
  return stats;
}

void PodIndex::IndexLocked(PodInfo pod) {
  const std::string uid = pod.uid;
  for (size_t i = 0; i < pod.containers.size(); ++i) {
    const std::string& id = pod.containers[i].container_id;
    // Last claim wins: an id seen under another pod means that pod's object is older than this
    // one (its next event will drop the claim, and UnindexLocked leaves ours alone).
    if (!id.empty()) containers_.insert_or_assign(id, std::make_pair(uid, i));
  }
  pods_.insert_or_assign(uid, Stored{std::move(pod), ++tick_});
}

void PodIndex::UnindexLocked(const std::string& pod_uid) {
  auto it = pods_.find(pod_uid);
  if (it == pods_.end()) return;
  for (const PodContainer& container : it->second.pod.containers) {
    if (container.container_id.empty()) continue;
    auto c = containers_.find(container.container_id);
    if (c != containers_.end() && c->second.first == pod_uid) containers_.erase(c);
  }
  pods_.erase(it);
}

}  // namespace ember
