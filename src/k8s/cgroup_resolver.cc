// The resolver's cache and its two filesystem reads: /proc/PID/cgroup and a stat of the cgroup
// directory whose inode number is the cgroup id.
#include "k8s/cgroup_resolver.h"

#include <sys/stat.h>

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/read_file.h"

namespace ember {
namespace {

std::optional<std::string> ReadFile(const std::string& path) { return ReadWholeFile(path); }

}  // namespace

CgroupResolver::CgroupResolver(CgroupResolverOptions options) : options_(std::move(options)) {
  if (options_.max_entries == 0) options_.max_entries = 1;
}

const ContainerRef* CgroupResolver::Resolve(uint64_t cgroup_id, uint32_t pid) {
  ++stats_.lookups;
  auto it = entries_.find(cgroup_id);
  if (it == entries_.end()) {
    Entry entry = Lookup(cgroup_id, pid);
    MakeRoom();
    it = entries_.emplace(cgroup_id, std::move(entry)).first;
  }
  it->second.last_used = generation_;
  return it->second.container ? &*it->second.container : nullptr;
}

CgroupResolver::Entry CgroupResolver::Lookup(uint64_t cgroup_id, uint32_t pid) {
  Entry entry;
  ++stats_.proc_reads;
  std::optional<std::string> text = ReadFile(absl::StrCat(options_.proc_root, "/", pid, "/cgroup"));
  if (!text) {
    ++stats_.read_failures;
    entry.transient = true;
    return entry;
  }
  // The cgroup id is the v2 cgroup's, so only the v2 path may answer for it: on a hybrid or v1
  // host every process shares the v2 root, and a v1 line's container would be pinned on all of
  // them. Such hosts need a per-process lookup (ContainerFromProcCgroup), not this cache.
  std::optional<std::string> unified = UnifiedCgroupPath(*text);
  if (!unified) return entry;
  // The sample's pid may have moved cgroup (or its pid been reused) since the sample was taken:
  // when the v2 directory exists, its inode must be the sample's cgroup id.
  // A path relative to the agent's own cgroup namespace ("/../../kubepods.slice/...", an agent in
  // a pod of its own) cannot be found under the mount: it is taken as it is.
  struct stat st {};
  if (!options_.cgroup_root.empty() && !absl::StrContains(*unified, "/..") &&
      stat(absl::StrCat(options_.cgroup_root, *unified).c_str(), &st) == 0 &&
      static_cast<uint64_t>(st.st_ino) != cgroup_id) {
    ++stats_.id_mismatches;
    entry.transient = true;
    return entry;
  }
  entry.container = ContainerIdFromCgroupPath(*unified);
  return entry;
}

std::optional<ContainerRef> CgroupResolver::ResolveProcess(uint64_t cgroup_id, uint32_t pid) {
  if (const ContainerRef* ref = Resolve(cgroup_id, pid)) return *ref;
  if (!options_.read_v1_lines) return std::nullopt;
  ++stats_.proc_reads;
  std::optional<std::string> text = ReadFile(absl::StrCat(options_.proc_root, "/", pid, "/cgroup"));
  if (!text) {
    ++stats_.read_failures;
    return std::nullopt;
  }
  return ContainerFromProcCgroup(*text);
}

void CgroupResolver::MakeRoom() {
  if (entries_.size() < options_.max_entries) return;
  // Entries unused in this generation go first; if every entry is in use, any one goes: a miss
  // costs one /proc read, never unbounded memory.
  DropStale();
  if (entries_.size() >= options_.max_entries) {
    entries_.erase(entries_.begin());
    ++stats_.evictions;
  }
}

void CgroupResolver::DropStale() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.last_used != generation_ || it->second.transient) {
      entries_.erase(it++);
      ++stats_.evictions;
    } else {
      ++it;
    }
  }
}

void CgroupResolver::NextGeneration() {
  DropStale();
  ++generation_;
}

CgroupResolverOptions CgroupResolverOptionsForHost(const std::string& proc_root) {
  CgroupResolverOptions options;
  options.proc_root = proc_root;
  options.cgroup_root = UnifiedCgroupMount(ReadFile(proc_root + "/self/mounts").value_or(""));
  options.read_v1_lines = HasCgroupV1Lines(ReadFile(proc_root + "/self/cgroup").value_or(""));
  return options;
}

std::string UnifiedCgroupMount(absl::string_view proc_mounts_text) {
  // "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0"; spaces in the mount point are
  // written as \040, which a cgroup mount point does not have in practice.
  for (absl::string_view line : absl::StrSplit(proc_mounts_text, '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() >= 3 && fields[2] == "cgroup2") return std::string(fields[1]);
  }
  return "";
}

bool HasCgroupV1Lines(absl::string_view proc_cgroup_text) {
  for (absl::string_view line : absl::StrSplit(proc_cgroup_text, '\n')) {
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos || colon == 0) continue;
    uint32_t hierarchy = 0;
    if (absl::SimpleAtoi(line.substr(0, colon), &hierarchy) && hierarchy > 0) return true;
  }
  return false;
}

}  // namespace ember
