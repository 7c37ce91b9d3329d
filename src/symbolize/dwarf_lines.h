// Internal: address -> source file:line and the chain of inlined functions, from an ELF file's
// DWARF (line tables and the DIE tree), via libdw.
#pragma once

#include <elfutils/libdw.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "symbolize/elf_module.h"

namespace ember::internal {

class DwarfLines {
 public:
  // `elf` must carry .debug_info and outlive this object. Without DWARF every lookup misses.
  explicit DwarfLines(Elf* elf);
  ~DwarfLines();
  DwarfLines(const DwarfLines&) = delete;
  DwarfLines& operator=(const DwarfLines&) = delete;

  bool valid() const { return dwarf_ != nullptr; }

  // Fills symbol->source_file, ->line and ->inlined for `address` (SourceSymbol says what each
  // holds). When the code there was inlined, source_file:line is the call site in the outermost
  // function (what addr2line -i prints last), so it agrees with the symbol name it is reported
  // with; the inlined functions are listed innermost first. Leaves what it cannot find untouched.
  void Lookup(uint64_t address, SourceSymbol* symbol);

  // What the lookups have cached so far, counted as they add it: this object's indexes and names
  // (hash nodes, arrays, string blocks), plus kLineRowBytes per row of every line table libdw
  // decoded for them (libdw keeps those until dwarf_end).
  size_t EstimatedBytes() const { return bytes_; }
  static constexpr size_t kLineRowBytes = 48;  // sizeof(struct Dwarf_Line_s) plus its array slot

 private:
  // The concrete functions of a compile unit, found by one walk over it, so that a lookup
  // descends only into the one function that holds the address, not the whole unit.
  struct CuIndex {
    struct Function {
      uint64_t low;
      uint64_t high;  // exclusive
      uint64_t die_offset;
    };
    std::vector<Function> functions;  // concrete (out-of-line) functions, sorted by low
  };

  // Finds the CU DIE offset covering `address` by scanning CU ranges, for files without (or with
  // incomplete) .debug_aranges. Built on first use.
  bool FindCuByRanges(uint64_t address, uint64_t* cu_offset);
  const CuIndex& IndexOf(Dwarf_Die* cu);
  void IndexFunctions(Dwarf_Die* scope, bool in_function, int depth, CuIndex* index);
  // Fills scope_of_ for the functions declared under `scope`.
  void IndexScopeNames(Dwarf_Die* scope, const std::string& prefix, int depth);
  // The inlined_subroutine DIEs holding `address`, innermost first.
  std::vector<Dwarf_Die> InlineChain(Dwarf_Die* cu, uint64_t address);
  // The name an inlined_subroutine DIE's abstract origin gives its function, demangled, cached
  // per origin.
  const std::string& InlineName(Dwarf_Die* inlined);
  std::string NameOfOrigin(Dwarf_Die* origin);

  Dwarf* dwarf_;
  bool cu_ranges_built_ = false;
  struct CuRange {
    uint64_t low;
    uint64_t high;
    uint64_t cu_offset;
  };
  std::vector<CuRange> cu_ranges_;                  // sorted by low
  std::unordered_map<uint64_t, CuIndex> cu_index_;  // by CU DIE offset
  // C++ functions without a linkage name (internal linkage) declared in a namespace or class:
  // its qualified name, so that "ns::Scale" does not show as a bare "Scale". Built per compile
  // unit on the first such name it needs.
  std::unordered_map<uint64_t, std::string> scope_of_;      // by declaration DIE offset
  std::unordered_set<uint64_t> scope_names_indexed_;        // CU DIE offsets
  std::unordered_map<uint64_t, std::string> inline_names_;  // by abstract origin DIE offset
  size_t bytes_ = sizeof(DwarfLines);
};

}  // namespace ember::internal
