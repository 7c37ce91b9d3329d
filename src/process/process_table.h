// What the agent knows of each sampled process: its name and executable mappings, read from
// /proc under a configurable root (tests point it at a fixture tree).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/profile.h"
#include "k8s/container_id.h"
#include "process/proc_maps.h"
#include "process/process_events.h"
#include "symbolize/vdso.h"
#include "unwind/dwarf_unwinder.h"

namespace ember {

struct Process {
  uint32_t pid = 0;
  std::string name;  // /proc/PID/comm
  // The target of /proc/PID/exe (without a " (deleted)" suffix); empty when unreadable (a kernel
  // thread, or no permission).
  std::string executable_path;
  uint64_t start_time = 0;  // /proc/PID/stat field 22: tells a reused pid from the old process
  // Where its maps, exe and root were read: /proc/PID, or /proc/PID/task/TID of a live thread
  // when /proc/PID/maps reads empty or fails (the thread-group leader exited while other threads
  // run on; its maps, exe and root went with it).
  std::string proc_dir;
  // Executable mappings, ascending, within ProcessTableLimits' caps. Empty with mappings_evicted
  // when they were evicted to fit max_mapping_bytes: Get reads them again.
  std::vector<MemoryMapping> mappings;
  size_t mapping_bytes = 0;  // MappingsBytes(mappings)
  bool mappings_evicted = false;
  std::chrono::steady_clock::time_point maps_read_at;
  // Unique across the table and over time: changes with every re-read of the maps.
  uint64_t maps_version = 0;
  // The cgroup v2 id of its latest sample, and the container that cgroup (or, on hybrid hosts,
  // its v1 hierarchies) names; nullopt outside a container. Set by the agent from its samples.
  uint64_t cgroup_id = 0;
  std::optional<ContainerRef> container;
  uint64_t last_used = 0;  // the table's tick when Get last returned it: LRU order
  // The image its [vdso] mapping holds (64-bit, ia32 and x32 processes have different ones), read
  // from its memory at the first frame there; null when it could not be. `vdso_start` is the
  // mapping's start it was read at (0: not read): an exec maps another one.
  std::shared_ptr<const VdsoImage> vdso;
  uint64_t vdso_start = 0;
  // `execs` when the image was read: an exec maps a new vDSO, maybe at the same address.
  uint64_t vdso_execs = 0;
  // Reads of it since the mapping (or exec) changed, and when the last was: a failed read is
  // tried again a few times, at most once per the table's maps refresh interval.
  int vdso_reads = 0;
  std::chrono::steady_clock::time_point vdso_read_at;
  // Execs seen: its executable changed at a read of its maps, or ReloadAfterExec was told.
  uint64_t execs = 0;
  // The maps_version subscribers were last told of (ProcessTable::Publish); 0: none yet, so a
  // process read again after its eviction is published again, its maps as they are now.
  uint64_t published_maps_version = 0;

  const MemoryMapping* Find(ProcessAddress addr) const;
};

// Field 22 (starttime) of /proc/PID/stat; 0 when the text is malformed.
uint64_t ParseStatStartTime(absl::string_view stat);

struct ProcessTableLimits {
  // Processes held at once (--max-processes). A busy node runs a few thousand; the table holds
  // only those sampled since they were last dropped, each a few KiB.
  size_t max_processes = 4096;
  // A mapping's path longer than this is not kept (kLongPathMarker stands for it).
  size_t max_mapping_path_bytes = 1024;
  // Executable mappings kept per process (--max-mappings-per-process); see KeepExecutableMappings
  // for which are kept. A big JVM or browser maps a few hundred.
  size_t max_mappings_per_process = 4096;
  // Every process's kept mappings together, estimated by MappingsBytes (--max-mapping-bytes).
  size_t max_mapping_bytes = size_t{64} << 20;
};

// Counters since the table was made.
struct ProcessTableStats {
  uint64_t evicted = 0;             // processes dropped to stay within max_processes
  uint64_t mapping_long_paths = 0;  // mappings read whose path was over max_mapping_path_bytes
  uint64_t mappings_dropped = 0;  // executable mappings read but not kept: max_mappings_per_process
  uint64_t mapping_evictions = 0;  // processes whose mappings went to fit max_mapping_bytes
  uint64_t stat_reads = 0;         // reads of /proc/PID/stat: one per process at first sight and
                                   // one per process or evicted process at each DropExited
};

// /proc reads that failed for a sampled process, so its samples lost their user frames.
struct ProcReadFailures {
  uint64_t stat = 0;  // no /proc/PID/stat at first sight: the process exited (or is hidden)
  uint64_t maps = 0;  // neither /proc/PID/maps nor any of its threads' maps could be read
};

class ProcessTable {
 public:
  explicit ProcessTable(std::string proc_root = "/proc",
                        std::chrono::milliseconds min_refresh = std::chrono::milliseconds(500),
                        ProcessTableLimits limits = {});
  ~ProcessTable();
  ProcessTable(const ProcessTable&) = delete;
  ProcessTable& operator=(const ProcessTable&) = delete;

  // The process, read from /proc on first sight; nullptr when it cannot be read (already gone).
  // Reading a new one into a full table first evicts the least recently returned processes (a
  // sixty-fourth of the table at a time, so that the scan is rare): a pointer returned before
  // may dangle after the next Get of another pid. An evicted process that samples again is read
  // again; eviction is not an exit (see DropExited).
  Process* Get(uint32_t pid);
  // The process if the table holds it now: no /proc read, no LRU touch, no eviction.
  const Process* Find(uint32_t pid) const {
    auto it = processes_.find(pid);
    return it == processes_.end() ? nullptr : it->second.get();
  }
  // Re-reads the maps (and name) of a process that ran code at an address it does not know, at
  // most once per min_refresh so a stray address cannot turn every sample into a /proc read.
  bool RefreshMaps(Process* process);
  // Re-reads them now, whenever it was last done: the main thread's name changed, which is how an
  // exec shows, and every sample until a rate-limited refresh would use the old image's maps.
  bool ReloadMaps(Process* process) { return ReadMaps(process); }
  // As ReloadMaps, for a process that exec'd (maybe the same program): what was read of its
  // memory (its vDSO) is read again too.
  bool ReloadAfterExec(Process* process) {
    ++process->execs;
    return ReadMaps(process);
  }
  // Forgets processes that exited, or whose pid now belongs to another process, and tells the
  // subscribers (OnExited); one read of each process's stat, held or evicted. Returns how many.
  // An evicted process is remembered by its start time alone, so that its subscribers' state
  // (the BPF side's mark and unwind entry, a runtime's config, the unwinder's address space)
  // lasts as long as the process, not as long as its place in the table: forgetting it would make
  // its samples wake the agent and settle again, and lose its runtime frames, at every eviction.
  int DropExited();
  // Adds a subscriber of the table's events (told in the order they subscribed); not owned, it
  // must outlive the table's last event.
  void Subscribe(ProcessEvents* events) { subscribers_.push_back(events); }
  // Tells the subscribers of the maps read since the process was last published (OnMapsChanged),
  // once however many reads there were: called when a sample's reads of its process are done, so
  // that an exec's read and the settling read after it make one event. Its first publication is
  // its first sight.
  void Publish(Process* process) {
    if (process->published_maps_version == process->maps_version) return;
    process->published_maps_version = process->maps_version;
    for (ProcessEvents* events : subscribers_) events->OnMapsChanged(*process);
  }
  size_t size() const { return processes_.size(); }
  // Evicted processes not yet known to have exited.
  size_t evicted_size() const { return evicted_.size(); }
  // Whether `pid` was let go to stay within max_processes and is not known to have exited.
  bool WasEvicted(uint32_t pid) const { return evicted_.contains(pid); }
  const ProcessTableStats& stats() const { return stats_; }
  // Process::mapping_bytes of every process.
  size_t mapping_bytes() const { return mapping_bytes_; }
  const ProcessTableLimits& limits() const { return limits_; }
  std::chrono::milliseconds min_refresh() const { return min_refresh_; }
  // Where /proc is read: PID/... under it is a process's directory.
  const std::string& proc_root() const { return proc_root_; }
  const ProcReadFailures& read_failures() const { return read_failures_; }

  // Where to open a mapped file: its map_files entry (works for deleted files, needs
  // CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE), else its path under the process's root, both
  // checked to be the device and inode the maps line names (OpenUntrusted). Once the process
  // has gone, its path in the agent's own namespace when that is the same file, else an empty
  // location: the file cannot be reached now, and caches must not remember that as a fact
  // about the file (another process may map it).
  FileLocation OpenPath(const Process& process, const MemoryMapping& mapping) const;
  // The bytes of a mapping of the process (at most max_bytes), read from its /proc/PID/mem;
  // nullopt when it cannot be read (gone, or no ptrace access).
  std::optional<std::string> ReadMemory(const Process& process, const MemoryMapping& mapping,
                                        size_t max_bytes) const;

 private:
  std::unique_ptr<Process> Load(uint32_t pid);
  bool ReadMaps(Process* process);
  void EvictLeastRecentlyUsed();
  // Before a process leaves the table: its bytes leave the totals.
  void Untrack(Process* process);
  void SetMappings(Process* process, std::vector<MemoryMapping> mappings);
  // Evicts the mappings of the least recently sampled processes other than `keep` until the
  // kept mappings fit max_mapping_bytes.
  void EvictMappings(const Process* keep);
  std::string PidDir(uint32_t pid) const;
  // After the process left the table: no pointer to it remains for a subscriber to follow.
  void NotifyExited(uint32_t pid);
  // Remembers an evicted process until DropExited finds it gone, within the bound.
  void RememberEvicted(uint32_t pid, uint64_t start_time);
  // A process read anew: if it is the evicted one, it is forgotten as evicted with no event; if
  // its pid names another process now, the evicted one exited, which is told first.
  void ForgetEvicted(uint32_t pid, uint64_t start_time);

  std::string proc_root_;
  std::chrono::milliseconds min_refresh_;
  ProcessTableLimits limits_;
  std::unordered_map<uint32_t, std::unique_ptr<Process>> processes_;
  struct Evicted {
    uint64_t start_time = 0;
    uint64_t evicted_in = 0;  // evictions_ when it was evicted: the oldest go first past the bound
  };
  std::unordered_map<uint32_t, Evicted> evicted_;
  uint64_t evictions_ = 0;
  uint64_t maps_versions_ = 0;
  uint64_t tick_ = 0;
  size_t mapping_bytes_ = 0;
  ProcessTableStats stats_;
  ProcReadFailures read_failures_;
  std::vector<ProcessEvents*> subscribers_;
};

// A process's executable mappings as the unwinder takes them, each with the path to open it by.
std::vector<ExecutableMapping> UnwindMappingsOf(const ProcessTable& table, const Process& process);

}  // namespace ember
