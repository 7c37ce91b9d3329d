// BpfUnwindTables: files' rows placed in the BPF row map, and each process's mappings of them.
#include "sampler/bpf_unwind_tables.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log_safe.h"
#include "elf/sigbus_guard.h"
#include "spdlog/spdlog.h"
#include "unwind/unwind_table.h"

namespace ember {
namespace {

// The vDSO has no file: one key for the image every process maps.
constexpr FileIdentity kVdso{.dev = ~uint64_t{0}, .inode = ~uint64_t{0}};

FileIdentity KeyOf(const ExecutableMapping& mapping) {
  return mapping.IsVdso() ? kVdso : mapping.file;
}

// Lines about one file or process each: a workload must not flood the log with them.
LogRateLimiter& Warnings() {
  static LogRateLimiter limiter(kLogLinesPerMinute, std::chrono::minutes(1));
  return limiter;
}

}  // namespace

absl::StatusOr<FileUnwindTable> BpfUnwindTables::TableOfFile(const ExecutableMapping& mapping) {
  absl::StatusOr<std::shared_ptr<ElfImage>> image =
      absl::DataLossError("the file changed while it was read");
  absl::StatusOr<std::vector<ember_unwind_row>> rows =
      absl::DataLossError("the file changed while its CFI was read");
  const bool read = internal::RunCatchingSigbus([&] {
    image = mapping.IsVdso() ? ElfImage::OpenOwnVdso() : ElfImage::Open(mapping.open_path);
    if (image.ok()) rows = BuildUnwindTable(**image);
  });
  if (!read && image.ok()) {
    // After a fault libelf's and libdw's state cannot be trusted even to be freed.
    internal::KeepAbandoned(new std::shared_ptr<ElfImage>(*image));
  }
  if (!image.ok()) return image.status();
  if (!rows.ok()) return rows.status();
  return FileUnwindTable{.rows = std::move(rows).value(), .layout = (*image)->layout()};
}

bool BpfUnwindTables::ProcessExists(uint32_t pid) {
  struct stat info;
  return stat(absl::StrCat("/proc/", pid).c_str(), &info) == 0;
}

BpfUnwindTables::BpfUnwindTables(UnwindMaps& maps, uint32_t row_capacity, TableSource source,
                                 double build_share, ProcessAlive alive, BuildThreshold threshold)
    : maps_(maps),
      row_capacity_(row_capacity),
      source_(std::move(source)),
      build_share_(build_share),
      alive_(std::move(alive)),
      threshold_(threshold) {
  if (row_capacity_ > 0) free_.emplace(0, row_capacity_);
}

void BpfUnwindTables::SetProcess(uint32_t pid, const std::vector<ExecutableMapping>& mappings) {
  Process process;
  for (const ExecutableMapping& m : mappings) {
    if ((m.IsFileBacked() || m.IsVdso()) && m.end > m.start) process.mappings.push_back(m);
  }
  std::sort(
      process.mappings.begin(), process.mappings.end(),
      [](const ExecutableMapping& a, const ExecutableMapping& b) { return a.start < b.start; });
  for (const ExecutableMapping& m : process.mappings) {
    const FileIdentity key = KeyOf(m);
    if (std::find(process.files.begin(), process.files.end(), key) != process.files.end()) {
      continue;
    }
    process.files.push_back(key);
    auto [it, inserted] = files_.try_emplace(key);
    File& file = it->second;
    ++file.processes;
    file.last_generation = generation_;
    // The newest process's mapping opens it: the one that first mapped it may be gone by the
    // time it is built.
    const bool waiting = file.state == File::State::kUnwanted || file.state == File::State::kQueued;
    if (inserted || (waiting && !m.open_path.empty())) file.opened_as = m;
    if (inserted) {
      if (threshold_.min_short_walks > 0) {
        file.state = File::State::kUnwanted;
        file.walks_to_build = WalksToBuild(m.end - m.start);
      } else {
        pending_.push_back(key);
      }
    }
    if (file.state == File::State::kUnwanted) process.has_unwanted = true;
  }
  auto [it, inserted] = processes_.try_emplace(pid);
  if (!inserted) Release(it->second.files);
  it->second = std::move(process);
  WriteEntry(pid, it->second);
}

int BpfUnwindTables::WalksToBuild(uint64_t code_bytes) const {
  uint64_t walks = static_cast<uint64_t>(threshold_.min_short_walks);
  if (threshold_.code_bytes_per_short_walk > 0) {
    walks += code_bytes / threshold_.code_bytes_per_short_walk;
  }
  return static_cast<int>(std::min<uint64_t>(walks, std::numeric_limits<int>::max()));
}

void BpfUnwindTables::WalkFellShort(uint32_t pid, std::span<const uint64_t> pcs) {
  auto it = processes_.find(pid);
  if (it == processes_.end() || !it->second.has_unwanted) return;
  const std::vector<ExecutableMapping>& mappings = it->second.mappings;
  const ExecutableMapping* last = nullptr;  // the mapping of the frame before
  for (size_t i = 0; i < pcs.size(); ++i) {
    if (pcs[i] == 0) continue;  // a marker
    // A caller's return address is looked up at its call, the byte before it.
    const uint64_t address = i > 0 ? pcs[i] - 1 : pcs[i];
    if (last != nullptr && last->start <= address && address < last->end) continue;
    // The last mapping starting at or below the address (they are sorted and do not overlap).
    auto after =
        std::upper_bound(mappings.begin(), mappings.end(), address,
                         [](uint64_t a, const ExecutableMapping& m) { return a < m.start; });
    if (after == mappings.begin() || address >= std::prev(after)->end) {
      last = nullptr;  // memory that is no file: JIT code
      continue;
    }
    last = &*std::prev(after);
    const FileIdentity key = KeyOf(*last);
    auto file = files_.find(key);
    if (file == files_.end() || file->second.state != File::State::kUnwanted) continue;
    if (++file->second.short_walks < file->second.walks_to_build) continue;
    file->second.state = File::State::kQueued;
    pending_.push_back(key);
    UpdateHasUnwanted(key);
  }
}

void BpfUnwindTables::UpdateHasUnwanted(const FileIdentity& key) {
  for (auto& [pid, process] : processes_) {
    if (!process.has_unwanted ||
        std::find(process.files.begin(), process.files.end(), key) == process.files.end()) {
      continue;
    }
    process.has_unwanted =
        std::any_of(process.files.begin(), process.files.end(), [&](const auto& f) {
          auto file = files_.find(f);
          return file != files_.end() && file->second.state == File::State::kUnwanted;
        });
  }
}

void BpfUnwindTables::WriteEntry(uint32_t pid, const Process& process) {
  ember_unwind_proc proc{};
  for (const ExecutableMapping& m : process.mappings) {
    if (proc.count >= EMBER_MAX_UNWIND_MAPPINGS) break;
    auto it = files_.find(KeyOf(m));
    if (it == files_.end() || it->second.state != File::State::kLoaded) continue;
    const File& file = it->second;
    std::optional<ModulePlacement> placement = file.layout.Place(m.start, m.end, m.offset);
    if (!placement) continue;
    // Mappings come from one /proc/PID/maps read, so they do not overlap.
    proc.mappings[proc.count++] = {.start = m.start,
                                   .end = m.end,
                                   .bias = placement->bias,
                                   .table_base = file.table_base,
                                   .first_row = file.first_row,
                                   .row_count = file.row_count,
                                   .bucket_count = file.bucket_count,
                                   .bucket_shift = file.bucket_shift,
                                   .reserved = {}};
  }
  if (proc.count == 0) {
    maps_.RemoveProcess(pid);
    return;
  }
  if (absl::Status status = maps_.SetProcess(pid, proc); !status.ok()) {
    LogLimited(Warnings(), spdlog::level::warn, "{}", LogSafe(status.message()));
  }
}

int BpfUnwindTables::BuildPending(std::chrono::steady_clock::time_point now) {
  std::vector<FileIdentity> built;
  while (!pending_.empty() && now >= next_build_at_) {
    const FileIdentity key = pending_.front();
    pending_.pop_front();
    auto it = files_.find(key);
    if (it == files_.end() || it->second.state != File::State::kQueued) continue;
    RemoveUnreportedExits(key);
    // Dropped (Release) if every process that mapped it had exited.
    if (!files_.contains(key)) continue;
    const auto started = std::chrono::steady_clock::now();
    Build(key);
    now = std::chrono::steady_clock::now();
    const auto took = now - started;
    build_time_ += took;
    // The next build waits until this one is the share of the time since it began.
    next_build_at_ = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               took * (1 / build_share_ - 1));
    built.push_back(key);
  }
  if (built.empty()) return 0;
  for (const auto& entry : processes_) {
    const std::vector<FileIdentity>& files = entry.second.files;  // clang 14: no binding captures
    const bool names_one =
        std::any_of(built.begin(), built.end(), [&files](const FileIdentity& key) {
          return std::find(files.begin(), files.end(), key) != files.end();
        });
    if (names_one) WriteEntry(entry.first, entry.second);
  }
  return static_cast<int>(built.size());
}

void BpfUnwindTables::RemoveUnreportedExits(const FileIdentity& key) {
  std::vector<uint32_t> exited;
  for (const auto& [pid, process] : processes_) {
    if (std::find(process.files.begin(), process.files.end(), key) == process.files.end()) {
      continue;
    }
    if (alive_(pid)) break;
    exited.push_back(pid);
  }
  for (uint32_t pid : exited) RemoveProcess(pid);
}

void BpfUnwindTables::Build(const FileIdentity& key) {
  File& file = files_.at(key);
  file.state = File::State::kNoRows;
  const ExecutableMapping mapping = std::move(file.opened_as);
  file.opened_as = {};
  ++tables_built_;
  const auto started = std::chrono::steady_clock::now();
  absl::StatusOr<FileUnwindTable> table = source_(mapping);
  if (!table.ok()) {
    spdlog::debug("{}: frames in it are unwound from snapshots: {}", LogSafe(mapping.path),
                  LogSafe(table.status().message()));
    return;
  }
  const size_t count = table->rows.size();
  uint32_t first = 0;
  // Allocate may drop unused files: `file` is looked up again after it.
  if (count == 0 || count > EMBER_MAX_UNWIND_ROWS_PER_FILE ||
      !Allocate(static_cast<uint32_t>(count), &first)) {
    if (count > 0) ++out_of_room_;
    spdlog::debug("{}: {} CFI rows do not fit the BPF row map", LogSafe(mapping.path), count);
    return;
  }
  rows_used_ += count;
  const UnwindBuckets buckets = BucketsOf(table->rows);
  absl::Status status = maps_.WriteRows(first, table->rows);
  if (status.ok()) status = maps_.WriteBuckets(first, buckets.first_rows);
  if (!status.ok()) {
    LogLimited(Warnings(), spdlog::level::warn, "{}: {}", LogSafe(mapping.path),
               LogSafe(status.message()));
    Free(first, static_cast<uint32_t>(count));
    return;
  }
  File& loaded = files_.at(key);
  loaded.state = File::State::kLoaded;
  loaded.first_row = first;
  loaded.row_count = static_cast<uint32_t>(count);
  loaded.table_base = buckets.base;
  loaded.bucket_count = static_cast<uint32_t>(buckets.first_rows.size());
  loaded.bucket_shift = buckets.shift;
  loaded.layout = std::move(table->layout);
  spdlog::debug("{}: {} CFI rows for the BPF walk in {} µs", LogSafe(mapping.path), count,
                std::chrono::duration_cast<std::chrono::microseconds>(
                    std::chrono::steady_clock::now() - started)
                    .count());
}

void BpfUnwindTables::RemoveProcess(uint32_t pid) {
  auto it = processes_.find(pid);
  if (it == processes_.end()) return;
  maps_.RemoveProcess(pid);
  Release(it->second.files);
  processes_.erase(it);
}

void BpfUnwindTables::Release(const std::vector<FileIdentity>& files) {
  for (const FileIdentity& key : files) {
    auto it = files_.find(key);
    if (it == files_.end()) continue;
    --it->second.processes;
    it->second.last_generation = generation_;
    if (it->second.processes <= 0 && it->second.state == File::State::kQueued) {
      // Queued again if a process maps it later.
      ++dropped_exited_;
      files_.erase(it);
      pending_.erase(std::remove(pending_.begin(), pending_.end(), key), pending_.end());
    }
  }
}

void BpfUnwindTables::NextGeneration(int keep_generations) {
  ++generation_;
  for (auto it = files_.begin(); it != files_.end();) {
    const File& file = it->second;
    if (file.processes <= 0 &&
        generation_ - file.last_generation > static_cast<uint64_t>(keep_generations)) {
      // A queued file stays in pending_ until BuildPending skips it.
      if (file.state == File::State::kLoaded) Free(file.first_row, file.row_count);
      files_.erase(it++);
    } else {
      ++it;
    }
  }
}

bool BpfUnwindTables::Allocate(uint32_t rows, uint32_t* first) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < rows) continue;
      *first = it->first;
      const uint32_t left = it->second - rows;
      free_.erase(it);
      if (left > 0) free_.emplace(*first + rows, left);
      return true;
    }
    // No run is long enough: free the rows of every file no process maps now, then try again.
    for (auto it = files_.begin(); it != files_.end();) {
      if (it->second.processes <= 0 && it->second.state == File::State::kLoaded) {
        Free(it->second.first_row, it->second.row_count);
        files_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  return false;
}

void BpfUnwindTables::Free(uint32_t first, uint32_t count) {
  rows_used_ -= std::min<size_t>(rows_used_, count);
  auto next = free_.lower_bound(first);
  // Joined with the free runs on either side, so long tables still find room.
  if (next != free_.end() && first + count == next->first) {
    count += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto before = std::prev(next);
    if (before->first + before->second == first) {
      before->second += count;
      return;
    }
  }
  free_.emplace(first, count);
}

BpfUnwindTablesStats BpfUnwindTables::stats() const {
  BpfUnwindTablesStats stats;
  for (const auto& [key, file] : files_) {
    switch (file.state) {
      case File::State::kUnwanted:
        ++stats.files_unwanted;
        break;
      case File::State::kQueued:
        ++stats.files_queued;
        break;
      case File::State::kLoaded:
        ++stats.files_loaded;
        break;
      case File::State::kNoRows:
        ++stats.files_without_rows;
        break;
    }
  }
  stats.rows_used = rows_used_;
  stats.rows_capacity = row_capacity_;
  stats.processes = processes_.size();
  stats.tables_built = tables_built_;
  stats.out_of_room = out_of_room_;
  stats.dropped_exited = dropped_exited_;
  stats.build_time = build_time_;
  return stats;
}

void BpfUnwindTables::LogSummary(const BpfStats& bpf) const {
  const BpfUnwindTablesStats tables = stats();
  spdlog::info(
      "user stacks walked in BPF: {} whole, {} stopped short (the agent went on), {} of "
      "processes without tables; {} of {} CFI rows used by {} files ({} without rows, {} that "
      "did not fit, {} queued, {} sampled too rarely to build yet); {} tables built in {} ms, "
      "{} not built as their processes had exited",
      bpf.unwind_complete, bpf.unwind_stopped, bpf.unwind_no_tables, tables.rows_used,
      tables.rows_capacity, tables.files_loaded, tables.files_without_rows, tables.out_of_room,
      tables.files_queued, tables.files_unwanted, tables.tables_built,
      std::chrono::duration_cast<std::chrono::milliseconds>(tables.build_time).count(),
      tables.dropped_exited);
}

}  // namespace ember
