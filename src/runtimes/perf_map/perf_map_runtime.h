// Code that lies in no file, named from what its JIT writes: the perf map (/tmp/perf-PID.map, as
// perf reads it) and the jitdump (jit-PID.dump). Any runtime that writes either (node --perf-*,
// a JVM with perf-map-agent or jcmd Compiler.perfmap, .NET with DOTNET_PerfMapEnabled) is named
// this way, behind the runtime interface (runtimes/runtime.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/profile.h"
#include "common/untrusted_open.h"
#include "process/process_table.h"
#include "runtimes/runtime.h"
#include "status/metrics_registry.h"
#include "symbolize/jitdump.h"
#include "symbolize/perf_map.h"

namespace ember {

// The runtime whose JIT writes a process's perf map, told by its executable's name or the runtime
// library it maps (node/libnode: kV8Js, java/libjvm: kJvm, dotnet/libcoreclr: kDotnet); else kJit.
FrameKind JitKindOf(const Process& process);

struct PerfMapRuntimeLimits {
  PerfMapLimits per_process = {};  // each perf map and jitdump (--max-perf-map-bytes)
  // Every process's perf maps and jitdumps together (--max-perf-map-total-bytes). A read may pass
  // it by up to one map's limit until the read ends and the largest maps are shed.
  size_t max_total_bytes = size_t{256} << 20;
  // Reads of a process's perf map and jitdump are at least this far apart. Shorter than the
  // maps' refresh: a read costs three system calls plus the new lines, and until it happens
  // samples in fresh JIT code go unnamed.
  std::chrono::milliseconds min_refresh = std::chrono::milliseconds(100);
};

// Counters since the runtime was made.
struct PerfMapRuntimeStats {
  uint64_t entries_evicted = 0;  // entries evicted at a process's limit or the total budget
  uint64_t evictions = 0;        // times a process's perf map or jitdump reached its limit
  // Times every perf map together reached max_total_bytes and the largest map lost its oldest
  // half (its entries count in entries_evicted too).
  uint64_t budget_evictions = 0;
  uint64_t frames_named = 0;  // frames named from a perf map or jitdump (cached by the resolver)
};

// What is known of one process's JIT code.
struct JitNames {
  // Null until the runtime first looks (an address in code outside any file), then kept, missing
  // file or not, until the process goes or execs. Shared by the processes whose maps are one
  // file (device and inode), read and held once; it is then named as the first of them to read
  // it named it.
  std::shared_ptr<PerfMapFile> perf_map;
  FileLocation perf_map_location;  // where its own perf map is opened
  std::string perf_map_name;       // how the process names it: /tmp/perf-NSPID.map
  std::chrono::steady_clock::time_point perf_map_read_at;
  FrameKind kind = FrameKind::kJit;  // the runtime that writes the perf map, where it shows
  // From the jitdump it announced by mapping it (jit-PID.dump, wherever it lies, as perf finds
  // it), else /tmp/jit-NSPID.dump; null until Refresh finds one.
  std::unique_ptr<JitDumpFile> jitdump;
  uint32_t namespace_pid = 0;  // its pid in its own pid namespace, once Refresh read it
  // The program they name: an exec drops them. Process::execs counts the execs the table saw,
  // but starts again when a process evicted from the table is read again (maybe after an exec
  // while it was out): the executable tells that exec.
  uint64_t execs = 0;
  std::string executable_path;
};

class PerfMapRuntime final : public Runtime {
 public:
  // Registers ember_perf_map_bytes, ember_perf_map_entries_evicted_total,
  // ember_perf_map_budget_evictions_total and ember_jitdump_refusals_total in `metrics`.
  // `processes` must outlive the runtime: it tells where a process's files are opened.
  PerfMapRuntime(const ProcessTable& processes, MetricsRegistry& metrics,
                 PerfMapRuntimeLimits limits = {});
  ~PerfMapRuntime() override;

  // An exec: the perf map and its runtime are the new program's, found again when needed.
  void ProcessMapsChanged(const Process& process) override;
  void ProcessExited(uint32_t pid) override;
  void Splice(const Process&, const SampleView&, UserFrames) override {}
  // The perf map names the address, else the jitdump; each is read again (rate-limited) when
  // neither does: the runtime may have appended it since the last read.
  const Frame* NameCodeOutsideFiles(const Process& process, ProcessAddress address,
                                    CodeFrameCache& frames) override;
  // Maps whose file was replaced stay filed under the old one until their processes go.
  void NextGeneration() override;
  void SyncMetrics() override;
  void LogSummary(const BpfStats& bpf) const override;
  // PerfMap::EstimatedBytes of every process's perf map and jitdump, kept up to date as they are
  // read.
  size_t HeldBytes() const override { return bytes_; }

  // Reads what the process appended to its perf map and its jitdump since the last call, at most
  // once per min_refresh; the first call finds the map (/tmp/perf-NSPID.map under
  // /proc/PID/root, with the pid the process has in its own namespace) and the runtime. True
  // when anything was read. Both count in the budgets, each with a process's limit.
  bool Refresh(const Process& process);
  // What is known of the process's JIT code; null before its first look.
  const JitNames* Find(uint32_t pid) const {
    auto it = processes_.find(pid);
    return it == processes_.end() ? nullptr : it->second.get();
  }
  const PerfMapRuntimeStats& stats() const { return stats_; }
  const PerfMapRuntimeLimits& limits() const { return limits_; }

 private:
  // The process's names, made at its first look or after an exec.
  JitNames& NamesOf(const Process& process);
  bool Refresh(const Process& process, JitNames& names);
  // Forgets a process's perf map (its bytes leave bytes_), not its jitdump: swapping to a map
  // another process shares, or back to its own, leaves the jitdump as it is.
  void DropPerfMap(JitNames& names);
  // Forgets a process's jitdump (its bytes leave bytes_).
  void DropJitDump(JitNames& names);
  // Forgets all of a process's names: it exec'd or exited.
  void Forget(uint32_t pid);
  // Finds (when not yet found) and reads the process's jitdump; true when anything was read.
  bool RefreshJitDump(const Process& process, JitNames& names);
  // Sheds the oldest half of the largest perf maps until every map together fits
  // max_total_bytes.
  void Shed();
  std::string PidDir(uint32_t pid) const;

  const ProcessTable& table_;
  PerfMapRuntimeLimits limits_;
  // By pid. Nodes: a JitNames stays where it is while others come and go.
  std::unordered_map<uint32_t, std::unique_ptr<JitNames>> processes_;
  // The process last looked up: a sample's frames in JIT code are one process's, one after the
  // other, so most lookups need no hash.
  uint32_t last_pid_ = 0;
  JitNames* last_ = nullptr;
  size_t bytes_ = 0;
  // Every perf map read, by the file it read: a process whose map is the same file shares it.
  std::map<std::pair<dev_t, ino_t>, std::weak_ptr<PerfMapFile>> by_file_;
  PerfMapRuntimeStats stats_;
  Gauge* bytes_metric_ = nullptr;
  CounterMirror entries_evicted_metric_;
  CounterMirror budget_evictions_metric_;
};

}  // namespace ember
