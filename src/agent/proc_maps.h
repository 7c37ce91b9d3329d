// Parses /proc/PID/maps text into mappings. Pure: takes bytes, so tests run on fixtures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "symbolize/address.h"
#include "symbolize/elf_module.h"

namespace ember {

struct MemoryMapping {
  uint64_t start = 0;  // process virtual addresses [start, end)
  uint64_t end = 0;
  uint64_t offset = 0;  // file offset of `start`
  bool readable = false;
  bool executable = false;
  FileIdentity file;  // dev and inode; inode 0 for anonymous memory
  std::string path;   // as the kernel shows it, without a " (deleted)" suffix
  bool deleted = false;

  bool Contains(ProcessAddress addr) const { return addr.value >= start && addr.value < end; }
  // The one place a process address becomes a file offset.
  FileOffset ToFileOffset(ProcessAddress addr) const {
    return FileOffset{addr.value - start + offset};
  }
  // Backed by a regular file, not [vdso], [heap], anonymous or memfd memory.
  bool IsFileBacked() const { return file.inode != 0 && !path.empty() && path[0] == '/'; }
};

// Parses every line; returns an error naming the first malformed line. Mappings come back in the
// file's order (ascending addresses).
absl::StatusOr<std::vector<MemoryMapping>> ParseProcMaps(absl::string_view text);

}  // namespace ember
