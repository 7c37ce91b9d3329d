// Internal: address -> source file:line from an ELF file's DWARF line tables, via libdw.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

typedef struct Elf Elf;
typedef struct Dwarf Dwarf;

namespace ember::internal {

class DwarfLines {
 public:
  // `elf` must carry .debug_info and outlive this object. Without DWARF every lookup misses.
  explicit DwarfLines(Elf* elf);
  ~DwarfLines();
  DwarfLines(const DwarfLines&) = delete;
  DwarfLines& operator=(const DwarfLines&) = delete;

  bool valid() const { return dwarf_ != nullptr; }

  // Source location of `address` as seen from the function symbol containing it: when the code
  // there was inlined, this is the call site in the outermost function (what addr2line -i prints
  // last), so the line agrees with the symbol name it is reported with.
  bool Lookup(uint64_t address, std::string* file, uint32_t* line);

 private:
  // Finds the CU DIE offset covering `address` by scanning CU ranges, for files without (or with
  // incomplete) .debug_aranges. Built on first use.
  bool FindCuByRanges(uint64_t address, uint64_t* cu_offset);

  Dwarf* dwarf_;
  bool cu_ranges_built_ = false;
  struct CuRange {
    uint64_t low;
    uint64_t high;
    uint64_t cu_offset;
  };
  std::vector<CuRange> cu_ranges_;  // sorted by low
};

}  // namespace ember::internal
