// Cgroup id (bpf_get_current_cgroup_id in each sample) -> container, read from /proc once per
// cgroup and cached, so the per-sample path is one hash lookup.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/node_hash_map.h"
#include "k8s/container_id.h"

namespace ember {

struct CgroupResolverOptions {
  std::string proc_root = "/proc";
  std::string cgroup_root = "/sys/fs/cgroup";  // the cgroup v2 mount
  size_t max_entries = 4096;
};

struct CgroupResolverStats {
  uint64_t lookups = 0;
  uint64_t proc_reads = 0;     // /proc/PID/cgroup files read (cache misses)
  uint64_t read_failures = 0;  // the process was gone or its cgroup file unreadable
  uint64_t id_mismatches = 0;  // the process had moved to another cgroup by the time we read
  uint64_t evictions = 0;
};

class CgroupResolver {
 public:
  explicit CgroupResolver(CgroupResolverOptions options = {});

  // The container of cgroup `cgroup_id`, learnt from the v2 ("0::") line of /proc/<pid>/cgroup
  // of the sampled `pid` the first time the id is seen; nullptr when the cgroup is not a
  // container's (cached too), or the process has no v2 line (v1 lines cannot answer for a v2 id).
  // The pointer stays valid until the next Resolve or NextGeneration.
  // A failed read, or a path whose directory under the cgroup root has another inode than
  // `cgroup_id`, is cached as "no container" only until the next generation, then retried.
  const ContainerRef* Resolve(uint64_t cgroup_id, uint32_t pid);

  // Ends a generation (one export cycle): drops entries not used during it, and the transient
  // negatives.
  void NextGeneration();

  size_t size() const { return entries_.size(); }
  const CgroupResolverStats& stats() const { return stats_; }

 private:
  struct Entry {
    std::optional<ContainerRef> container;
    uint64_t last_used = 0;
    bool transient = false;  // a negative from a failed read: retried next generation
  };

  Entry Lookup(uint64_t cgroup_id, uint32_t pid);
  void MakeRoom();
  // Drops entries not used in this generation, and transient (retry-next-generation) negatives.
  void DropStale();

  CgroupResolverOptions options_;
  absl::node_hash_map<uint64_t, Entry> entries_;
  uint64_t generation_ = 0;
  CgroupResolverStats stats_;
};

}  // namespace ember
