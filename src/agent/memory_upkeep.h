// Keeps the agent's resident memory to what it uses: the pages of mapped ELF files go once read
// (they stay in the page cache for the next read), and free heap goes back to the system once
// enough of it piled up.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "stacks/frame_resolver.h"
#include "symbolize/elf_module.h"
#include "unwind/dwarf_unwinder.h"

namespace ember {

// How often the loop drops the pages of mapped ELF files read since (MemoryUpkeep::InLoop), when
// at least kFileReadsPerLoopRelease were read: the few reads of steady state (CFI rows for the
// stacks the BPF walk left over) wait for the interval's end, as a release reads
// /proc/self/maps, hundreds of lines.
inline constexpr std::chrono::seconds kFilePagesReleasePeriod{1};
inline constexpr uint64_t kFileReadsPerLoopRelease = 256;
// ... and after this many frames symbolized or modules opened since (a few ms of reading).
inline constexpr uint64_t kSymbolizationReadsPerRelease = 128;
// Free heap goes back to the system at an interval's end once more than this was freed since
// the last trim (TrimHeap). Each interval needs about as much again as the last: trimming at every
// export made the next one fault its pages back in (8% of the agent's CPU at 99 Hz on 2 CPUs).
inline constexpr size_t kFreeHeapKept = size_t{8} << 20;

// What TrimHeap reads and does: malloc's and /proc's in the agent, stand-ins in tests.
struct HeapAccess {
  std::function<size_t()> resident_bytes;   // this process's; 0 when they cannot be read
  std::function<size_t()> free_heap_bytes;  // malloc's free bytes (mallinfo2's fordblks)
  std::function<void()> trim;               // hands free pages back (malloc_trim)
};
HeapAccess SystemHeap();

class MemoryUpkeep {
 public:
  // The caches whose files' pages are dropped; they must outlive this.
  MemoryUpkeep(ModuleCache& modules, FrameResolver& frames, DwarfUnwinder& unwinder,
               HeapAccess heap = SystemHeap());

  // After each sample: a burst of new binaries (the start-up's first samples name every running
  // one) reads many files' symbols and DWARF at once, so their pages go every so many reads, not
  // only each second.
  void AfterSample() {
    if (SymbolizationReads() - symbolization_reads_released_ >= kSymbolizationReadsPerRelease) {
      ReleaseFilePages();
    }
  }
  // Each time round the loop: within an interval too, so that symbolizing many new binaries at
  // once (at start-up, or a burst of new processes) does not keep all their pages resident until
  // its end.
  void InLoop(std::chrono::steady_clock::time_point now) {
    if (now - file_pages_released_at_ >= kFilePagesReleasePeriod) {
      ReleaseFilePages(kFileReadsPerLoopRelease);
    }
  }

  // Drops the agent's pages of the mapped ELF files (ElfFile::ReleasePages) when at least
  // `min_reads` reads of them (frames symbolized, modules opened, CFI read; at least one) were
  // counted since the last time: in steady state next to nothing is read, and nothing need be
  // dropped and read again.
  void ReleaseFilePages(uint64_t min_reads = 1);

  // Hands the heap's free pages back to the system (malloc_trim) once more than kFreeHeapKept
  // was freed since the last trim, looking only after the agent grew or its caches shrank.
  // `cache_bytes`: what the agent's caches hold now.
  void TrimHeap(size_t cache_bytes);

 private:
  // Frames symbolized and modules opened so far: the reads of files on the per-sample path.
  uint64_t SymbolizationReads() const { return frames_.stats().misses + modules_.stats().misses; }

  ModuleCache& modules_;
  FrameResolver& frames_;
  DwarfUnwinder& unwinder_;
  HeapAccess heap_;
  // ReleaseFilePages: the file reads counted at its last release (and of them those of
  // SymbolizationReads), and when that was.
  uint64_t file_reads_released_ = 0;
  uint64_t symbolization_reads_released_ = 0;
  std::chrono::steady_clock::time_point file_pages_released_at_;
  // TrimHeap: malloc's free bytes after the last trim; the resident bytes after the last look at
  // the heap, and the caches' largest size since.
  size_t free_heap_after_trim_ = 0;
  size_t resident_at_heap_check_ = 0;
  size_t cache_bytes_peak_ = 0;
};

}  // namespace ember
