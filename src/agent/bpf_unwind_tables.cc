// BpfUnwindTables: files' rows placed in the BPF row map, and each process's mappings of them.
#include "agent/bpf_unwind_tables.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/sigbus_guard.h"
#include "spdlog/spdlog.h"
#include "unwind/unwind_table.h"

namespace ember {
namespace {

// The vDSO has no file: one key for the image every process maps.
constexpr FileIdentity kVdso{.dev = ~uint64_t{0}, .inode = ~uint64_t{0}};

bool IsVdso(const ExecutableMapping& mapping) { return mapping.name == "[vdso]"; }

}  // namespace

absl::StatusOr<FileUnwindTable> BpfUnwindTables::TableOfFile(const ExecutableMapping& mapping) {
  absl::StatusOr<std::shared_ptr<ElfImage>> image =
      absl::DataLossError("the file changed while it was read");
  absl::StatusOr<std::vector<ember_unwind_row>> rows =
      absl::DataLossError("the file changed while its CFI was read");
  const bool read = internal::RunCatchingSigbus([&] {
    image = IsVdso(mapping) ? ElfImage::OpenOwnVdso() : ElfImage::Open(mapping.open_path);
    if (image.ok()) rows = BuildUnwindTable(**image);
  });
  if (!read && image.ok()) {
    // After a fault libelf's and libdw's state cannot be trusted even to be freed.
    new std::shared_ptr<ElfImage>(*image);
  }
  if (!image.ok()) return image.status();
  if (!rows.ok()) return rows.status();
  return FileUnwindTable{.rows = std::move(rows).value(), .layout = (*image)->layout()};
}

BpfUnwindTables::BpfUnwindTables(UnwindMaps& maps, uint32_t row_capacity, TableSource source)
    : maps_(maps), row_capacity_(row_capacity), source_(std::move(source)) {
  if (row_capacity_ > 0) free_.emplace(0, row_capacity_);
}

BpfUnwindTables::File& BpfUnwindTables::Load(const FileIdentity& key,
                                             const ExecutableMapping& mapping) {
  auto [it, inserted] = files_.try_emplace(key);
  File& file = it->second;
  file.last_generation = generation_;
  if (!inserted) return file;
  ++tables_built_;
  const auto started = std::chrono::steady_clock::now();
  absl::StatusOr<FileUnwindTable> table = source_(mapping);
  build_time_ += std::chrono::steady_clock::now() - started;
  if (!table.ok()) {
    spdlog::debug("{}: frames in it are unwound from snapshots: {}", mapping.name,
                  std::string(table.status().message()));
    return file;
  }
  const size_t count = table->rows.size();
  uint32_t first = 0;
  if (count == 0 || count > EMBER_MAX_UNWIND_ROWS_PER_FILE ||
      !Allocate(static_cast<uint32_t>(count), &first)) {
    if (count > 0) ++out_of_room_;
    spdlog::debug("{}: {} CFI rows do not fit the BPF row map", mapping.name, count);
    return file;
  }
  if (absl::Status status = maps_.WriteRows(first, table->rows); !status.ok()) {
    spdlog::warn("{}: {}", mapping.name, std::string(status.message()));
    Free(first, static_cast<uint32_t>(count));
    return file;
  }
  file.has_rows = true;
  file.first_row = first;
  file.row_count = static_cast<uint32_t>(count);
  file.layout = std::move(table->layout);
  rows_used_ += count;
  spdlog::debug("{}: {} CFI rows for the BPF walk in {} µs", mapping.name, count,
                std::chrono::duration_cast<std::chrono::microseconds>(
                    std::chrono::steady_clock::now() - started)
                    .count());
  return file;
}

void BpfUnwindTables::SetProcess(uint32_t pid, const std::vector<ExecutableMapping>& mappings) {
  std::vector<const ExecutableMapping*> sorted;
  for (const ExecutableMapping& m : mappings) {
    const bool file_backed = m.file.inode != 0 && !m.name.empty() && m.name[0] == '/';
    if ((file_backed || IsVdso(m)) && m.end > m.start) sorted.push_back(&m);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const ExecutableMapping* a, const ExecutableMapping* b) {
              return a->start < b->start;
            });
  ember_unwind_proc proc{};
  std::vector<FileIdentity> named;
  for (const ExecutableMapping* m : sorted) {
    if (proc.count >= EMBER_MAX_UNWIND_MAPPINGS) break;
    const FileIdentity key = IsVdso(*m) ? kVdso : m->file;
    File& file = Load(key, *m);
    if (!file.has_rows) continue;
    std::optional<ModulePlacement> placement = file.layout.Place(m->start, m->offset);
    if (!placement) continue;
    // Mappings come from one /proc/PID/maps read, so they do not overlap.
    proc.mappings[proc.count++] = {.start = m->start,
                                   .end = m->end,
                                   .bias = placement->bias,
                                   .first_row = file.first_row,
                                   .row_count = file.row_count};
    // Counted at once, so that making room for a later file of this process cannot free it.
    if (std::find(named.begin(), named.end(), key) == named.end()) {
      named.push_back(key);
      ++file.processes;
    }
  }
  auto [it, inserted] = processes_.try_emplace(pid);
  if (!inserted) Release(it->second);
  it->second = std::move(named);
  if (proc.count == 0) {
    maps_.RemoveProcess(pid);
    return;
  }
  if (absl::Status status = maps_.SetProcess(pid, proc); !status.ok()) {
    spdlog::warn("{}", std::string(status.message()));
  }
}

void BpfUnwindTables::RemoveProcess(uint32_t pid) {
  auto it = processes_.find(pid);
  if (it == processes_.end()) return;
  maps_.RemoveProcess(pid);
  Release(it->second);
  processes_.erase(it);
}

void BpfUnwindTables::Release(const std::vector<FileIdentity>& files) {
  for (const FileIdentity& key : files) {
    auto it = files_.find(key);
    if (it == files_.end()) continue;
    --it->second.processes;
    it->second.last_generation = generation_;
  }
}

void BpfUnwindTables::NextGeneration(int keep_generations) {
  ++generation_;
  for (auto it = files_.begin(); it != files_.end();) {
    const File& file = it->second;
    if (file.processes <= 0 &&
        generation_ - file.last_generation > static_cast<uint64_t>(keep_generations)) {
      if (file.has_rows) Free(file.first_row, file.row_count);
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
      if (it->second.processes <= 0 && it->second.has_rows) {
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
    if (file.has_rows) {
      ++stats.files_loaded;
    } else {
      ++stats.files_without_rows;
    }
  }
  stats.rows_used = rows_used_;
  stats.rows_capacity = row_capacity_;
  stats.processes = processes_.size();
  stats.tables_built = tables_built_;
  stats.out_of_room = out_of_room_;
  stats.build_time = build_time_;
  return stats;
}

}  // namespace ember
