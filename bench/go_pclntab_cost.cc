// build/go_pclntab_cost FILE...: the cost of Go's symbol table (.gopclntab) in a Go binary: opening
// it as the agent does (found by its section, or by a scan of the read-only segments when the file
// has no section headers), then a lookup (name, file:line, inline frames) and a stack-pointer
// delta (the unwinder's row) at every 61st byte of the text (an odd stride, so no alignment of
// function entries favours or hides a case), each address once, as the agent asks. With
// NO_SECTIONS=1 each file is first copied without its section headers.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "elf/elf_file.h"
#include "symbolize/go_pclntab.h"

namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// A copy of `path` with e_shoff, e_shnum and e_shstrndx zeroed.
std::string WithoutSectionHeaders(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 64) return "";
  std::memset(bytes.data() + 0x28, 0, 8);
  std::memset(bytes.data() + 0x3c, 0, 4);
  const std::string out = "/tmp/go_pclntab_cost_no_sections";
  std::ofstream(out, std::ios::binary | std::ios::trunc) << bytes;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s GO_BINARY... (NO_SECTIONS=1: without section headers)\n",
                 argv[0]);
    return 2;
  }
  const bool no_sections = std::getenv("NO_SECTIONS") != nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string path = no_sections ? WithoutSectionHeaders(argv[i]) : argv[i];
    // Opening: the median of 9 (the file's pages are in the page cache after the first).
    std::vector<double> opens;
    std::unique_ptr<ember::internal::ElfFile> file;
    std::unique_ptr<ember::internal::GoPclntab> table;
    for (int run = 0; run < 9; ++run) {
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<std::unique_ptr<ember::internal::ElfFile>> opened =
          ember::internal::ElfFile::Open(path);
      if (!opened.ok()) {
        std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
        return 1;
      }
      absl::StatusOr<std::unique_ptr<ember::internal::GoPclntab>> read =
          ember::internal::GoPclntab::Open(ember::internal::GoImageOfElf((*opened)->elf()));
      opens.push_back(Seconds(std::chrono::steady_clock::now() - start));
      if (!read.ok()) {
        std::fprintf(stderr, "%s: %s\n", argv[i], read.status().ToString().c_str());
        return 1;
      }
      table = std::move(*read);
      file = std::move(*opened);
    }
    std::sort(opens.begin(), opens.end());
    // Every function's entry and middle: walk the covered range by the functions lookups find.
    std::vector<uint64_t> addresses;
    const auto [low, high] = table->pc_range();
    ember::internal::GoSymbol symbol;
    size_t inlined = 0, with_line = 0;
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t pc = low; pc < high; pc += 61) {
      if (!table->Lookup(pc, &symbol)) continue;
      addresses.push_back(pc);
      if (symbol.line > 0) ++with_line;
      if (!symbol.inlined.empty()) ++inlined;
    }
    const double lookups = Seconds(std::chrono::steady_clock::now() - start);
    const auto sp_start = std::chrono::steady_clock::now();
    size_t deltas = 0;
    for (uint64_t pc : addresses) deltas += table->SpDelta(pc).has_value();
    const double sp = Seconds(std::chrono::steady_clock::now() - sp_start);
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf(
        "%s%s: Go table version %d, %u functions; open %.2f ms (median of 9, slowest %.2f ms); "
        "%zu addresses (stride 61 B): lookup %.2f us each (%zu with a line, %zu in inlined code), "
        "stack-pointer delta %.2f us each (%zu found); peak RSS %.1f MB\n",
        argv[i], no_sections ? " (no section headers)" : "", table->version(),
        table->function_count(), opens[opens.size() / 2] * 1e3, opens.back() * 1e3,
        addresses.size(), lookups / std::max<size_t>(addresses.size(), 1) * 1e6, with_line, inlined,
        sp / std::max<size_t>(addresses.size(), 1) * 1e6, deltas, usage.ru_maxrss / 1024.0);
  }
  return 0;
}
