// Where a mapping of an ELF file puts the file: its PT_LOAD segments (read once, here), the one a
// /proc/PID/maps line maps, and the load bias that follows. Every reader of process addresses
// places files through this, because linkers differ: GNU ld's PIE output starts code on a file
// page of its own, LLD's starts it in the page the read-only data ends in and shifts each
// segment's address further than its file offset.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

typedef struct Elf Elf;

namespace ember {

// One PT_LOAD program header.
struct LoadSegment {
  uint64_t offset = 0;  // p_offset
  uint64_t vaddr = 0;   // p_vaddr
  uint64_t file_size = 0;
  uint64_t mem_size = 0;
  bool executable = false;  // PF_X
  bool writable = false;    // PF_W
  uint64_t align = 0;       // p_align
};

// The PT_LOAD program headers of `elf`, in file order, as written: their offsets and sizes are
// not checked against the file here (ElfFile::Open does that). Empty when there is none; an error
// when the program header table cannot be read or runs past the end of the image. Reads the
// file's mapping: call it where a SIGBUS is caught.
absl::StatusOr<std::vector<LoadSegment>> ReadLoadSegments(Elf* elf);

// One line of /proc/PID/maps for the file.
struct FileMapping {
  uint64_t start = 0;  // [start, end) in the process
  uint64_t end = 0;
  uint64_t file_offset = 0;  // of `start`
  bool executable = false;
};

// The segment of `segments` (in file order) that `mapping` maps: one whose pages the mapping lies
// in, of the mapping's kind (code or not) where two share the mapping's pages, the first in the
// file after that; failing that, the first that holds the mapping's first byte. nullptr when none
// holds it.
const LoadSegment* MappedSegment(std::span<const LoadSegment> segments, const FileMapping& mapping);

// Process address minus ELF address of the file `mapping` maps; nullopt when no segment holds the
// mapping's first byte.
std::optional<uint64_t> LoadBias(std::span<const LoadSegment> segments, const FileMapping& mapping);

// The ELF address of the instruction at file offset `file_offset`: as an executable mapping of the
// file from that offset places it (LoadBias), which is where any executable mapping that holds
// the byte puts it, whichever page it starts at. For callers that know the offset but not the
// mapping (frames are cached by file and offset, for every process mapping the file). A byte in a
// page that code shares with read-only data (LLD) is placed by the code, as the process sees it
// there. nullopt when no segment holds the offset.
std::optional<uint64_t> CodeOffsetToElfAddress(std::span<const LoadSegment> segments,
                                               uint64_t file_offset);

}  // namespace ember
