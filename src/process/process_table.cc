// Reads /proc/PID/{comm,stat,maps,exe} for the process table.
#include "process/process_table.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/log_safe.h"
#include "common/read_file.h"
#include "common/unique_fd.h"
#include "spdlog/spdlog.h"

namespace ember {
namespace {

// A read that fails part-way (the process exits meanwhile: ESRCH) is a failure, not a short file.
bool ReadFile(const std::string& path, std::string* out) {
  std::optional<std::string> text = ReadWholeFile(path);
  if (!text) return false;
  *out = std::move(*text);
  return true;
}

// Feeds the file at `path` to `parser` as it is read; false when it cannot be opened or a read
// fails (the process exited meanwhile).
bool ReadInto(const std::string& path, ProcMapsParser& parser) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[64 << 10];
  bool ok = true;
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = n == 0;
      break;
    }
    parser.Append(absl::string_view(buffer, static_cast<size_t>(n)));
  }
  close(fd);
  return ok;
}

// The target of DIR/exe, as the kernel shows it but without " (deleted)"; "" when unreadable.
std::string ReadExecutablePath(const std::string& pid_dir) {
  char target[4096];
  ssize_t length = readlink((pid_dir + "/exe").c_str(), target, sizeof(target));
  if (length <= 0 || static_cast<size_t>(length) >= sizeof(target)) return "";
  std::string path(target, static_cast<size_t>(length));
  constexpr absl::string_view kDeleted = " (deleted)";
  if (absl::EndsWith(path, kDeleted)) path.resize(path.size() - kDeleted.size());
  return path;
}

// Evicted processes remembered per place in the table. Each costs the table a few bytes and a
// stat read per DropExited, but its subscribers keep their state of it (unwind entries, address
// spaces) until it is told exited: the bound caps that.
constexpr size_t kEvictedPerProcess = 4;

}  // namespace

const MemoryMapping* Process::Find(ProcessAddress addr) const {
  auto it = std::upper_bound(mappings.begin(), mappings.end(), addr.value,
                             [](uint64_t a, const MemoryMapping& m) { return a < m.start; });
  if (it == mappings.begin()) return nullptr;
  --it;
  return it->Contains(addr) ? &*it : nullptr;
}

uint64_t ParseStatStartTime(absl::string_view stat) {
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so count from the last ')'.
  size_t paren = stat.rfind(')');
  if (paren == absl::string_view::npos) return 0;
  std::vector<absl::string_view> fields =
      absl::StrSplit(stat.substr(paren + 1), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state), so field 22 is fields[19].
  uint64_t start_time = 0;
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[19], &start_time)) return 0;
  return start_time;
}

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

ProcessTable::ProcessTable(std::string proc_root, std::chrono::milliseconds min_refresh,
                           std::chrono::milliseconds perf_map_min_refresh,
                           ProcessTableLimits limits)
    : proc_root_(std::move(proc_root)),
      min_refresh_(min_refresh),
      perf_map_min_refresh_(perf_map_min_refresh),
      limits_(limits) {
  limits_.max_processes = std::max<size_t>(limits_.max_processes, 1);
  limits_.max_mappings_per_process = std::max<size_t>(limits_.max_mappings_per_process, 1);
}

ProcessTable::~ProcessTable() = default;

void ProcessTable::NotifyExited(uint32_t pid) {
  for (ProcessEvents* events : subscribers_) events->OnExited(pid);
}

std::string ProcessTable::PidDir(uint32_t pid) const { return absl::StrCat(proc_root_, "/", pid); }

Process* ProcessTable::Get(uint32_t pid) {
  auto it = processes_.find(pid);
  if (it != processes_.end()) {
    Process* process = it->second.get();
    process->last_used = ++tick_;
    if (process->mappings_evicted) {
      process->mappings_evicted = false;  // once: a failed read is retried as any other
      ReadMaps(process);
    }
    return process;
  }
  std::unique_ptr<Process> process = Load(pid);
  // An evicted process that cannot be read now stays remembered: DropExited tells of its exit.
  if (process == nullptr) return nullptr;
  ForgetEvicted(pid, process->start_time);
  if (processes_.size() >= limits_.max_processes) EvictLeastRecentlyUsed();
  process->last_used = ++tick_;
  return processes_.emplace(pid, std::move(process)).first->second.get();
}

void ProcessTable::EvictLeastRecentlyUsed() {
  const size_t target = limits_.max_processes - std::max<size_t>(limits_.max_processes / 64, 1);
  if (processes_.size() <= target) return;
  std::vector<std::pair<uint64_t, uint32_t>> by_use;  // (last_used, pid)
  by_use.reserve(processes_.size());
  for (const auto& [pid, process] : processes_) by_use.emplace_back(process->last_used, pid);
  const size_t excess = processes_.size() - target;
  std::nth_element(by_use.begin(), by_use.begin() + static_cast<ptrdiff_t>(excess - 1),
                   by_use.end());
  for (size_t i = 0; i < excess; ++i) {
    auto it = processes_.find(by_use[i].second);
    const uint64_t start_time = it->second->start_time;
    Untrack(it->second.get());
    processes_.erase(it);
    RememberEvicted(by_use[i].second, start_time);
  }
  stats_.evicted += excess;
  // Past the bound the longest evicted are told exited, running or not, as every evicted process
  // once was: its subscribers forget it, and if it samples again it is read, settles and is
  // published as a new process.
  const size_t bound = kEvictedPerProcess * limits_.max_processes;
  if (evicted_.size() <= bound) return;
  std::vector<std::pair<uint64_t, uint32_t>> by_age;  // (evicted_in, pid)
  by_age.reserve(evicted_.size());
  for (const auto& [pid, evicted] : evicted_) by_age.emplace_back(evicted.evicted_in, pid);
  const size_t over = evicted_.size() - bound;
  std::nth_element(by_age.begin(), by_age.begin() + static_cast<ptrdiff_t>(over - 1), by_age.end());
  by_age.resize(over);
  for (const auto& [evicted_in, pid] : by_age) evicted_.erase(pid);
  for (const auto& [evicted_in, pid] : by_age) NotifyExited(pid);
}

void ProcessTable::RememberEvicted(uint32_t pid, uint64_t start_time) {
  evicted_[pid] = Evicted{.start_time = start_time, .evicted_in = ++evictions_};
}

void ProcessTable::ForgetEvicted(uint32_t pid, uint64_t start_time) {
  auto it = evicted_.find(pid);
  if (it == evicted_.end()) return;
  const bool same = it->second.start_time == start_time;
  evicted_.erase(it);
  if (!same) NotifyExited(pid);
}

void ProcessTable::DropJitDump(Process* process) {
  if (process->jitdump == nullptr) return;
  perf_map_bytes_ -= process->jitdump->dump().EstimatedBytes();
  process->jitdump.reset();
}

void ProcessTable::DropPerfMap(Process* process) {
  if (process->perf_map == nullptr) return;
  if (process->perf_map.use_count() == 1) {  // its last process: the bytes go
    const PerfMapFile& file = *process->perf_map;
    perf_map_bytes_ -= file.map().EstimatedBytes();
    auto it = perf_maps_by_file_.find({file.dev(), file.inode()});
    if (it != perf_maps_by_file_.end() && it->second.lock() == process->perf_map) {
      perf_maps_by_file_.erase(it);
    }
  }
  process->perf_map.reset();
}

void ProcessTable::Untrack(Process* process) {
  DropPerfMap(process);
  DropJitDump(process);
  mapping_bytes_ -= process->mapping_bytes;
  process->mapping_bytes = 0;
}

void ProcessTable::SetMappings(Process* process, std::vector<MemoryMapping> mappings) {
  mapping_bytes_ -= process->mapping_bytes;
  process->mappings = std::move(mappings);
  process->mapping_bytes = MappingsBytes(process->mappings);
  process->mappings_evicted = false;
  mapping_bytes_ += process->mapping_bytes;
  if (mapping_bytes_ > limits_.max_mapping_bytes) EvictMappings(process);
}

void ProcessTable::EvictMappings(const Process* keep) {
  // The least recently sampled go first: they are the least likely to be sampled soon, and one
  // that is gets its mappings read again by Get. Down to 7/8 of the budget, so that a table at
  // the budget does not evict at every read. The process just read is kept whatever it holds
  // (the per-process caps bound it).
  const size_t target = limits_.max_mapping_bytes - limits_.max_mapping_bytes / 8;
  std::vector<std::pair<uint64_t, Process*>> by_use;  // (last_used, process)
  for (const auto& [pid, process] : processes_) {
    if (process.get() != keep && process->mapping_bytes > 0) {
      by_use.emplace_back(process->last_used, process.get());
    }
  }
  std::sort(by_use.begin(), by_use.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [last_used, process] : by_use) {
    if (mapping_bytes_ <= target) break;
    mapping_bytes_ -= process->mapping_bytes;
    process->mapping_bytes = 0;
    std::vector<MemoryMapping>().swap(process->mappings);
    process->mappings_evicted = true;
    ++stats_.mapping_evictions;
  }
}

void ProcessTable::ShedPerfMaps() {
  // The largest map first: a map grows with its runtime's JIT code, so the largest holds the most
  // old code, and halving it frees the most at a time, while the small maps of other processes
  // (typically some KiB) keep naming all their code. Least recently sampled first would let one
  // busy process's map starve every other process of its names.
  // A jitdump's names count as a perf map's.
  while (perf_map_bytes_ > limits_.max_perf_map_total_bytes) {
    PerfMapFile* largest_map = nullptr;
    JitDumpFile* largest_dump = nullptr;
    size_t largest_bytes = 0;
    for (const auto& [pid, process] : processes_) {
      if (process->perf_map != nullptr &&
          process->perf_map->map().EstimatedBytes() > largest_bytes) {
        largest_map = process->perf_map.get();
        largest_dump = nullptr;
        largest_bytes = largest_map->map().EstimatedBytes();
      }
      if (process->jitdump != nullptr &&
          process->jitdump->dump().EstimatedBytes() > largest_bytes) {
        largest_map = nullptr;
        largest_dump = process->jitdump.get();
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
    perf_map_bytes_ -= largest_bytes -
                       (largest_map ? map.EstimatedBytes() : largest_dump->dump().EstimatedBytes());
    stats_.perf_map_entries_evicted += map.stats().evicted - evicted_before;
    ++stats_.perf_map_budget_evictions;
  }
}

std::unique_ptr<Process> ProcessTable::Load(uint32_t pid) {
  auto process = std::make_unique<Process>();
  process->pid = pid;
  std::string text;
  ++stats_.stat_reads;
  if (!ReadFile(absl::StrCat(PidDir(pid), "/stat"), &text)) {
    ++read_failures_.stat;
    return nullptr;
  }
  process->start_time = ParseStatStartTime(text);
  if (!ReadMaps(process.get())) return nullptr;
  return process;
}

bool ProcessTable::ReadMaps(Process* process) {
  process->maps_read_at = std::chrono::steady_clock::now();
  process->maps_version = ++maps_versions_;
  const std::string pid_dir = PidDir(process->pid);
  std::string text;
  // Read with the maps: an exec replaces both, and unknown addresses are how we notice one.
  if (ReadFile(absl::StrCat(pid_dir, "/comm"), &text)) {
    // Only the kernel's line end goes: a name may end in whitespace of its own ("a\n"), and must
    // equal the thread name samples carry, or every sample would look like a rename.
    if (text.ends_with('\n')) text.pop_back();
    process->name = std::move(text);
  }
  // Parsed as it is read, keeping only what the caps let through: the text itself can be tens
  // of MiB (15,000 mappings of 4 KiB paths).
  const auto parser = [this] {
    return ProcMapsParser(limits_.max_mapping_path_bytes, /*executable_only=*/true);
  };
  ProcMapsParser maps = parser();
  std::string dir = pid_dir;
  bool read = ReadInto(pid_dir + "/maps", maps);
  if (!read || maps.bytes() == 0) {
    // A process whose main thread exited reads as empty here (so does a kernel thread, which has
    // no other thread to ask): a live thread's view of the same address space is under task/.
    std::error_code error;
    for (std::filesystem::directory_iterator it(pid_dir + "/task", error), end; !error && it != end;
         it.increment(error)) {
      ProcMapsParser task_maps = parser();
      std::string task_dir = it->path().string();
      if (ReadInto(task_dir + "/maps", task_maps) && task_maps.bytes() > 0) {
        read = true;
        maps = std::move(task_maps);
        dir = std::move(task_dir);
        break;
      }
    }
  }
  process->proc_dir = dir;
  std::string executable_path = ReadExecutablePath(dir);
  // An exec: the perf map and its runtime are the new program's, found again when needed.
  if (executable_path != process->executable_path) {
    DropPerfMap(process);
    DropJitDump(process);
    ++process->execs;
  }
  process->executable_path = std::move(executable_path);
  if (!read) {
    if (access(pid_dir.c_str(), F_OK) == 0) ++read_failures_.maps;  // else it exited: no failure
    return false;
  }
  auto mappings = std::move(maps).Finish();
  ProcMapsStats maps_stats = maps.stats();  // Finish moved only the mappings out
  if (!mappings.ok()) {
    ++read_failures_.maps;
    spdlog::debug("pid {}: {}", process->pid, LogSafe(mappings.status().message()));
    return false;
  }
  SetMappings(process, KeepExecutableMappings(std::move(mappings).value(), process->executable_path,
                                              limits_.max_mappings_per_process, &maps_stats));
  stats_.mapping_long_paths += maps_stats.long_paths;
  stats_.mappings_dropped += maps_stats.dropped_mappings;
  return true;
}

bool ProcessTable::RefreshMaps(Process* process) {
  if (std::chrono::steady_clock::now() - process->maps_read_at < min_refresh_) return false;
  return ReadMaps(process);
}

bool ProcessTable::RefreshPerfMap(Process* process) {
  const auto now = std::chrono::steady_clock::now();
  if (process->perf_map != nullptr && now - process->perf_map_read_at < perf_map_min_refresh_) {
    return false;
  }
  process->perf_map_read_at = now;
  if (process->perf_map == nullptr) {
    std::string status;
    uint32_t ns_pid = process->pid;
    if (ReadFile(absl::StrCat(PidDir(process->pid), "/status"), &status)) {
      ns_pid = NamespacePid(status, process->pid);
    }
    process->namespace_pid = ns_pid;
    std::string name = absl::StrCat("/tmp/perf-", ns_pid, ".map");
    const std::string& dir = process->proc_dir.empty() ? PidDir(process->pid) : process->proc_dir;
    process->perf_map_location = FileLocation(absl::StrCat(dir, "/root"), name);
    process->perf_map_name = std::move(name);
    process->perf_map = std::make_shared<PerfMapFile>(process->perf_map_location,
                                                      process->perf_map_name, limits_.perf_map);
    process->jit_kind = JitKindOf(*process);
  }
  // Several processes' maps may be one file (hard links in a /tmp they share): a map that is a
  // file another process's map already read is shared, not read and held once more (eight
  // processes on one 60 MB map held eight copies, and reading them kept the agent's loop busy
  // for minutes).
  // Its identity as OpenUntrusted finds it: a plain stat of the path would follow the
  // process's links out of its root, and could take another process's map for its own.
  absl::StatusOr<UntrustedFile> opened = OpenUntrusted(process->perf_map_location);
  if (opened.ok()) {
    const struct stat& own = opened->st;
    std::shared_ptr<PerfMapFile> same;
    if (auto it = perf_maps_by_file_.find({own.st_dev, own.st_ino});
        it != perf_maps_by_file_.end()) {
      same = it->second.lock();
      // A map whose file was replaced since reads another file now.
      if (same != nullptr && (same->dev() != own.st_dev || same->inode() != own.st_ino)) {
        same = nullptr;
      }
    }
    const bool reads_own =
        process->perf_map->dev() == own.st_dev && process->perf_map->inode() == own.st_ino;
    if (same != nullptr && same != process->perf_map) {
      DropPerfMap(process);
      process->perf_map = std::move(same);
    } else if (same == nullptr && process->perf_map.use_count() > 1 && !reads_own) {
      // It shared another process's map, and its own is another file now: read its own.
      DropPerfMap(process);
      process->perf_map = std::make_shared<PerfMapFile>(process->perf_map_location,
                                                        process->perf_map_name, limits_.perf_map);
    }
    // Read through this process's path, which names the file now: the process that opened it
    // first may be gone.
    PerfMapFile& file = *process->perf_map;
    if (file.dev() == own.st_dev && file.inode() == own.st_ino)
      file.set_location(process->perf_map_location);
  }
  PerfMapFile& file = *process->perf_map;
  const bool first = file.map().stats().entries == 0 && file.map().stats().bad_lines == 0;
  const size_t bytes_before = file.map().EstimatedBytes();
  const PerfMapStats stats_before = file.map().stats();
  const PerfMapFile::Result read = file.Refresh();
  perf_map_bytes_ += file.map().EstimatedBytes();
  perf_map_bytes_ -= bytes_before;
  stats_.perf_map_entries_evicted += file.map().stats().evicted - stats_before.evicted;
  stats_.perf_map_evictions += file.map().stats().evictions - stats_before.evictions;
  if (file.inode() != 0) perf_maps_by_file_[{file.dev(), file.inode()}] = process->perf_map;
  if (perf_map_bytes_ > limits_.max_perf_map_total_bytes) ShedPerfMaps();
  if (first && file.map().size() > 0) {
    spdlog::info("pid {} ({}): naming JIT code from {} ({} entries, {})", process->pid,
                 LogSafe(process->name), LogSafe(file.name()), file.map().size(),
                 FrameTypeName(process->jit_kind));
  }
  const bool dump_read = RefreshJitDump(process);
  return read == PerfMapFile::Result::kGrew || read == PerfMapFile::Result::kReloaded || dump_read;
}

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

bool ProcessTable::RefreshJitDump(Process* process) {
  if (process->jitdump == nullptr) {
    const MemoryMapping* announced = nullptr;
    for (const MemoryMapping& m : process->mappings) {
      if (m.IsFileBacked() && IsJitDumpPath(m.path)) {
        announced = &m;
        break;
      }
    }
    FileLocation location;
    std::string name;
    if (announced != nullptr) {
      location = OpenPath(*process, *announced);
      name = announced->path;
    } else {
      // Not mapped (yet, or the runtime unmapped it after announcing it): where .NET writes it.
      name = absl::StrCat("/tmp/jit-", process->namespace_pid, ".dump");
      const std::string& dir = process->proc_dir.empty() ? PidDir(process->pid) : process->proc_dir;
      location = FileLocation(absl::StrCat(dir, "/root"), name);
    }
    if (location.empty()) return false;
    // What its debug-info addresses mean depends on the writer: V8's are off by an ELF header.
    const JitDumpWriter writer =
        process->jit_kind == FrameKind::kV8Js ? JitDumpWriter::kV8 : JitDumpWriter::kPerf;
    process->jitdump =
        std::make_unique<JitDumpFile>(std::move(location), std::move(name), limits_.perf_map,
                                      JitDumpFile::kMaxReadPerRefresh, writer);
  }
  JitDumpFile& file = *process->jitdump;
  const size_t bytes_before = file.dump().EstimatedBytes();
  const PerfMapStats stats_before = file.dump().names().stats();
  const bool first = file.dump().names().size() == 0;
  const JitDumpFile::Result read = file.Refresh();
  perf_map_bytes_ += file.dump().EstimatedBytes();
  perf_map_bytes_ -= bytes_before;
  const PerfMapStats& stats = file.dump().names().stats();
  stats_.perf_map_entries_evicted += stats.evicted - stats_before.evicted;
  stats_.perf_map_evictions += stats.evictions - stats_before.evictions;
  if (read == JitDumpFile::Result::kMissing && file.dump().names().size() == 0) {
    perf_map_bytes_ -= file.dump().EstimatedBytes();
    process->jitdump.reset();  // looked for again next time, maybe mapped by then
    return false;
  }
  if (perf_map_bytes_ > limits_.max_perf_map_total_bytes) ShedPerfMaps();
  if (first && process->jitdump != nullptr && file.dump().names().size() > 0) {
    spdlog::info("pid {} ({}): naming JIT code from {} ({} entries, {})", process->pid,
                 LogSafe(process->name), LogSafe(file.name()), file.dump().names().size(),
                 FrameTypeName(process->jit_kind));
  }
  return read == JitDumpFile::Result::kGrew || read == JitDumpFile::Result::kReloaded;
}

int ProcessTable::DropExited() {
  // Maps whose file was replaced stay filed under the old one until their processes go.
  std::erase_if(perf_maps_by_file_, [](const auto& item) { return item.second.expired(); });
  const auto runs = [this](uint32_t pid, uint64_t start_time) {
    std::string stat;
    ++stats_.stat_reads;
    return ReadFile(absl::StrCat(PidDir(pid), "/stat"), &stat) &&
           ParseStatStartTime(stat) == start_time;
  };
  int dropped = 0;
  for (auto it = processes_.begin(); it != processes_.end();) {
    if (runs(it->first, it->second->start_time)) {
      ++it;
    } else {
      const uint32_t pid = it->first;
      Untrack(it->second.get());
      it = processes_.erase(it);
      ++dropped;
      NotifyExited(pid);
    }
  }
  std::vector<uint32_t> gone;
  for (auto it = evicted_.begin(); it != evicted_.end();) {
    if (runs(it->first, it->second.start_time)) {
      ++it;
    } else {
      gone.push_back(it->first);
      it = evicted_.erase(it);
    }
  }
  for (uint32_t pid : gone) NotifyExited(pid);
  return dropped + static_cast<int>(gone.size());
}

std::optional<std::string> ProcessTable::ReadMemory(const Process& process,
                                                    const MemoryMapping& mapping,
                                                    size_t max_bytes) const {
  const std::string& dir = process.proc_dir.empty() ? PidDir(process.pid) : process.proc_dir;
  UniqueFd fd(open((dir + "/mem").c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return std::nullopt;
  std::string bytes(std::min<uint64_t>(mapping.end - mapping.start, max_bytes), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = pread(fd.get(), bytes.data() + done, bytes.size() - done,
                      static_cast<off_t>(mapping.start + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    done += static_cast<size_t>(n);
  }
  return bytes;
}

FileLocation ProcessTable::OpenPath(const Process& process, const MemoryMapping& mapping) const {
  const std::string& dir = process.proc_dir.empty() ? PidDir(process.pid) : process.proc_dir;
  if (access(dir.c_str(), F_OK) == 0) {
    return FileLocation(
        absl::StrCat(dir, "/root"), mapping.path, mapping.file,
        absl::StrFormat("%s/map_files/%x-%x", PidDir(process.pid), mapping.start, mapping.end));
  }
  // The process is gone. The same file (device and inode) at the same path here, as for a
  // process of the agent's own mount namespace, is still the file it ran; OpenUntrusted checks
  // that again as it opens.
  struct stat here;
  if (stat(mapping.path.c_str(), &here) == 0 && here.st_dev == mapping.file.dev &&
      here.st_ino == mapping.file.inode) {
    return FileLocation("", mapping.path, mapping.file);
  }
  return {};  // nothing to open it through now, which says nothing about the file itself
}

std::vector<ExecutableMapping> UnwindMappingsOf(const ProcessTable& table, const Process& process) {
  std::vector<ExecutableMapping> mappings;
  mappings.reserve(process.mappings.size());
  for (const MemoryMapping& m : process.mappings) {
    mappings.push_back({m, m.IsFileBacked() ? table.OpenPath(process, m) : FileLocation()});
  }
  return mappings;
}

}  // namespace ember
