// Cgroup id (bpf_get_current_cgroup_id in each sample) -> container, read from /proc once per
// cgroup and cached, so the per-sample path is one hash lookup.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/node_hash_map.h"
#include "absl/strings/string_view.h"
#include "k8s/container_id.h"

namespace ember {

struct CgroupResolverOptions {
  std::string proc_root = "/proc";
  // The cgroup v2 mount ("/sys/fs/cgroup" on unified hosts, "/sys/fs/cgroup/unified" on hybrid
  // ones: see UnifiedCgroupMount); "" skips the inode check of a resolved path.
  std::string cgroup_root = "/sys/fs/cgroup";
  size_t max_entries = 4096;
  // Hybrid and v1 hosts (HostHasCgroupV1): a process whose v2 path names no container may still
  // be in one through its v1 hierarchies (Docker's cgroupfs driver). ResolveProcess then reads its
  // /proc/PID/cgroup whole.
  bool read_v1_lines = false;
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

  // The container of the sampled process: Resolve, and on hosts with v1 hierarchies
  // (options.read_v1_lines) the v1 lines of /proc/<pid>/cgroup when the v2 path names none. For
  // callers that ask once per process and cgroup change, not per sample.
  std::optional<ContainerRef> ResolveProcess(uint64_t cgroup_id, uint32_t pid);

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

// The options for this host: its cgroup v2 mount (from /proc/self/mounts) and whether it has v1
// hierarchies (from /proc/self/cgroup), both read under `proc_root`.
CgroupResolverOptions CgroupResolverOptionsForHost(const std::string& proc_root = "/proc");

// Where cgroup v2 is mounted, from a /proc/self/mounts text: the first "cgroup2" file system;
// "" when there is none.
std::string UnifiedCgroupMount(absl::string_view proc_mounts_text);

// Whether a /proc/PID/cgroup text has v1 hierarchy lines ("N:controllers:/path", N > 0).
bool HasCgroupV1Lines(absl::string_view proc_cgroup_text);

}  // namespace ember
