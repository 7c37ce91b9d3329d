// Dropping file pages and trimming the heap.
#include "agent/memory_upkeep.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "common/read_file.h"
#include "elf/elf_file.h"
#include "status/process_metrics.h"

namespace ember {

HeapAccess SystemHeap() {
  return {
      // As process_resident_memory_bytes reads them.
      .resident_bytes =
          [] {
            const std::optional<ProcStat> stat =
                ParseProcStat(ReadWholeFile("/proc/self/stat").value_or(""));
            return stat ? stat->rss_pages * static_cast<size_t>(sysconf(_SC_PAGESIZE)) : 0;
          },
      .free_heap_bytes = [] { return mallinfo2().fordblks; },
      .trim = [] { malloc_trim(0); },
  };
}

MemoryUpkeep::MemoryUpkeep(ModuleCache& modules, FrameResolver& frames, DwarfUnwinder& unwinder,
                           HeapAccess heap)
    : modules_(modules), frames_(frames), unwinder_(unwinder), heap_(std::move(heap)) {}

void MemoryUpkeep::TrimHeap(size_t cache_bytes) {
  // mallinfo2 walks every free chunk of the heap under its lock (0.2 to 0.3 ms a call here, 3% of
  // the agent's CPU at an export every 10 s), so it is asked only when something may have left
  // much memory free: the agent grew by kFreeHeapKept since the last look (an interval's burst,
  // freed at its export), or its caches shrank by that much from their peak since then.
  const size_t resident = heap_.resident_bytes();
  cache_bytes_peak_ = std::max(cache_bytes_peak_, cache_bytes);
  const bool grew = resident == 0 || resident > resident_at_heap_check_ + kFreeHeapKept;
  const bool caches_shrank = cache_bytes + kFreeHeapKept < cache_bytes_peak_;
  if (!grew && !caches_shrank) return;
  cache_bytes_peak_ = cache_bytes;
  // malloc's free bytes count trimmed pages too, so they are compared with what was free after
  // the last trim: comparing them with a fixed amount trimmed again at every export once a cache
  // had dropped that much (6 ms each, a third of an export, with every page handed back faulted
  // in again by the next). Free bytes taken into use since lower the mark: what is freed again
  // above it is resident.
  const size_t free_bytes = heap_.free_heap_bytes();
  free_heap_after_trim_ = std::min(free_heap_after_trim_, free_bytes);
  if (free_bytes - free_heap_after_trim_ > kFreeHeapKept) {
    heap_.trim();
    free_heap_after_trim_ = heap_.free_heap_bytes();
  }
  resident_at_heap_check_ = heap_.resident_bytes();
}

void MemoryUpkeep::ReleaseFilePages(uint64_t min_reads) {
  // The mapped ELF files' pages: resident only while read, so RSS shows the agent's own memory
  // and what it reads now (the pages stay in the page cache for the next read).
  const ModuleCfi::RowStats rows = unwinder_.row_stats();
  const uint64_t symbolization_reads = SymbolizationReads();
  const uint64_t reads = symbolization_reads + rows.rows_read + rows.libdwfl_steps;
  file_pages_released_at_ = std::chrono::steady_clock::now();
  if (reads - file_reads_released_ < std::max<uint64_t>(min_reads, 1)) return;
  symbolization_reads_released_ = symbolization_reads;
  file_reads_released_ = reads;
  internal::FileMappingCheck file_mappings;  // reads /proc/self/maps only for files new since
  modules_.ReleasePages(file_mappings);
  unwinder_.ReleasePages(file_mappings);
}

}  // namespace ember
