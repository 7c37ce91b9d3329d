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

ProcessTable::ProcessTable(std::string proc_root, std::chrono::milliseconds min_refresh,
                           ProcessTableLimits limits)
    : proc_root_(std::move(proc_root)), min_refresh_(min_refresh), limits_(limits) {
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

void ProcessTable::Untrack(Process* process) {
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
  // An exec: what its subscribers know of the old program goes (Process::execs tells them).
  if (executable_path != process->executable_path) ++process->execs;
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

int ProcessTable::DropExited() {
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
