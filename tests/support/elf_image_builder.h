// ELF files a test writes by hand: a 64-bit little-endian x86-64 header, the program headers it
// is given, and zeros. Enough for the readers that place a file by its PT_LOAD segments.
#pragma once

#include <elf.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ember::testing {

struct ElfImageSpec {
  uint16_t type = ET_DYN;
  uint64_t entry = 0;
  // Written right after the ELF header, as given.
  std::vector<Elf64_Phdr> program_headers = {};
  // The file's size: zeros follow the headers. Never less than the headers take.
  uint64_t size = 0x1000;
  // Overrides of the header's program header table fields, for a corrupt table.
  std::optional<uint64_t> phoff = std::nullopt;
  std::optional<uint16_t> phnum = std::nullopt;
};

// The file's bytes.
std::string ElfImageBytes(const ElfImageSpec& spec);
// Writes the file to `path`; false when it cannot.
bool WriteElfImage(const std::string& path, const ElfImageSpec& spec);

}  // namespace ember::testing
