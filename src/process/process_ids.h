// The ids of processes and threads as /proc names them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ember {

// The thread group (process) of a thread or process id, from PROC_ROOT/ID/status; nullopt when
// there is none, or when that file names no Tgid.
std::optional<uint32_t> ThreadGroupOf(uint32_t id, const std::string& proc_root = "/proc");

// Each id of `ids`, in order, as its thread group: a thread stands for its whole process (logged
// once, naming `flag`). An id with no running process is an error "<flag>: no running process
// with id N".
absl::StatusOr<std::vector<uint32_t>> ThreadGroupsOf(const std::vector<uint32_t>& ids,
                                                     absl::string_view flag,
                                                     const std::string& proc_root = "/proc");

// This process's id as BPF sees it (in the initial pid namespace), or 0 when it runs in another
// pid namespace: its own id there may be another process's on the host.
uint32_t OwnTgidInInitialPidNamespace(const std::string& proc_root = "/proc");

}  // namespace ember
