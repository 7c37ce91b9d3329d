// DwarfLines: line-table and inline-scope lookups with libdw.
#include "symbolize/dwarf_lines.h"

#include <dwarf.h>
#include <elfutils/libdwelf.h>

#include <algorithm>
#include <cstdlib>

#include "common/untrusted_open.h"
#include "symbolize/demangle.h"

namespace ember::internal {
namespace {

// Deeper nesting than this is a corrupt or hostile file, not a program.
constexpr int kMaxScopeDepth = 64;

bool HasAddresses(Dwarf_Die* die) {
  return dwarf_hasattr(die, DW_AT_low_pc) || dwarf_hasattr(die, DW_AT_ranges);
}

// Appends the inlined_subroutine DIEs below `scope` that hold `address`, outermost first.
// Returns whether it found a child scope holding the address.
bool DescendToAddress(Dwarf_Die* scope, uint64_t address, int depth, std::vector<Dwarf_Die>* out) {
  if (depth > kMaxScopeDepth) return false;
  Dwarf_Die child;
  if (dwarf_child(scope, &child) != 0) return false;
  do {
    const int tag = dwarf_tag(&child);
    if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_lexical_block &&
        tag != DW_TAG_try_block && tag != DW_TAG_catch_block) {
      continue;
    }
    if (dwarf_haspc(&child, address) == 1) {
      if (tag == DW_TAG_inlined_subroutine) out->push_back(child);
      DescendToAddress(&child, address, depth + 1, out);
      return true;
    }
    // A block without addresses of its own (GCC leaves some behind) may still hold the inlined
    // code.
    if (tag != DW_TAG_inlined_subroutine && !HasAddresses(&child) &&
        DescendToAddress(&child, address, depth + 1, out)) {
      return true;
    }
  } while (dwarf_siblingof(&child, &child) == 0);
  return false;
}

// DW_AT_call_file:DW_AT_call_line of an inlined_subroutine, the line its caller called it from.
void CallSite(Dwarf_Die* inlined, Dwarf_Files* files, size_t nfiles, const char** file, int* line) {
  *file = nullptr;
  *line = 0;
  Dwarf_Attribute attr;
  Dwarf_Word call_file = 0;
  Dwarf_Word call_line = 0;
  if (files == nullptr ||
      dwarf_formudata(dwarf_attr(inlined, DW_AT_call_file, &attr), &call_file) != 0 ||
      dwarf_formudata(dwarf_attr(inlined, DW_AT_call_line, &attr), &call_line) != 0 ||
      call_file >= nfiles) {
    return;
  }
  *file = dwarf_filesrc(files, call_file, nullptr, nullptr);
  if (*file != nullptr) *line = static_cast<int>(call_line);
}

bool IsCxx(Dwarf_Die* cu) {
  switch (dwarf_srclang(cu)) {
    case DW_LANG_C_plus_plus:
    case DW_LANG_C_plus_plus_03:
    case DW_LANG_C_plus_plus_11:
    case DW_LANG_C_plus_plus_14:
      return true;
    default:
      return false;
  }
}

uint32_t LineNumber(int line) { return line > 0 ? static_cast<uint32_t>(line) : 0; }

// A node of a std::unordered_map or set (next pointer, cached hash) and its bucket pointer; the
// value's own size is added where it is known.
constexpr size_t kNodeBytes = 3 * sizeof(void*) + sizeof(uint64_t);

// Heap bytes of a string: none while it fits in the string itself.
size_t HeapBytes(const std::string& text) {
  static const size_t kInline = std::string().capacity();
  return text.capacity() > kInline ? text.capacity() + 1 : 0;
}

}  // namespace

namespace {

// Whether libdw can read this DWARF without opening a file by a name the file itself carries.
// libdw opens a dwz file named by .gnu_debugaltlink (after its build id under /usr/lib/debug)
// and split units' .dwo files by their DW_AT_comp_dir and name, with a plain blocking open() in
// the agent's own namespace: a workload's binary could name its FIFO or a host file there.
bool NamesNoOtherFile(Dwarf* dwarf) {
  const char* alt_name = nullptr;
  const void* build_id = nullptr;
  const ssize_t id_size = dwelf_dwarf_gnu_debugaltlink(dwarf, &alt_name, &build_id);
  if (id_size != 0) {
    // libdw tries the build id first; when that file is there, the name is never opened.
    if (id_size < 3 || id_size > 64) return false;
    const auto* id = static_cast<const unsigned char*>(build_id);
    std::string path = "/usr/lib/debug/.build-id/";
    static constexpr char kDigits[] = "0123456789abcdef";
    for (ssize_t i = 0; i < id_size; ++i) {
      path.push_back(kDigits[id[i] >> 4]);
      path.push_back(kDigits[id[i] & 0xf]);
      if (i == 0) path.push_back('/');
    }
    path += ".debug";
    if (!OpenUntrusted(FileLocation(path)).ok()) return false;
  }
  Dwarf_CU* cu = nullptr;
  Dwarf_CU* next = nullptr;
  Dwarf_Half version = 0;
  uint8_t unit_type = 0;
  while (dwarf_get_units(dwarf, cu, &next, &version, &unit_type, nullptr, nullptr) == 0) {
    if (unit_type == DW_UT_skeleton) return false;
    cu = next;
  }
  return true;
}

}  // namespace

DwarfLines::DwarfLines(Elf* elf) : dwarf_(dwarf_begin_elf(elf, DWARF_C_READ, nullptr)) {
  if (dwarf_ != nullptr && !NamesNoOtherFile(dwarf_)) {
    dwarf_end(dwarf_);
    dwarf_ = nullptr;
  }
}

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
    bytes_ += cu_ranges_.capacity() * sizeof(CuRange);
  }
  auto it = std::upper_bound(cu_ranges_.begin(), cu_ranges_.end(), address,
                             [](uint64_t a, const CuRange& r) { return a < r.low; });
  if (it == cu_ranges_.begin()) return false;
  --it;
  if (address >= it->high) return false;
  *cu_offset = it->cu_offset;
  return true;
}

void DwarfLines::IndexFunctions(Dwarf_Die* scope, bool in_function, int depth, CuIndex* index) {
  if (depth > kMaxScopeDepth) return;
  Dwarf_Die child;
  if (dwarf_child(scope, &child) != 0) return;
  do {
    switch (dwarf_tag(&child)) {
      case DW_TAG_subprogram: {
        Dwarf_Addr base = 0;
        Dwarf_Addr low = 0;
        Dwarf_Addr high = 0;
        ptrdiff_t offset = 0;
        while ((offset = dwarf_ranges(&child, offset, &base, &low, &high)) > 0) {
          if (high > low) index->functions.push_back({low, high, dwarf_dieoffset(&child)});
        }
        IndexFunctions(&child, true, depth + 1, index);
        break;
      }
      // clang puts namespace functions' definitions inside the namespace.
      case DW_TAG_namespace:
        IndexFunctions(&child, in_function, depth + 1, index);
        break;
      // GCC puts a lambda's body, a member of a local class, inside the enclosing function's
      // blocks; libdw's dwarf_getscopes() does not find it there.
      case DW_TAG_lexical_block:
      case DW_TAG_inlined_subroutine:
      case DW_TAG_class_type:
      case DW_TAG_structure_type:
      case DW_TAG_union_type:
        if (in_function) IndexFunctions(&child, true, depth + 1, index);
        break;
      default:
        break;
    }
  } while (dwarf_siblingof(&child, &child) == 0);
}

void DwarfLines::IndexScopeNames(Dwarf_Die* scope, const std::string& prefix, int depth) {
  if (depth > kMaxScopeDepth) return;
  Dwarf_Die child;
  if (dwarf_child(scope, &child) != 0) return;
  do {
    const int tag = dwarf_tag(&child);
    if (tag == DW_TAG_subprogram) {
      if (!prefix.empty() && !dwarf_hasattr(&child, DW_AT_linkage_name) &&
          !dwarf_hasattr(&child, DW_AT_MIPS_linkage_name)) {
        if (scope_of_.emplace(dwarf_dieoffset(&child), prefix).second) {
          bytes_ += kNodeBytes + sizeof(std::string) + HeapBytes(prefix);
        }
      }
    } else if (tag == DW_TAG_namespace || tag == DW_TAG_class_type ||
               tag == DW_TAG_structure_type || tag == DW_TAG_union_type) {
      const char* name = dwarf_diename(&child);
      if (name == nullptr) {
        // Unnamed classes have no functions worth a name; unnamed namespaces print as the
        // demangler prints them.
        if (tag != DW_TAG_namespace) continue;
        name = "(anonymous namespace)";
      }
      IndexScopeNames(&child, prefix.empty() ? name : prefix + "::" + name, depth + 1);
    }
  } while (dwarf_siblingof(&child, &child) == 0);
}

const DwarfLines::CuIndex& DwarfLines::IndexOf(Dwarf_Die* cu) {
  auto [it, inserted] = cu_index_.try_emplace(dwarf_dieoffset(cu));
  if (inserted) {
    IndexFunctions(cu, false, 0, &it->second);
    std::sort(it->second.functions.begin(), it->second.functions.end(),
              [](const CuIndex::Function& a, const CuIndex::Function& b) { return a.low < b.low; });
    bytes_ +=
        kNodeBytes + sizeof(CuIndex) + it->second.functions.capacity() * sizeof(CuIndex::Function);
    // The unit's line table, which the lookup that indexes it decodes (cached by libdw).
    Dwarf_Lines* lines = nullptr;
    size_t nlines = 0;
    if (dwarf_getsrclines(cu, &lines, &nlines) == 0) bytes_ += nlines * kLineRowBytes;
  }
  return it->second;
}

std::vector<Dwarf_Die> DwarfLines::InlineChain(Dwarf_Die* cu, uint64_t address) {
  std::vector<Dwarf_Die> chain;
  const CuIndex& index = IndexOf(cu);
  auto it = std::upper_bound(index.functions.begin(), index.functions.end(), address,
                             [](uint64_t a, const CuIndex::Function& f) { return a < f.low; });
  if (it != index.functions.begin() && address < (--it)->high) {
    Dwarf_Die function;
    if (dwarf_offdie(dwarf_, it->die_offset, &function) != nullptr) {
      DescendToAddress(&function, address, 0, &chain);
      std::reverse(chain.begin(), chain.end());
    }
    return chain;
  }

  // The index misses functions nested where it does not look (inside classes or other
  // functions): ask libdw, which walks the whole unit. dwarf_getscopes() follows an inlined
  // subroutine into its abstract definition, so it yields only the innermost inline;
  // dwarf_getscopes_die() on that one gives the concrete chain of its callers.
  Dwarf_Die* scopes = nullptr;
  int nscopes = dwarf_getscopes(cu, address, &scopes);
  Dwarf_Die innermost;
  bool inlined = false;
  for (int i = 0; i < nscopes; ++i) {
    const int tag = dwarf_tag(&scopes[i]);
    if (tag == DW_TAG_subprogram) break;
    if (tag == DW_TAG_inlined_subroutine) {
      innermost = scopes[i];
      inlined = true;
      break;
    }
  }
  free(scopes);
  if (!inlined) return chain;
  scopes = nullptr;
  nscopes = dwarf_getscopes_die(&innermost, &scopes);
  for (int i = 0; i < nscopes; ++i) {
    const int tag = dwarf_tag(&scopes[i]);
    if (tag == DW_TAG_subprogram) break;
    if (tag == DW_TAG_inlined_subroutine) chain.push_back(scopes[i]);
  }
  free(scopes);
  return chain;
}

const std::string& DwarfLines::InlineName(Dwarf_Die* inlined) {
  Dwarf_Attribute attr;
  Dwarf_Die origin_mem;
  Dwarf_Die* origin =
      dwarf_formref_die(dwarf_attr(inlined, DW_AT_abstract_origin, &attr), &origin_mem);
  if (origin == nullptr) origin = inlined;
  auto [it, inserted] = inline_names_.try_emplace(dwarf_dieoffset(origin));
  if (!inserted) return it->second;
  it->second = NameOfOrigin(origin);
  bytes_ += kNodeBytes + sizeof(std::string) + HeapBytes(it->second);
  return it->second;
}

std::string DwarfLines::NameOfOrigin(Dwarf_Die* origin) {
  Dwarf_Attribute attr;
  // The linkage name, found through the abstract origin and the declaration, demangles to the
  // same text as the symbol table's names.
  const char* linkage = dwarf_formstring(dwarf_attr_integrate(origin, DW_AT_linkage_name, &attr));
  if (linkage == nullptr) {
    linkage = dwarf_formstring(dwarf_attr_integrate(origin, DW_AT_MIPS_linkage_name, &attr));
  }
  if (linkage != nullptr) return Demangle(linkage);
  const char* name = dwarf_diename(origin);
  if (name == nullptr) return "[inlined]";
  // A C function, or a C++ one with internal linkage (static, or in an unnamed namespace): qualify
  // the latter with the namespaces and classes its declaration sits in.
  Dwarf_Die decl = *origin;
  for (int i = 0; i < kMaxScopeDepth; ++i) {
    Dwarf_Die next;
    if (dwarf_formref_die(dwarf_attr(&decl, DW_AT_specification, &attr), &next) == nullptr &&
        dwarf_formref_die(dwarf_attr(&decl, DW_AT_abstract_origin, &attr), &next) == nullptr) {
      break;
    }
    decl = next;
  }
  Dwarf_Die decl_cu;
  if (dwarf_diecu(&decl, &decl_cu, nullptr, nullptr) != nullptr && IsCxx(&decl_cu)) {
    if (scope_names_indexed_.insert(dwarf_dieoffset(&decl_cu)).second) {
      bytes_ += kNodeBytes;
      IndexScopeNames(&decl_cu, "", 0);
    }
    auto scope = scope_of_.find(dwarf_dieoffset(&decl));
    if (scope != scope_of_.end()) return scope->second + "::" + name;
  }
  return name;
}

void DwarfLines::Lookup(uint64_t address, SourceSymbol* symbol) {
  if (dwarf_ == nullptr) return;
  Dwarf_Die cu_storage;
  Dwarf_Die* cu = dwarf_addrdie(dwarf_, address, &cu_storage);
  if (cu == nullptr) {
    // No (or incomplete) .debug_aranges: clang and some GCC configurations omit it.
    uint64_t cu_offset = 0;
    if (!FindCuByRanges(address, &cu_offset)) return;
    cu = dwarf_offdie(dwarf_, cu_offset, &cu_storage);
    if (cu == nullptr) return;
  }
  Dwarf_Line* row = dwarf_getsrc_die(cu, address);
  if (row == nullptr) return;
  const char* src = dwarf_linesrc(row, nullptr, nullptr);
  int lineno = 0;
  dwarf_lineno(row, &lineno);

  // Walk outwards from the innermost inlined function: each one is located where the one inside
  // it was called from (the innermost at the line table's row), and the outermost call site is
  // the line in the out-of-line function.
  std::vector<Dwarf_Die> chain = InlineChain(cu, address);
  if (!chain.empty()) {
    Dwarf_Files* files = nullptr;
    size_t nfiles = 0;
    if (dwarf_getsrcfiles(cu, &files, &nfiles) != 0) files = nullptr;
    symbol->inlined.reserve(chain.size());
    for (Dwarf_Die& inlined : chain) {
      symbol->inlined.push_back(
          {InlineName(&inlined), src != nullptr ? src : "", LineNumber(lineno)});
      CallSite(&inlined, files, nfiles, &src, &lineno);
    }
  }

  if (src == nullptr) return;
  symbol->source_file = src;
  symbol->line = LineNumber(lineno);
}

}  // namespace ember::internal
