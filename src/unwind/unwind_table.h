// A whole file's .eh_frame CFI as the sorted row table the BPF unwinder binary-searches: each row
// holds from its pc to the next row's, and says how to find the caller when the walk can do it
// with a couple of reads (the row layout: bpf/sample_record.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "unwind/cfi_row.h"
#include "unwind/elf_image.h"

extern "C" {
#include "sample_record.h"
}

namespace ember {

static_assert(sizeof(ember_unwind_row) == 16);

struct UnwindTableStats {
  size_t fdes = 0;       // entries of .eh_frame_hdr's search table
  size_t rows_none = 0;  // rows the BPF walk cannot apply (EMBER_UNWIND_ROW_NONE)
};

// The table of `image` (x86-64, with .eh_frame_hdr): rows sorted by pc (ELF addresses), adjacent
// equal rows merged, an EMBER_UNWIND_ROW_NONE row where an FDE ends and no other starts. An error
// when the file has no usable .eh_frame_hdr or the table would exceed
// EMBER_MAX_UNWIND_ROWS_PER_FILE rows. Reads the file's mapping: callers run it under
// internal::RunCatchingSigbus, and after a fault leak what it held.
absl::StatusOr<std::vector<ember_unwind_row>> BuildUnwindTable(const ElfImage& image,
                                                               UnwindTableStats* stats = nullptr);

// A table's bucket index (ember_unwind_mapping): buckets[b] is the index of the row in force at
// base + (b << shift), and there are at most as many buckets as rows (none for no rows).
struct UnwindBuckets {
  uint64_t base = 0;
  uint8_t shift = 0;
  std::vector<uint32_t> first_rows;
};
UnwindBuckets BucketsOf(const std::vector<ember_unwind_row>& rows);

// The BPF form of one CFI row (from CompactRowOf, RowRegisters::kWalk). NONE and OUTERMOST rows
// carry nothing else, so that equal rows compare equal field by field.
ember_unwind_row UnwindRowOf(const CfiRow& row, uint64_t pc);

}  // namespace ember
