// DwarfLines: line-table and inline-scope lookups with libdw.
#include "symbolize/dwarf_lines.h"

#include <dwarf.h>
#include <elfutils/libdw.h>

#include <algorithm>
#include <cstdlib>

namespace ember::internal {

DwarfLines::DwarfLines(Elf* elf) : dwarf_(dwarf_begin_elf(elf, DWARF_C_READ, nullptr)) {}

DwarfLines::~DwarfLines() {
  if (dwarf_ != nullptr) dwarf_end(dwarf_);
}

bool DwarfLines::FindCuByRanges(uint64_t address, uint64_t* cu_offset) {
  if (!cu_ranges_built_) {
    cu_ranges_built_ = true;
    Dwarf_CU* cu = nullptr;
    Dwarf_CU* next = nullptr;
    Dwarf_Half version = 0;
    uint8_t unit_type = 0;
    Dwarf_Die cudie;
    while (dwarf_get_units(dwarf_, cu, &next, &version, &unit_type, &cudie, nullptr) == 0) {
      cu = next;
      Dwarf_Addr base = 0;
      Dwarf_Addr low = 0;
      Dwarf_Addr high = 0;
      ptrdiff_t offset = 0;
      while ((offset = dwarf_ranges(&cudie, offset, &base, &low, &high)) > 0) {
        if (high > low) cu_ranges_.push_back({low, high, dwarf_dieoffset(&cudie)});
      }
    }
    std::sort(cu_ranges_.begin(), cu_ranges_.end(),
              [](const CuRange& a, const CuRange& b) { return a.low < b.low; });
  }
  auto it = std::upper_bound(cu_ranges_.begin(), cu_ranges_.end(), address,
                             [](uint64_t a, const CuRange& r) { return a < r.low; });
  if (it == cu_ranges_.begin()) return false;
  --it;
  if (address >= it->high) return false;
  *cu_offset = it->cu_offset;
  return true;
}

bool DwarfLines::Lookup(uint64_t address, std::string* file, uint32_t* line) {
  if (dwarf_ == nullptr) return false;
  Dwarf_Die cu_storage;
  Dwarf_Die* cu = dwarf_addrdie(dwarf_, address, &cu_storage);
  if (cu == nullptr) {
    // No (or incomplete) .debug_aranges: clang and some GCC configurations omit it.
    uint64_t cu_offset = 0;
    if (!FindCuByRanges(address, &cu_offset)) return false;
    cu = dwarf_offdie(dwarf_, cu_offset, &cu_storage);
    if (cu == nullptr) return false;
  }
  Dwarf_Line* row = dwarf_getsrc_die(cu, address);
  if (row == nullptr) return false;
  const char* src = dwarf_linesrc(row, nullptr, nullptr);
  int lineno = 0;
  dwarf_lineno(row, &lineno);

  // dwarf_getscopes() follows an inlined subroutine into its abstract definition, so it yields
  // only the innermost inline; dwarf_getscopes_die() on that one gives the concrete chain of
  // callers, whose outermost inlined_subroutine holds the call site in the symbol's function.
  Dwarf_Die* scopes = nullptr;
  int nscopes = dwarf_getscopes(cu, address, &scopes);
  Dwarf_Die innermost_inline;
  bool inlined = false;
  for (int i = 0; i < nscopes; ++i) {
    int tag = dwarf_tag(&scopes[i]);
    if (tag == DW_TAG_subprogram) break;
    if (tag == DW_TAG_inlined_subroutine) {
      innermost_inline = scopes[i];
      inlined = true;
      break;
    }
  }
  free(scopes);
  scopes = nullptr;
  if (inlined) {
    nscopes = dwarf_getscopes_die(&innermost_inline, &scopes);
    int outermost_inline = -1;
    for (int i = 0; i < nscopes; ++i) {
      int tag = dwarf_tag(&scopes[i]);
      if (tag == DW_TAG_subprogram) break;
      if (tag == DW_TAG_inlined_subroutine) outermost_inline = i;
    }
    Dwarf_Attribute attr;
    Dwarf_Word call_file = 0;
    Dwarf_Word call_line = 0;
    Dwarf_Files* files = nullptr;
    size_t nfiles = 0;
    if (outermost_inline >= 0 &&
        dwarf_formudata(dwarf_attr(&scopes[outermost_inline], DW_AT_call_file, &attr),
                        &call_file) == 0 &&
        dwarf_formudata(dwarf_attr(&scopes[outermost_inline], DW_AT_call_line, &attr),
                        &call_line) == 0 &&
        dwarf_getsrcfiles(cu, &files, &nfiles) == 0 && call_file < nfiles) {
      const char* call_src = dwarf_filesrc(files, call_file, nullptr, nullptr);
      if (call_src != nullptr) {
        src = call_src;
        lineno = static_cast<int>(call_line);
      }
    }
    free(scopes);
  }

  if (src == nullptr) return false;
  *file = src;
  *line = lineno > 0 ? static_cast<uint32_t>(lineno) : 0;
  return true;
}

}  // namespace ember::internal
