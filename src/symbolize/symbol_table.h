// Internal: the function symbols of one ELF file sorted by address, for address -> name lookup.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

typedef struct Elf Elf;

namespace ember::internal {

class SymbolTable {
 public:
  // Reads the section of type `section_type` (SHT_SYMTAB or SHT_DYNSYM) of `elf`; empty when the
  // file has none. Names point into `elf`'s mapping, which must outlive the table.
  static SymbolTable Read(Elf* elf, uint32_t section_type);

  // The (mangled) name of the symbol containing `address`, nullptr when none does. A sized
  // symbol covering the address wins; otherwise the nearest zero-size label before it, up to the
  // next symbol or the end of its section.
  const char* Find(uint64_t address) const;
  bool empty() const { return sized_.empty() && labels_.empty(); }
  // The two arrays; the names are in the file's mapping (page cache), not counted.
  size_t EstimatedBytes() const {
    return sized_.capacity() * sizeof(Sized) + labels_.capacity() * sizeof(Label);
  }

 private:
  struct Sized {
    uint64_t start;
    uint64_t end;      // exclusive
    uint64_t max_end;  // greatest `end` of this and every earlier entry: bounds the backward scan
    const char* name;
    int rank;  // ordering among symbols at one address: higher is preferred
  };
  struct Label {
    uint64_t start;
    uint64_t section_end;
    const char* name;
  };

  std::vector<Sized> sized_;   // sorted by (start, rank)
  std::vector<Label> labels_;  // sorted by start
};

}  // namespace ember::internal
