// ElfImageBytes: the header and program headers with <elf.h>'s structures.
#include "support/elf_image_builder.h"

#include <algorithm>
#include <cstring>
#include <fstream>

namespace ember::testing {

std::string ElfImageBytes(const ElfImageSpec& spec) {
  Elf64_Ehdr ehdr{};
  std::memcpy(ehdr.e_ident, ELFMAG, SELFMAG);
  ehdr.e_ident[EI_CLASS] = ELFCLASS64;
  ehdr.e_ident[EI_DATA] = ELFDATA2LSB;
  ehdr.e_ident[EI_VERSION] = EV_CURRENT;
  ehdr.e_type = spec.type;
  ehdr.e_machine = EM_X86_64;
  ehdr.e_version = EV_CURRENT;
  ehdr.e_entry = spec.entry;
  ehdr.e_phoff = spec.phoff.value_or(sizeof(Elf64_Ehdr));
  ehdr.e_ehsize = sizeof(Elf64_Ehdr);
  ehdr.e_phentsize = sizeof(Elf64_Phdr);
  ehdr.e_phnum = spec.phnum.value_or(static_cast<uint16_t>(spec.program_headers.size()));
  const size_t headers = sizeof(ehdr) + spec.program_headers.size() * sizeof(Elf64_Phdr);
  std::string image(std::max<size_t>(spec.size, headers), '\0');
  std::memcpy(image.data(), &ehdr, sizeof(ehdr));
  for (size_t i = 0; i < spec.program_headers.size(); ++i) {
    std::memcpy(image.data() + sizeof(ehdr) + i * sizeof(Elf64_Phdr), &spec.program_headers[i],
                sizeof(Elf64_Phdr));
  }
  return image;
}

bool WriteElfImage(const std::string& path, const ElfImageSpec& spec) {
  const std::string image = ElfImageBytes(spec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(image.data(), static_cast<std::streamsize>(image.size()));
  return static_cast<bool>(out.flush());
}

}  // namespace ember::testing
