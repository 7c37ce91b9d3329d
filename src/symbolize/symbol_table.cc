// SymbolTable: reading .symtab/.dynsym with libelf and looking addresses up.
#include "symbolize/symbol_table.h"

#include <elf.h>
#include <gelf.h>
#include <libelf.h>

#include <algorithm>
#include <cstring>

namespace ember::internal {
namespace {

struct SectionInfo {
  bool executable = false;
  uint64_t end = 0;
};

// Among aliases at one address (e.g. printf and _IO_printf) prefer a global function, and then
// a name without a leading underscore: the public name is the one a reader recognizes.
int Rank(const GElf_Sym& sym, const char* name) {
  int rank = 0;
  if (GELF_ST_TYPE(sym.st_info) == STT_FUNC || GELF_ST_TYPE(sym.st_info) == STT_GNU_IFUNC) {
    rank += 8;
  }
  switch (GELF_ST_BIND(sym.st_info)) {
    case STB_GLOBAL:
      rank += 4;
      break;
    case STB_WEAK:
      rank += 2;
      break;
    default:
      break;
  }
  if (name[0] != '_') rank += 1;
  return rank;
}

}  // namespace

SymbolTable SymbolTable::Read(Elf* elf, uint32_t section_type) {
  SymbolTable table;
  size_t shnum = 0;
  if (elf_getshdrnum(elf, &shnum) != 0) return table;
  std::vector<SectionInfo> sections(shnum);
  Elf_Scn* symtab = nullptr;
  GElf_Shdr symtab_shdr{};
  Elf_Scn* xindex = nullptr;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr) continue;
    size_t index = elf_ndxscn(scn);
    if (index < shnum) {
      sections[index].executable = (shdr.sh_flags & SHF_EXECINSTR) != 0;
      sections[index].end = shdr.sh_addr + shdr.sh_size;
    }
    if (shdr.sh_type == section_type && symtab == nullptr) {
      symtab = scn;
      symtab_shdr = shdr;
    }
    if (shdr.sh_type == SHT_SYMTAB_SHNDX) xindex = scn;
  }
  if (symtab == nullptr || symtab_shdr.sh_type == SHT_NOBITS) return table;
  Elf_Data* data = elf_getdata(symtab, nullptr);
  if (data == nullptr) return table;
  Elf_Data* xindex_data = xindex != nullptr ? elf_getdata(xindex, nullptr) : nullptr;
  size_t count = symtab_shdr.sh_entsize != 0 ? symtab_shdr.sh_size / symtab_shdr.sh_entsize : 0;

  for (size_t i = 0; i < count; ++i) {
    GElf_Sym sym;
    Elf32_Word extended_index = 0;
    if (gelf_getsymshndx(data, xindex_data, static_cast<int>(i), &sym, &extended_index) ==
        nullptr) {
      continue;
    }
    int type = GELF_ST_TYPE(sym.st_info);
    if (type == STT_SECTION || type == STT_FILE || type == STT_TLS || type == STT_OBJECT) continue;
    size_t shndx = sym.st_shndx == SHN_XINDEX ? extended_index : sym.st_shndx;
    if (shndx == SHN_UNDEF || (shndx >= SHN_LORESERVE && sym.st_shndx != SHN_XINDEX) ||
        shndx >= shnum || !sections[shndx].executable) {
      continue;
    }
    const char* name = elf_strptr(elf, symtab_shdr.sh_link, sym.st_name);
    if (name == nullptr || name[0] == '\0') continue;
    // ARM's mapping symbols ($a, $t, $x, $d) mark code/data regions; they are not functions.
    if (name[0] == '$') continue;
    if (sym.st_size > 0) {
      table.sized_.push_back({sym.st_value, sym.st_value + sym.st_size, 0, name, Rank(sym, name)});
    } else {
      table.labels_.push_back({sym.st_value, sections[shndx].end, name});
    }
  }

  std::sort(table.sized_.begin(), table.sized_.end(), [](const Sized& a, const Sized& b) {
    if (a.start != b.start) return a.start < b.start;
    if (a.rank != b.rank) return a.rank < b.rank;
    return std::strcmp(a.name, b.name) > 0;  // deterministic choice among equals
  });
  uint64_t max_end = 0;
  for (Sized& s : table.sized_) {
    max_end = std::max(max_end, s.end);
    s.max_end = max_end;
  }
  std::sort(table.labels_.begin(), table.labels_.end(),
            [](const Label& a, const Label& b) { return a.start < b.start; });
  table.sized_.shrink_to_fit();
  table.labels_.shrink_to_fit();
  return table;
}

const char* SymbolTable::Find(uint64_t address) const {
  // Last sized symbol starting at or before the address; the preferred alias sorts last.
  auto sized_it = std::upper_bound(sized_.begin(), sized_.end(), address,
                                   [](uint64_t a, const Sized& s) { return a < s.start; });
  // Walk back only while some earlier symbol still reaches past the address (nested or
  // overlapping symbols); for ordinary code this stops at the first step.
  for (auto it = sized_it; it != sized_.begin();) {
    --it;
    if (it->max_end <= address) break;
    if (it->end > address) return it->name;
  }

  auto label_it = std::upper_bound(labels_.begin(), labels_.end(), address,
                                   [](uint64_t a, const Label& l) { return a < l.start; });
  if (label_it == labels_.begin()) return nullptr;
  const Label& label = *std::prev(label_it);
  if (address >= label.section_end) return nullptr;
  // A label reaches only up to the next sized symbol; one at its own address supersedes it.
  if (sized_it != sized_.begin() && std::prev(sized_it)->start >= label.start) return nullptr;
  return label.name;
}

}  // namespace ember::internal
