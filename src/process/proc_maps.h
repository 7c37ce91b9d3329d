// Parses /proc/PID/maps text into mappings. Pure: takes bytes, so tests run on fixtures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/mapping.h"
#include "symbolize/elf_module.h"

namespace ember {

// Stands for a path longer than the limit. A path is what a workload chooses: at up to PATH_MAX
// (4 KiB) on each of tens of thousands of mappings, whole paths would cost hundreds of MiB. A cut
// path would name another file (or none), so the mapping keeps its range, offset and file
// identity but not its path: it is no file to open (IsFileBacked is false, as the marker does not
// start with '/') and its frames are named by the marker. No library's real path is that long.
inline constexpr absl::string_view kLongPathMarker = "[long path]";

struct ProcMapsStats {
  uint64_t long_paths = 0;        // paths over max_path_bytes, replaced by kLongPathMarker
  uint64_t dropped_mappings = 0;  // executable mappings over max_mappings, not kept
};

// Parses maps text fed in pieces as they are read, keeping no line longer than it takes to parse
// it: the whole text of a process with tens of thousands of mappings of long paths is tens of MiB.
class ProcMapsParser {
 public:
  // `executable_only`: mappings that are not executable are not kept either (the process table
  // wants no others). A path longer than `max_path_bytes` becomes kLongPathMarker.
  explicit ProcMapsParser(size_t max_path_bytes = SIZE_MAX, bool executable_only = false);

  // After a malformed line, the rest is ignored.
  void Append(absl::string_view bytes);
  // The mappings of every line (the last need not end in a newline), in the text's order; an
  // error naming the first malformed line.
  absl::StatusOr<std::vector<MemoryMapping>> Finish() &&;
  uint64_t bytes() const { return bytes_; }  // fed so far
  const ProcMapsStats& stats() const { return stats_; }

 private:
  void ParseOne(absl::string_view line);

  size_t max_path_bytes_;
  bool executable_only_;
  std::vector<MemoryMapping> mappings_;
  std::string partial_;  // an unfinished line
  uint64_t bytes_ = 0;
  int line_number_ = 0;
  absl::Status error_;
  ProcMapsStats stats_;
};

// Parses every line; returns an error naming the first malformed line. Mappings come back in the
// file's order (ascending addresses). A path longer than `max_path_bytes` becomes
// kLongPathMarker (and is counted in `stats` when given).
absl::StatusOr<std::vector<MemoryMapping>> ParseProcMaps(absl::string_view text,
                                                         size_t max_path_bytes = SIZE_MAX,
                                                         ProcMapsStats* stats = nullptr);

// The executable mappings of `all`, at most `max_mappings` of them, in ascending order. Over the
// limit, mappings of `executable_path` (the program itself) are kept first, then other files' and
// the vDSO, then the rest (anonymous JIT code, which a JIT's perf map names whether or not it is
// mapped here: src/runtimes/perf_map), each in address order; the others are counted in
// stats->dropped_mappings.
std::vector<MemoryMapping> KeepExecutableMappings(std::vector<MemoryMapping> all,
                                                  absl::string_view executable_path,
                                                  size_t max_mappings, ProcMapsStats* stats);

// Estimated heap bytes `mappings` hold: the vector's capacity in MemoryMapping objects plus the
// heap blocks of paths too long for the string's inline buffer.
size_t MappingsBytes(const std::vector<MemoryMapping>& mappings);

}  // namespace ember
