// Reading a whole small file (/proc and /sys entries, configuration) with read(2), without
// exceptions: libstdc++'s filebuf throws when read() fails mid-file, which a /proc/PID file does
// (ESRCH) when its process exits between open and read.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <optional>
#include <string>

namespace ember {

// The bytes of the open file `fd` from its current position to its end; nullopt when a read
// fails or the file holds more than `max_bytes`. Does not close `fd`.
inline std::optional<std::string> ReadWholeFd(int fd, size_t max_bytes = size_t{64} << 20) {
  std::string text;
  char buffer[8192];
  while (true) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) return text;
    if (text.size() + static_cast<size_t>(n) > max_bytes) return std::nullopt;
    text.append(buffer, static_cast<size_t>(n));
  }
}

// The whole file at `path`; nullopt when it cannot be opened or read, or is larger than
// `max_bytes`.
inline std::optional<std::string> ReadWholeFile(const std::string& path,
                                                size_t max_bytes = size_t{64} << 20) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> text = ReadWholeFd(fd, max_bytes);
  close(fd);
  return text;
}

}  // namespace ember
