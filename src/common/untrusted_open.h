// Opening a file that a profiled process names (a mapped library, a perf map, a separate debug
// file): the process controls the path, its links and what sits there, so the open must neither
// follow its links out of its root, nor block (a FIFO, a device), nor accept a file other than
// the one its maps line names.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"

namespace ember {

// Identity of a mapped file, from /proc/PID/maps: device (makedev(major, minor) of the maps
// line's "MM:mm" field, comparable with st_dev) and inode.
struct FileIdentity {
  uint64_t dev = 0;
  uint64_t inode = 0;
  bool operator==(const FileIdentity&) const = default;
};

// Where a process's file is opened.
struct FileLocation {
  FileLocation() = default;
  // A path of the agent's own mount namespace (the process shares it, or has exited and the path
  // names the same file here).
  FileLocation(std::string own_path) : path(std::move(own_path)) {}  // NOLINT: implicit
  FileLocation(const char* own_path) : path(own_path) {}             // NOLINT: implicit
  FileLocation(std::string root_dir, std::string inside, std::optional<FileIdentity> id = {},
               std::string map_files = {})
      : root(std::move(root_dir)),
        path(std::move(inside)),
        mapped_file(std::move(map_files)),
        identity(id) {}

  // The directory `path` is resolved in, as the process's "/" (/proc/PID/root): absolute links
  // and ".." stay inside it. Empty: the agent's own root (and a relative path is relative to its
  // working directory).
  std::string root;
  std::string path;
  // /proc/PID/map_files/START-END of the mapping, tried first: it is the mapped file itself,
  // deleted or not, but opening it needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE.
  std::string mapped_file;
  // The file opened must be this one (what the maps line says), when set.
  std::optional<FileIdentity> identity;

  // Nothing to open the file through (its process is gone).
  bool empty() const { return path.empty() && mapped_file.empty(); }
  // For messages: the root and path joined.
  std::string Display() const;
};

// Why an open was refused although the file may exist: the workload put something else there.
enum class OpenRefusal : uint8_t {
  kNotRegular,        // a FIFO, socket, device or directory
  kIdentityMismatch,  // not the device and inode its maps line names
  kMagicLink,         // a /proc magic link on the way (ELOOP under RESOLVE_NO_MAGICLINKS)
  kEscapesRoot,       // resolution would leave the root (EXDEV)
  kBadDebugLink,      // a .gnu_debuglink that is not a plain file name
};
inline constexpr size_t kOpenRefusalKinds = 5;
absl::string_view OpenRefusalName(OpenRefusal refusal);

// Refusals since the agent started, by kind; counted by OpenUntrusted and by its callers that
// refuse a name before opening (RecordOpenRefusal). Shared by every reader, read by /metrics.
uint64_t OpenRefusalCount(OpenRefusal refusal);
void RecordOpenRefusal(OpenRefusal refusal);

// The refusal a Status from OpenUntrusted carries; nullopt for plain failures (no such file,
// no permission, the process is gone).
std::optional<OpenRefusal> RefusalOf(const absl::Status& status);

struct UntrustedFile {
  UniqueFd fd;
  struct stat st;
};

// Opens `location` read-only with O_NONBLOCK|O_NOCTTY|O_CLOEXEC, by openat2 with
// RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS under its root (map_files, when set and permitted, as
// is: it is a magic link by nature), then checks that it is a regular file and, when the
// location has one, of the expected identity. Never blocks. Errors name the path and the
// refusal; a refusal is counted.
absl::StatusOr<UntrustedFile> OpenUntrusted(const FileLocation& location);

// .gnu_debuglink names a file by its name alone: no '/', not "." or "..", not empty, at most
// kMaxDebugLinkName bytes, no control bytes.
inline constexpr size_t kMaxDebugLinkName = 255;
bool IsPlainDebugLinkName(absl::string_view name);

// Where gdb looks for the debug file a binary at `binary_path` (absolute, in its process's
// namespace) names by .gnu_debuglink `link`: next to it, in its .debug/, and under `debug_dir`
// + its directory. Empty when `link` is not a plain name or `binary_path` is not absolute.
// Candidates equal to the binary itself are left out.
std::vector<std::string> DebugLinkCandidates(absl::string_view binary_path, absl::string_view link,
                                             absl::string_view debug_dir);

}  // namespace ember
