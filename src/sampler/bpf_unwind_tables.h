// Gives the BPF program's stack walk (docs/bpf-unwinding.md) the CFI rows of the files processes
// map, and where each process maps them. A file's rows are loaded once, shared by every process
// that maps it, and their room in the row map is reused once no process has mapped it for a while.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "process/process_events.h"
#include "process/process_table.h"
#include "sampler/bpf_profiler.h"
#include "sampler/sample_record_layout.h"
#include "sampler/unwind_maps.h"
#include "symbolize/elf_module.h"
#include "unwind/dwarf_unwinder.h"
#include "unwind/elf_image.h"

namespace ember {

// A file's rows and how its mappings place it.
struct FileUnwindTable {
  std::vector<ember_unwind_row> rows;
  LoadLayout layout;
};

struct BpfUnwindTablesStats {
  size_t files_loaded = 0;        // files whose rows are in the map
  size_t files_without_rows = 0;  // files whose table could not be built, or did not fit
  size_t files_queued = 0;        // waiting for BuildPending
  size_t files_unwanted = 0;      // waiting for enough short walks to build (WalkFellShort)
  size_t rows_used = 0;
  size_t rows_capacity = 0;
  size_t processes = 0;
  uint64_t tables_built = 0;    // since start
  uint64_t out_of_room = 0;     // tables that did not fit in the row map
  uint64_t dropped_exited = 0;  // queued files not built: every process mapping them had exited
  std::chrono::nanoseconds build_time{0};  // building and writing tables, since start
};

// How many samples whose stacks the BPF walk left to the agent must run through a file without
// rows (WalkFellShort) before its table is queued for building: `min_short_walks`, and one more
// for each `code_bytes_per_short_walk` bytes of the file's code (0: the minimum alone). Until then
// the agent unwinds those samples from their snapshots. A process sampled now and then (a daemon
// that wakes up, a shell, a cron job) so costs a few snapshot unwinds instead of a few ms of
// builds per file (0.25 to 1 µs a row, about one row per 50 bytes of code), and a big binary busy
// only for a moment waits for more samples than it has: libLLVM (948,864 rows) 1,025. The scale
// keeps libc at 17: the agent reads a new process's samples at once while it settles (its first
// 100 ms), then every 5 s, and a busy process's libc should be built in the first of those.
struct TableBuildThreshold {
  int min_short_walks = 4;                       // 0: every file is queued at once
  uint64_t code_bytes_per_short_walk = 100'000;  // about 2,000 rows
};

class BpfUnwindTables {
 public:
  // Builds one file's table; the default reads the file (unwind_table.h).
  using TableSource = std::function<absl::StatusOr<FileUnwindTable>(const ExecutableMapping&)>;
  static absl::StatusOr<FileUnwindTable> TableOfFile(const ExecutableMapping& mapping);
  // Whether process `pid` still runs; the default looks for /proc/PID. Asked only of processes
  // the process table has not reported exited (RemoveProcess), before a build (BuildPending).
  using ProcessAlive = std::function<bool(uint32_t pid)>;
  static bool ProcessExists(uint32_t pid);

  using BuildThreshold = TableBuildThreshold;

  // Building tables may take at most `build_share` of the agent's time (BuildPending): a burst of
  // new big binaries must not stall sampling or cost a core.
  BpfUnwindTables(UnwindMaps& maps, uint32_t row_capacity, TableSource source = TableOfFile,
                  double build_share = 0.05, ProcessAlive alive = ProcessExists,
                  BuildThreshold threshold = {});

  // Gives the walk process `pid`'s executable mappings in place of what it had. Files whose rows
  // are loaded are in its entry at once. The others wait until enough samples have needed them
  // (WalkFellShort, BuildThreshold), then are queued for BuildPending; until then (or for good,
  // when a file has no usable table) the agent unwinds their frames from the snapshot.
  void SetProcess(uint32_t pid, const std::vector<ExecutableMapping>& mappings);
  // A sample of process `pid` whose stack the BPF walk did not take to the thread's first frame,
  // with the user frames the sample has (`pcs`, leaf first; 0 for a marker): those it walked and
  // those the agent unwound after it, or the frame-pointer walk of a process without an entry.
  // Counts once towards building each file without rows that its frames run through (a run of
  // frames in one file counts once); frames in files with rows or in memory that is no file (JIT
  // code) count for none.
  void WalkFellShort(uint32_t pid, std::span<const uint64_t> pcs);
  // The process exited (the process table's event). A queued file that no process maps any more
  // is dropped at once, unbuilt (dropped_exited): a short-lived process, such as a probe's curl,
  // would otherwise have every library it maps built, and built again each time it runs once the
  // rows were freed.
  void RemoveProcess(uint32_t pid);
  // Builds queued tables, oldest first, while within the time share, and updates the entries of
  // the processes that map them. The process table reports exits only at its DropExited (once an
  // export interval) while the time share spreads a burst of queued builds over seconds, so a
  // process may have exited unreported by the time its file's turn comes: before a build, the
  // processes that map the file are asked whether they still run (ProcessAlive), and the exited
  // ones are removed as RemoveProcess does, which drops the file when none is left. Returns how
  // many it built.
  int BuildPending(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
  size_t pending() const { return pending_.size(); }
  // When BuildPending may build the next queued table (the time share allows it).
  std::chrono::steady_clock::time_point next_build_at() const { return next_build_at_; }
  // Frees the rows of files that no process has mapped for `keep_generations` generations, and
  // forgets failed files as long unused. Called once per export interval.
  void NextGeneration(int keep_generations = 3);

  BpfUnwindTablesStats stats() const;
  std::chrono::nanoseconds build_time() const { return build_time_; }  // as in stats()
  // The run's line on the BPF walk: how its stacks ended (`bpf`, the program's counters) and
  // what the tables held.
  void LogSummary(const BpfStats& bpf) const;

 private:
  struct File {
    enum class State { kUnwanted, kQueued, kLoaded, kNoRows };
    State state = State::kQueued;
    int short_walks = 0;     // samples whose frames ran through it while kUnwanted
    int walks_to_build = 0;  // how many make it kQueued (BuildThreshold)
    uint32_t first_row = 0;  // its buckets start at the same index
    uint32_t row_count = 0;
    uint64_t table_base = 0;
    uint32_t bucket_count = 0;
    uint8_t bucket_shift = 0;
    LoadLayout layout;
    ExecutableMapping opened_as;  // how to open it while queued
    int processes = 0;            // processes that map it
    uint64_t last_generation = 0;
  };
  struct Process {
    std::vector<ExecutableMapping> mappings;  // file-backed (or the vDSO), ascending by start
    std::vector<FileIdentity> files;          // the distinct files among them
    // Whether some of `files` wait for samples (kUnwanted): WalkFellShort does nothing for a
    // process without, such as one whose stacks always stop at JIT code.
    bool has_unwanted = false;
  };
  // Sets has_unwanted of the processes that map `key` afresh, the file having left kUnwanted.
  void UpdateHasUnwanted(const FileIdentity& key);
  int WalksToBuild(uint64_t code_bytes) const;  // BuildThreshold's figure for a file
  void Build(const FileIdentity& key);
  // Removes the processes mapping the file that exited since the table's last report, up to the
  // first that still runs.
  void RemoveUnreportedExits(const FileIdentity& key);
  // Writes the process's entry from the files loaded now.
  void WriteEntry(uint32_t pid, const Process& process);
  // Room for `rows` rows in the row map, freeing unused files' rows if needed.
  bool Allocate(uint32_t rows, uint32_t* first);
  void Free(uint32_t first, uint32_t count);
  void Release(const std::vector<FileIdentity>& files);

  UnwindMaps& maps_;
  const uint32_t row_capacity_;
  TableSource source_;
  const double build_share_;
  ProcessAlive alive_;
  const BuildThreshold threshold_;
  std::chrono::steady_clock::time_point next_build_at_{};
  uint64_t generation_ = 0;
  absl::flat_hash_map<FileIdentity, File, FileIdentityHash> files_;
  absl::flat_hash_map<uint32_t, Process> processes_;
  std::deque<FileIdentity> pending_;   // files in kQueued, oldest first
  std::map<uint32_t, uint32_t> free_;  // free runs of the row map: first row -> count
  size_t rows_used_ = 0;
  uint64_t tables_built_ = 0;
  uint64_t out_of_room_ = 0;
  uint64_t dropped_exited_ = 0;
  std::chrono::nanoseconds build_time_{0};
};

// Keeps the walk's processes those of the process table: their mappings set at each read of their
// maps, removed when the table says they exited, which drops the queued builds that were theirs
// alone. BpfUnwindTables::BuildPending still asks after processes the table has not reported yet,
// as a build costs milliseconds and the table reports exits once an export interval.
class BpfUnwindTablesFeed final : public ProcessEvents {
 public:
  BpfUnwindTablesFeed(const ProcessTable& table, BpfUnwindTables& tables)
      : table_(table), tables_(tables) {}
  void OnMapsChanged(const Process& process) override {
    tables_.SetProcess(process.pid, UnwindMappingsOf(table_, process));
  }
  void OnExited(uint32_t pid) override { tables_.RemoveProcess(pid); }

 private:
  const ProcessTable& table_;
  BpfUnwindTables& tables_;
};

}  // namespace ember
