// OpenUntrusted: openat2 under the process's root, never blocking, regular files of the expected
// identity only; and the .gnu_debuglink name rules.
#include "common/untrusted_open.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace ember {
namespace {

constexpr absl::string_view kRefusalPayload = "ember.OpenRefusal";

std::array<std::atomic<uint64_t>, kOpenRefusalKinds>& RefusalCounters() {
  static std::array<std::atomic<uint64_t>, kOpenRefusalKinds> counters{};
  return counters;
}

absl::Status Refuse(OpenRefusal refusal, const FileLocation& location, absl::string_view what) {
  RecordOpenRefusal(refusal);
  absl::Status status = absl::FailedPreconditionError(
      absl::StrCat(location.Display(), ": refused (", OpenRefusalName(refusal), "): ", what));
  status.SetPayload(kRefusalPayload, absl::Cord(OpenRefusalName(refusal)));
  return status;
}

absl::Status ErrnoStatus(int err, const FileLocation& location) {
  std::string message = absl::StrCat("cannot open ", location.Display(), ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
    case ESRCH:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

int OpenAt2(int dirfd, const char* path, uint64_t resolve) {
  struct open_how how {};
  how.flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  how.resolve = resolve;
  // EAGAIN: a rename raced with ".." resolution under RESOLVE_IN_ROOT and the kernel asks for a
  // retry. Bounded: a workload can keep renaming.
  int fd = -1;
  for (int attempt = 0; attempt < 4; ++attempt) {
    fd = static_cast<int>(syscall(SYS_openat2, dirfd, path, &how, sizeof(how)));
    if (fd >= 0 || (errno != EINTR && errno != EAGAIN)) break;
  }
  return fd;
}

absl::StatusOr<UntrustedFile> CheckOpened(UniqueFd fd, const FileLocation& location) {
  UntrustedFile file;
  if (fstat(fd.get(), &file.st) != 0) return ErrnoStatus(errno, location);
  if (!S_ISREG(file.st.st_mode)) {
    return Refuse(OpenRefusal::kNotRegular, location, "not a regular file");
  }
  if (location.identity.has_value() &&
      (file.st.st_dev != location.identity->dev || file.st.st_ino != location.identity->inode)) {
    return Refuse(OpenRefusal::kIdentityMismatch, location,
                  "not the file its process mapped (device or inode differ)");
  }
  file.fd = std::move(fd);
  return file;
}

absl::StatusOr<UntrustedFile> OpenFailed(int err, const FileLocation& location) {
  if (err == ELOOP) {
    return Refuse(OpenRefusal::kMagicLink, location, "a /proc magic link or a loop of links");
  }
  if (err == EXDEV) return Refuse(OpenRefusal::kEscapesRoot, location, "escapes its root");
  return ErrnoStatus(err, location);
}

}  // namespace

std::string FileLocation::Display() const {
  if (root.empty()) return path.empty() ? mapped_file : path;
  return absl::StrCat(root, path.empty() || path.front() != '/' ? "/" : "", path);
}

absl::string_view OpenRefusalName(OpenRefusal refusal) {
  switch (refusal) {
    case OpenRefusal::kNotRegular:
      return "not_regular";
    case OpenRefusal::kIdentityMismatch:
      return "identity_mismatch";
    case OpenRefusal::kMagicLink:
      return "magic_link";
    case OpenRefusal::kEscapesRoot:
      return "escapes_root";
    case OpenRefusal::kBadDebugLink:
      return "bad_debuglink";
  }
  return "unknown";
}

uint64_t OpenRefusalCount(OpenRefusal refusal) {
  return RefusalCounters()[static_cast<size_t>(refusal)].load(std::memory_order_relaxed);
}

void RecordOpenRefusal(OpenRefusal refusal) {
  RefusalCounters()[static_cast<size_t>(refusal)].fetch_add(1, std::memory_order_relaxed);
}

std::optional<OpenRefusal> RefusalOf(const absl::Status& status) {
  auto payload = status.GetPayload(kRefusalPayload);
  if (!payload.has_value()) return std::nullopt;
  for (size_t kind = 0; kind < kOpenRefusalKinds; ++kind) {
    if (*payload == OpenRefusalName(static_cast<OpenRefusal>(kind))) {
      return static_cast<OpenRefusal>(kind);
    }
  }
  return std::nullopt;
}

absl::StatusOr<UntrustedFile> OpenUntrusted(const FileLocation& location) {
  if (location.empty()) return absl::NotFoundError("no path to open the file through");
  if (!location.mapped_file.empty()) {
    // The mapping's own file: a magic link, so no RESOLVE_NO_MAGICLINKS.
    int fd = OpenAt2(AT_FDCWD, location.mapped_file.c_str(), 0);
    if (fd >= 0) return CheckOpened(UniqueFd(fd), location);
    // Not permitted, or the mapping has changed since: the path under the root, if any.
    if (location.path.empty()) return OpenFailed(errno, location);
  }
  if (location.root.empty()) {
    int fd = OpenAt2(AT_FDCWD, location.path.c_str(), RESOLVE_NO_MAGICLINKS);
    if (fd < 0) return OpenFailed(errno, location);
    return CheckOpened(UniqueFd(fd), location);
  }
  // The root itself is the agent's own path (/proc/PID/root: a magic link the agent means to
  // follow); everything under it is the process's.
  UniqueFd root(open(location.root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (root.get() < 0) return ErrnoStatus(errno, location);
  int fd = OpenAt2(root.get(), location.path.c_str(), RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
  if (fd < 0) return OpenFailed(errno, location);
  return CheckOpened(UniqueFd(fd), location);
}

bool IsPlainDebugLinkName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxDebugLinkName || name == "." || name == "..") {
    return false;
  }
  for (char c : name) {
    if (c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

std::vector<std::string> DebugLinkCandidates(absl::string_view binary_path, absl::string_view link,
                                             absl::string_view debug_dir) {
  std::vector<std::string> candidates;
  if (!IsPlainDebugLinkName(link) || binary_path.empty() || binary_path.front() != '/') {
    return candidates;
  }
  absl::string_view dir = binary_path.substr(0, binary_path.rfind('/'));  // "" for "/x"
  absl::string_view debug = debug_dir;
  while (debug.size() > 1 && debug.back() == '/') debug.remove_suffix(1);
  if (debug == "/") debug = "";
  for (std::string path : {absl::StrCat(dir, "/", link), absl::StrCat(dir, "/.debug/", link),
                           absl::StrCat(debug, dir, "/", link)}) {
    if (path != binary_path) candidates.push_back(std::move(path));
  }
  return candidates;
}

}  // namespace ember
