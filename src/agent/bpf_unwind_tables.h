// Gives the BPF program's stack walk (docs/bpf-unwinding.md) the CFI rows of the files processes
// map, and where each process maps them. A file's rows are loaded once, shared by every process
// that maps it, and their room in the row map is reused once no process has mapped it for a while.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/sample_record_layout.h"
#include "symbolize/elf_module.h"
#include "unwind/dwarf_unwinder.h"
#include "unwind/elf_image.h"

namespace ember {

// The BPF maps the walk reads (bpf_profiler.cc writes them; tests stand in).
class UnwindMaps {
 public:
  virtual ~UnwindMaps() = default;
  // Rows [first, first + rows.size()) of `unwind_rows`.
  virtual absl::Status WriteRows(uint32_t first, std::span<const ember_unwind_row> rows) = 0;
  virtual absl::Status SetProcess(uint32_t pid, const ember_unwind_proc& proc) = 0;
  virtual void RemoveProcess(uint32_t pid) = 0;
};

// A file's rows and how its mappings place it.
struct FileUnwindTable {
  std::vector<ember_unwind_row> rows;
  LoadLayout layout;
};

struct BpfUnwindTablesStats {
  size_t files_loaded = 0;       // files whose rows are in the map
  size_t files_without_rows = 0;  // files whose table could not be built or placed
  size_t rows_used = 0;
  size_t rows_capacity = 0;
  size_t processes = 0;
  uint64_t tables_built = 0;  // since start
  uint64_t out_of_room = 0;   // tables that did not fit in the row map
  std::chrono::nanoseconds build_time{0};  // building and writing tables, since start
};

class BpfUnwindTables {
 public:
  // Builds one file's table; the default reads the file (unwind_table.h).
  using TableSource = std::function<absl::StatusOr<FileUnwindTable>(const ExecutableMapping&)>;
  static absl::StatusOr<FileUnwindTable> TableOfFile(const ExecutableMapping& mapping);

  BpfUnwindTables(UnwindMaps& maps, uint32_t row_capacity, TableSource source = TableOfFile);

  // Gives the walk process `pid`'s executable mappings in place of what it had, loading the
  // rows of files not loaded yet. Mappings of files without rows are left out: the agent
  // unwinds frames in them from the sample's snapshot.
  void SetProcess(uint32_t pid, const std::vector<ExecutableMapping>& mappings);
  void RemoveProcess(uint32_t pid);
  // Frees the rows of files that no process has mapped for `keep_generations` generations, and
  // forgets failed files as long unused. Called once per export interval.
  void NextGeneration(int keep_generations = 3);

  BpfUnwindTablesStats stats() const;

 private:
  struct File {
    bool has_rows = false;
    uint32_t first_row = 0;
    uint32_t row_count = 0;
    LoadLayout layout;
    int processes = 0;  // processes whose entry names the file
    uint64_t last_generation = 0;
  };
  File& Load(const FileIdentity& key, const ExecutableMapping& mapping);
  // Room for `rows` rows in the row map, freeing unused files' rows if needed.
  bool Allocate(uint32_t rows, uint32_t* first);
  void Free(uint32_t first, uint32_t count);
  void Release(const std::vector<FileIdentity>& files);

  UnwindMaps& maps_;
  const uint32_t row_capacity_;
  TableSource source_;
  uint64_t generation_ = 0;
  absl::flat_hash_map<FileIdentity, File, FileIdentityHash> files_;
  absl::flat_hash_map<uint32_t, std::vector<FileIdentity>> processes_;  // the files each names
  std::map<uint32_t, uint32_t> free_;  // free runs of the row map: first row -> count
  size_t rows_used_ = 0;
  uint64_t tables_built_ = 0;
  uint64_t out_of_room_ = 0;
  std::chrono::nanoseconds build_time_{0};
};

}  // namespace ember
