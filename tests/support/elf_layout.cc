// LoadedEnd: the program headers read with <elf.h>'s structures.
#include "support/elf_layout.h"

#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

namespace ember::testing {

uint64_t LoadedEnd(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  Elf64_Ehdr ehdr{};
  in.read(reinterpret_cast<char*>(&ehdr), sizeof(ehdr));
  uint64_t end = 0;
  for (int i = 0; i < ehdr.e_phnum; ++i) {
    Elf64_Phdr phdr{};
    in.seekg(static_cast<std::streamoff>(ehdr.e_phoff + uint64_t{ehdr.e_phentsize} * i));
    in.read(reinterpret_cast<char*>(&phdr), sizeof(phdr));
    if (phdr.p_type == PT_LOAD) end = std::max<uint64_t>(end, phdr.p_offset + phdr.p_filesz);
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return (end + page - 1) / page * page;
}

}  // namespace ember::testing
