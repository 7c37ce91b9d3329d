// Temp file + fsync + rename: the rename is atomic within one file system, so the temp file is
// created in the destination's own directory.
#include "output/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ember {
namespace {

absl::Status ErrnoError(const char* what, const std::string& path, int err) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " ", path, ": ", std::strerror(err)));
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  // The pid keeps two agents writing into the same directory from sharing a temp file.
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp, errno);

  auto fail = [&](const char* what) {
    const int err = errno;
    close(fd);
    unlink(tmp.c_str());
    return ErrnoError(what, tmp, err);
  };
  const char* data = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    ssize_t n = write(fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("cannot write");
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  // Without the sync a crash right after the rename could leave an empty file under the final
  // name on some file systems.
  if (fsync(fd) != 0) return fail("cannot sync");
  if (close(fd) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return ErrnoError("cannot close", tmp, err);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return ErrnoError("cannot rename temporary file to", path, err);
  }
  return absl::OkStatus();
}

}  // namespace ember
