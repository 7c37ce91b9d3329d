// Thread ids to process ids through /proc/ID/status, and the agent's own id as BPF sees it.
#include "process/process_ids.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace ember {

std::optional<uint32_t> ThreadGroupOf(uint32_t id, const std::string& proc_root) {
  std::ifstream status(absl::StrCat(proc_root, "/", id, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    uint32_t tgid = 0;
    if (line.rfind("Tgid:", 0) == 0 && absl::SimpleAtoi(line.substr(5), &tgid)) return tgid;
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<uint32_t>> ThreadGroupsOf(const std::vector<uint32_t>& ids,
                                                     absl::string_view flag,
                                                     const std::string& proc_root) {
  std::vector<uint32_t> tgids;
  tgids.reserve(ids.size());
  for (uint32_t id : ids) {
    std::optional<uint32_t> tgid = ThreadGroupOf(id, proc_root);
    if (!tgid) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": no running process with id ", id));
    }
    if (*tgid != id) {
      spdlog::info("{} {} is a thread of process {}: profiling that", std::string(flag), id, *tgid);
    }
    tgids.push_back(*tgid);
  }
  return tgids;
}

uint32_t OwnTgidInInitialPidNamespace(const std::string& proc_root) {
  // The initial pid namespace's inode number is fixed (PROC_PID_INIT_INO).
  constexpr ino_t kInitialPidNamespaceInode = 0xEFFFFFFC;
  struct stat ns;
  if (stat(absl::StrCat(proc_root, "/self/ns/pid").c_str(), &ns) != 0 ||
      ns.st_ino != kInitialPidNamespaceInode) {
    spdlog::debug("not in the initial pid namespace: the agent's own samples are kept");
    return 0;
  }
  return static_cast<uint32_t>(getpid());
}

}  // namespace ember
