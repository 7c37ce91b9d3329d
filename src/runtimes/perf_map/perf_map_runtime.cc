// The perf-map runtime: finds, reads and bounds the perf maps and jitdumps of the processes whose
// code in no file is sampled, and names that code from them.
#include "runtimes/perf_map/perf_map_runtime.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/log_safe.h"
#include "common/read_file.h"
#include "spdlog/spdlog.h"
#include "symbolize/symbolize_metrics.h"

namespace ember {
namespace {

// perf's convention: a runtime announces its jitdump by mapping it executable, named
// jit-PID.dump (in its working directory, /tmp or where it was told).
bool IsJitDumpPath(absl::string_view path) {
  const size_t slash = path.rfind('/');
  absl::string_view name = slash == absl::string_view::npos ? path : path.substr(slash + 1);
  if (!absl::ConsumePrefix(&name, "jit-") || !absl::ConsumeSuffix(&name, ".dump")) return false;
  return !name.empty() && name.size() <= 10 &&
         std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

FrameKind JitKindOf(const Process& process) {
  const absl::string_view exe = process.executable_path;
  const absl::string_view base = exe.substr(exe.rfind('/') + 1);  // npos + 1 == 0
  const auto maps_library = [&](absl::string_view library) {
    return std::any_of(process.mappings.begin(), process.mappings.end(),
                       [&](const MemoryMapping& m) {
                         absl::string_view path = m.path;
                         size_t slash = path.rfind('/');
                         return slash != absl::string_view::npos &&
                                absl::StartsWith(path.substr(slash + 1), library);
                       });
  };
  if (base == "node" || base == "nodejs" || maps_library("libnode.so")) return FrameKind::kV8Js;
  if (base == "java" || maps_library("libjvm.so")) return FrameKind::kJvm;
  if (base == "dotnet" || maps_library("libcoreclr.so")) return FrameKind::kDotnet;
  return FrameKind::kJit;
}

PerfMapRuntime::PerfMapRuntime(const ProcessTable& processes, MetricsRegistry& metrics,
                               PerfMapRuntimeLimits limits)
    : table_(processes), limits_(limits) {
  // Registration fails only on a programming error (a bad or duplicate name).
  bytes_metric_ =
      metrics
          .AddGauge("ember_perf_map_bytes",
                    "Estimated bytes of the JIT names read from perf maps, every process together.")
          .value();
  entries_evicted_metric_ = CounterMirror(
      metrics
          .AddCounter("ember_perf_map_entries_evicted_total",
                      "Perf map entries evicted, oldest first, when a process's map reached "
                      "--max-perf-map-bytes or every map together --max-perf-map-total-bytes.")
          .value());
  budget_evictions_metric_ = CounterMirror(
      metrics
          .AddCounter("ember_perf_map_budget_evictions_total",
                      "Times the perf maps of every process together reached "
                      "--max-perf-map-total-bytes and the largest map lost its oldest half.")
          .value());
  const absl::Status jitdump = RegisterJitDumpMetrics(metrics);
  if (!jitdump.ok()) std::abort();  // as .value() above: a programming error
}

PerfMapRuntime::~PerfMapRuntime() = default;

std::string PerfMapRuntime::PidDir(uint32_t pid) const {
  return absl::StrCat(table_.proc_root(), "/", pid);
}

namespace {
bool SameProgram(const JitNames& names, const Process& process) {
  return names.execs == process.execs && names.executable_path == process.executable_path;
}
}  // namespace

JitNames& PerfMapRuntime::NamesOf(const Process& process) {
  if (last_ != nullptr && last_pid_ == process.pid && SameProgram(*last_, process)) return *last_;
  auto it = processes_.find(process.pid);
  if (it != processes_.end() && !SameProgram(*it->second, process)) {
    // An exec seen before its event (a sample's read of the maps found it): the names are the old
    // program's.
    Forget(process.pid);
    it = processes_.end();
  }
  if (it == processes_.end()) {
    it = processes_.emplace(process.pid, std::make_unique<JitNames>()).first;
    it->second->execs = process.execs;
    it->second->executable_path = process.executable_path;
  }
  last_pid_ = process.pid;
  last_ = it->second.get();
  return *last_;
}

void PerfMapRuntime::ProcessMapsChanged(const Process& process) {
  auto it = processes_.find(process.pid);
  if (it != processes_.end() && !SameProgram(*it->second, process)) Forget(process.pid);
}

void PerfMapRuntime::ProcessExited(uint32_t pid) { Forget(pid); }

void PerfMapRuntime::Forget(uint32_t pid) {
  auto it = processes_.find(pid);
  if (it == processes_.end()) return;
  DropPerfMap(*it->second);
  DropJitDump(*it->second);
  if (last_ == it->second.get()) last_ = nullptr;
  processes_.erase(it);
}

void PerfMapRuntime::DropJitDump(JitNames& names) {
  if (names.jitdump == nullptr) return;
  bytes_ -= names.jitdump->dump().EstimatedBytes();
  names.jitdump.reset();
}

void PerfMapRuntime::DropPerfMap(JitNames& names) {
  if (names.perf_map == nullptr) return;
  if (names.perf_map.use_count() == 1) {  // its last process: the bytes go
    const PerfMapFile& file = *names.perf_map;
    bytes_ -= file.map().EstimatedBytes();
    auto it = by_file_.find({file.dev(), file.inode()});
    if (it != by_file_.end() && it->second.lock() == names.perf_map) by_file_.erase(it);
  }
  names.perf_map.reset();
}

void PerfMapRuntime::Shed() {
  // The largest map first: a map grows with its runtime's JIT code, so the largest holds the most
  // old code, and halving it frees the most at a time, while the small maps of other processes
  // (typically some KiB) keep naming all their code. Least recently sampled first would let one
  // busy process's map starve every other process of its names.
  // A jitdump's names count as a perf map's.
  while (bytes_ > limits_.max_total_bytes) {
    PerfMapFile* largest_map = nullptr;
    JitDumpFile* largest_dump = nullptr;
    size_t largest_bytes = 0;
    for (const auto& [pid, names] : processes_) {
      if (names->perf_map != nullptr && names->perf_map->map().EstimatedBytes() > largest_bytes) {
        largest_map = names->perf_map.get();
        largest_dump = nullptr;
        largest_bytes = largest_map->map().EstimatedBytes();
      }
      if (names->jitdump != nullptr && names->jitdump->dump().EstimatedBytes() > largest_bytes) {
        largest_map = nullptr;
        largest_dump = names->jitdump.get();
        largest_bytes = largest_dump->dump().EstimatedBytes();
      }
    }
    if (largest_map == nullptr && largest_dump == nullptr) break;
    const PerfMap& map = largest_map ? largest_map->map() : largest_dump->dump().names();
    const uint64_t evicted_before = map.stats().evicted;
    if (largest_map) {
      largest_map->ShedOldest();
    } else {
      largest_dump->ShedOldest();
    }
    bytes_ -= largest_bytes -
              (largest_map ? map.EstimatedBytes() : largest_dump->dump().EstimatedBytes());
    stats_.entries_evicted += map.stats().evicted - evicted_before;
    ++stats_.budget_evictions;
  }
}

bool PerfMapRuntime::Refresh(const Process& process) { return Refresh(process, NamesOf(process)); }

bool PerfMapRuntime::Refresh(const Process& process, JitNames& names) {
  const auto now = std::chrono::steady_clock::now();
  if (names.perf_map != nullptr && now - names.perf_map_read_at < limits_.min_refresh) {
    return false;
  }
  names.perf_map_read_at = now;
  if (names.perf_map == nullptr) {
    uint32_t ns_pid = process.pid;
    if (std::optional<std::string> status =
            ReadWholeFile(absl::StrCat(PidDir(process.pid), "/status"))) {
      ns_pid = NamespacePid(*status, process.pid);
    }
    names.namespace_pid = ns_pid;
    std::string name = absl::StrCat("/tmp/perf-", ns_pid, ".map");
    const std::string dir = process.proc_dir.empty() ? PidDir(process.pid) : process.proc_dir;
    names.perf_map_location = FileLocation(absl::StrCat(dir, "/root"), name);
    names.perf_map_name = std::move(name);
    names.perf_map = std::make_shared<PerfMapFile>(names.perf_map_location, names.perf_map_name,
                                                   limits_.per_process);
    names.kind = JitKindOf(process);
  }
  // Several processes' maps may be one file (hard links in a /tmp they share): a map that is a
  // file another process's map already read is shared, not read and held once more (eight
  // processes on one 60 MB map held eight copies, and reading them kept the agent's loop busy
  // for minutes).
  // Its identity as OpenUntrusted finds it: a plain stat of the path would follow the
  // process's links out of its root, and could take another process's map for its own.
  absl::StatusOr<UntrustedFile> opened = OpenUntrusted(names.perf_map_location);
  if (opened.ok()) {
    const struct stat& own = opened->st;
    std::shared_ptr<PerfMapFile> same;
    if (auto it = by_file_.find({own.st_dev, own.st_ino}); it != by_file_.end()) {
      same = it->second.lock();
      // A map whose file was replaced since reads another file now.
      if (same != nullptr && (same->dev() != own.st_dev || same->inode() != own.st_ino)) {
        same = nullptr;
      }
    }
    const bool reads_own =
        names.perf_map->dev() == own.st_dev && names.perf_map->inode() == own.st_ino;
    if (same != nullptr && same != names.perf_map) {
      DropPerfMap(names);
      names.perf_map = std::move(same);
    } else if (same == nullptr && names.perf_map.use_count() > 1 && !reads_own) {
      // It shared another process's map, and its own is another file now: read its own.
      DropPerfMap(names);
      names.perf_map = std::make_shared<PerfMapFile>(names.perf_map_location, names.perf_map_name,
                                                     limits_.per_process);
    }
    // Read through this process's path, which names the file now: the process that opened it
    // first may be gone.
    PerfMapFile& file = *names.perf_map;
    if (file.dev() == own.st_dev && file.inode() == own.st_ino) {
      file.set_location(names.perf_map_location);
    }
  }
  PerfMapFile& file = *names.perf_map;
  const bool first = file.map().stats().entries == 0 && file.map().stats().bad_lines == 0;
  const size_t bytes_before = file.map().EstimatedBytes();
  const PerfMapStats stats_before = file.map().stats();
  const PerfMapFile::Result read = file.Refresh();
  bytes_ += file.map().EstimatedBytes();
  bytes_ -= bytes_before;
  stats_.entries_evicted += file.map().stats().evicted - stats_before.evicted;
  stats_.evictions += file.map().stats().evictions - stats_before.evictions;
  if (file.inode() != 0) by_file_[{file.dev(), file.inode()}] = names.perf_map;
  if (bytes_ > limits_.max_total_bytes) Shed();
  if (first && file.map().size() > 0) {
    spdlog::info("pid {} ({}): naming JIT code from {} ({} entries, {})", process.pid,
                 LogSafe(process.name), LogSafe(file.name()), file.map().size(),
                 FrameTypeName(names.kind));
  }
  const bool dump_read = RefreshJitDump(process, names);
  return read == PerfMapFile::Result::kGrew || read == PerfMapFile::Result::kReloaded || dump_read;
}

bool PerfMapRuntime::RefreshJitDump(const Process& process, JitNames& names) {
  if (names.jitdump == nullptr) {
    const MemoryMapping* announced = nullptr;
    for (const MemoryMapping& m : process.mappings) {
      if (m.IsFileBacked() && IsJitDumpPath(m.path)) {
        announced = &m;
        break;
      }
    }
    FileLocation location;
    std::string name;
    if (announced != nullptr) {
      location = table_.OpenPath(process, *announced);
      name = announced->path;
    } else {
      // Not mapped (yet, or the runtime unmapped it after announcing it): where .NET writes it.
      name = absl::StrCat("/tmp/jit-", names.namespace_pid, ".dump");
      const std::string dir = process.proc_dir.empty() ? PidDir(process.pid) : process.proc_dir;
      location = FileLocation(absl::StrCat(dir, "/root"), name);
    }
    if (location.empty()) return false;
    // What its debug-info addresses mean depends on the writer: V8's are off by an ELF header.
    const JitDumpWriter writer =
        names.kind == FrameKind::kV8Js ? JitDumpWriter::kV8 : JitDumpWriter::kPerf;
    names.jitdump =
        std::make_unique<JitDumpFile>(std::move(location), std::move(name), limits_.per_process,
                                      JitDumpFile::kMaxReadPerRefresh, writer);
  }
  JitDumpFile& file = *names.jitdump;
  const size_t bytes_before = file.dump().EstimatedBytes();
  const PerfMapStats stats_before = file.dump().names().stats();
  const bool first = file.dump().names().size() == 0;
  const JitDumpFile::Result read = file.Refresh();
  bytes_ += file.dump().EstimatedBytes();
  bytes_ -= bytes_before;
  const PerfMapStats& stats = file.dump().names().stats();
  stats_.entries_evicted += stats.evicted - stats_before.evicted;
  stats_.evictions += stats.evictions - stats_before.evictions;
  if (read == JitDumpFile::Result::kMissing && file.dump().names().size() == 0) {
    bytes_ -= file.dump().EstimatedBytes();
    names.jitdump.reset();  // looked for again next time, maybe mapped by then
    return false;
  }
  if (bytes_ > limits_.max_total_bytes) Shed();
  if (first && names.jitdump != nullptr && file.dump().names().size() > 0) {
    spdlog::info("pid {} ({}): naming JIT code from {} ({} entries, {})", process.pid,
                 LogSafe(process.name), LogSafe(file.name()), file.dump().names().size(),
                 FrameTypeName(names.kind));
  }
  return read == JitDumpFile::Result::kGrew || read == JitDumpFile::Result::kReloaded;
}

const Frame* PerfMapRuntime::NameCodeOutsideFiles(const Process& process, ProcessAddress address,
                                                  CodeFrameCache& frames) {
  JitNames& names = NamesOf(process);
  for (bool refreshed = false;; refreshed = true) {
    if (names.perf_map != nullptr) {
      const PerfMap& map = names.perf_map->map();
      if (const Frame* frame = frames.Find(map.version(), address)) return frame;
      if (std::optional<PerfMapSymbol> symbol = map.Lookup(address.value)) {
        Frame frame;
        frame.kind = names.kind;
        frame.function = std::string(symbol->name);
        frame.module = names.perf_map->name();
        frame.address = address.value;
        ++stats_.frames_named;
        return frames.Add(map.version(), address, std::move(frame));
      }
    }
    if (names.jitdump != nullptr) {
      const JitDump& dump = names.jitdump->dump();
      const uint64_t version = dump.names().version();
      if (const Frame* frame = frames.Find(version, address)) return frame;
      if (std::optional<PerfMapSymbol> symbol = dump.names().Lookup(address.value)) {
        Frame frame;
        frame.kind = names.kind;
        frame.function = std::string(symbol->name);
        frame.module = names.jitdump->name();
        frame.address = address.value;
        if (std::optional<JitDumpLine> line = dump.LineAt(address.value)) {
          frame.source_file = std::string(line->file);
          frame.line = line->line;
        }
        ++stats_.frames_named;
        return frames.Add(version, address, std::move(frame));
      }
    }
    // Not (yet) named: the runtime may have appended it since the last read.
    if (refreshed || !Refresh(process, names)) return nullptr;
  }
}

void PerfMapRuntime::NextGeneration() {
  std::erase_if(by_file_, [](const auto& item) { return item.second.expired(); });
}

void PerfMapRuntime::SyncMetrics() {
  bytes_metric_->Set(static_cast<double>(bytes_));
  entries_evicted_metric_.Publish(stats_.entries_evicted);
  budget_evictions_metric_.Publish(stats_.budget_evictions);
}

void PerfMapRuntime::LogSummary(const BpfStats&) const {
  if (stats_.frames_named == 0 && bytes_ == 0) return;
  spdlog::info(
      "JIT code in no file: {} frames named from perf maps and jitdumps, {} KiB of names held; "
      "{} entries evicted at --max-perf-map-bytes or --max-perf-map-total-bytes ({} times the "
      "total)",
      stats_.frames_named, bytes_ >> 10, stats_.entries_evicted, stats_.budget_evictions);
}

}  // namespace ember
