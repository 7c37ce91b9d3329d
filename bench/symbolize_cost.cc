// build/symbolize_cost FILE...: the cost of symbolizing a file's code the way the agent does it,
// each address once (FrameResolver caches the result per address), with DWARF lines and inline
// frames. Prints, per file, the time to the first answer (symbols and DWARF loaded) and the mean
// time per address over every STRIDE-th byte of the executable segments.
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "symbolize/elf_module.h"

namespace {

struct Range {
  uint64_t offset;
  uint64_t size;
};

// File ranges of the executable PT_LOAD segments.
std::vector<Range> CodeRanges(const std::string& path) {
  std::vector<Range> ranges;
  elf_version(EV_CURRENT);
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return ranges;
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  size_t phnum = 0;
  if (elf != nullptr && elf_getphdrnum(elf, &phnum) == 0) {
    for (size_t i = 0; i < phnum; ++i) {
      GElf_Phdr phdr;
      if (gelf_getphdr(elf, static_cast<int>(i), &phdr) != nullptr && phdr.p_type == PT_LOAD &&
          (phdr.p_flags & PF_X) != 0) {
        ranges.push_back({phdr.p_offset, phdr.p_filesz});
      }
    }
  }
  if (elf != nullptr) elf_end(elf);
  close(fd);
  return ranges;
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE... (STRIDE=bytes between addresses, default 61)\n",
                 argv[0]);
    return 2;
  }
  const char* stride_env = std::getenv("STRIDE");
  const uint64_t stride = stride_env != nullptr ? std::strtoull(stride_env, nullptr, 10) : 61;
  for (int i = 1; i < argc; ++i) {
    const std::string path = argv[i];
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<ember::ElfModule>> module = ember::ElfModule::Open(path, path);
    if (!module.ok()) {
      std::fprintf(stderr, "%s\n", module.status().ToString().c_str());
      return 1;
    }
    size_t addresses = 0, named = 0, with_line = 0, inlined = 0, inline_frames = 0;
    double first = -1;
    for (const Range& range : CodeRanges(path)) {
      for (uint64_t offset = range.offset; offset < range.offset + range.size; offset += stride) {
        std::optional<ember::ElfAddress> address =
            (*module)->ToElfAddress(ember::FileOffset{offset});
        if (!address.has_value()) continue;
        std::optional<ember::SourceSymbol> symbol = (*module)->Symbolize(*address);
        if (first < 0) first = Seconds(std::chrono::steady_clock::now() - start);
        ++addresses;
        if (!symbol.has_value()) continue;
        ++named;
        if (symbol->line != 0) ++with_line;
        if (!symbol->inlined.empty()) ++inlined;
        inline_frames += symbol->inlined.size();
      }
    }
    const double total = Seconds(std::chrono::steady_clock::now() - start);
    std::printf(
        "%s: %zu addresses (stride %llu) in %.2f s, first answer after %.0f ms, then %.1f us per "
        "address; %zu named, %zu with a line, %zu in inlined code (%.2f inline frames each)\n",
        path.c_str(), addresses, static_cast<unsigned long long>(stride), total, first * 1e3,
        addresses > 1 ? (total - first) / static_cast<double>(addresses - 1) * 1e6 : 0.0, named,
        with_line, inlined, inlined > 0 ? static_cast<double>(inline_frames) / inlined : 0.0);
  }
  return 0;
}
