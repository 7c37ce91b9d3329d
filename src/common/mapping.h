// One mapping of a process's memory, as a line of /proc/PID/maps states it: the one type the
// process table keeps, the unwinders place files by and the runtimes detect interpreters from.
#pragma once

#include <cstdint>
#include <string>

#include "common/address.h"
#include "common/untrusted_open.h"

namespace ember {

struct MemoryMapping {
  uint64_t start = 0;  // process virtual addresses [start, end)
  uint64_t end = 0;
  uint64_t offset = 0;  // file offset of `start`
  bool readable = false;
  bool executable = false;
  FileIdentity file;  // dev and inode; inode 0 for anonymous memory
  // As the kernel shows it, without a " (deleted)" suffix; the maps parser's long-path marker
  // when it was longer than the parse's max_path_bytes.
  std::string path;
  bool deleted = false;

  bool Contains(ProcessAddress addr) const { return addr.value >= start && addr.value < end; }
  // The one place a process address becomes a file offset.
  FileOffset ToFileOffset(ProcessAddress addr) const {
    return FileOffset{addr.value - start + offset};
  }
  // Backed by a regular file, not [vdso], [heap], anonymous or memfd memory.
  bool IsFileBacked() const { return file.inode != 0 && !path.empty() && path[0] == '/'; }
  bool IsVdso() const { return path == "[vdso]"; }
};

// A mapping as it is handed to a reader of its file (the unwinders), with where that file is
// opened now: its map_files entry, its path under the process's root, or nothing once the process
// has gone. Made when handed over, never kept in the process table: how a file is reached changes
// as its process lives and exits, and three paths per mapping would double the table's bytes.
struct ExecutableMapping : MemoryMapping {
  FileLocation open_path;
};

}  // namespace ember
