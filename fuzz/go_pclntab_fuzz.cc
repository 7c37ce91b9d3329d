// Go's symbol table comes from the profiled program's binary: any bytes. The input is a table at
// a fixed address; a module data record made here points the inline trees into the input too, so
// that every read of a lookup (names, files, pc-value tables, inline trees) is of fuzzed bytes and
// must stay inside them. Seeds: the .gopclntab sections of the Go fixtures (tests/fixtures/go),
// extracted by scripts/sanitize-and-fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "symbolize/go_pclntab.h"

namespace {

constexpr uint64_t kTableAddress = 0x400000;
constexpr uint64_t kDataAddress = 0x10000000;

uint64_t Word(std::span<const uint8_t> bytes, size_t index) {
  uint64_t value = 0;
  if (8 + (index + 1) * 8 <= bytes.size()) std::memcpy(&value, bytes.data() + 8 + index * 8, 8);
  return value;
}

// An unsigned field of `size` bytes at `offset`; 0 past the end.
uint64_t At(std::span<const uint8_t> bytes, uint64_t offset, size_t size) {
  uint64_t value = 0;
  if (offset <= bytes.size() && size <= bytes.size() - offset) {
    std::memcpy(&value, bytes.data() + offset, size);
  }
  return value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> table(data, size);
  // runtime.firstmoduledata as the linker lays it out: the header's address, the function name
  // table's, minpc and maxpc (the function table's first and last entries, at words 20 and 21,
  // which the reader checks), text at word 22 (the header's, else a made-up one), gofunc at word
  // 38 (Go 1.18) or 40 (Go 1.20), here the table's start.
  const bool go116 = size >= 4 && data[0] == 0xfa;
  const uint64_t nfunc = Word(table, 0);
  const uint64_t functab = Word(table, go116 ? 6 : 7);
  const uint64_t text = go116 ? 0 : Word(table, 2) != 0 ? Word(table, 2) : 0x1000;
  std::vector<uint64_t> moduledata(48, 0);
  moduledata[0] = kTableAddress;
  moduledata[1] = kTableAddress + Word(table, go116 ? 2 : 3);
  if (go116) {
    moduledata[20] = At(table, functab, 8);
    moduledata[21] = At(table, functab + nfunc * 16, 8);
  } else {
    moduledata[20] = text + At(table, functab, 4);
    moduledata[21] = text + At(table, functab + nfunc * 8, 4);
  }
  moduledata[22] = text;
  moduledata[38] = moduledata[40] = kTableAddress;
  ember::internal::GoImage image;
  image.segments.push_back({.vaddr = kTableAddress, .bytes = table, .writable = false});
  image.segments.push_back(
      {.vaddr = kDataAddress,
       .bytes = {reinterpret_cast<const uint8_t*>(moduledata.data()), moduledata.size() * 8},
       .writable = true});
  auto parsed = ember::internal::GoPclntab::Parse(image, kTableAddress, table);
  if (!parsed.ok()) return 0;
  const ember::internal::GoPclntab& pclntab = **parsed;
  const auto [low, high] = pclntab.pc_range();
  ember::internal::GoSymbol symbol;
  // Evenly over the covered range, and its ends.
  constexpr int kLookups = 257;
  for (int i = 0; i <= kLookups; ++i) {
    const uint64_t pc = low + (high - low) / kLookups * static_cast<uint64_t>(i);
    if (pclntab.Lookup(pc, &symbol)) {
      if (symbol.function.empty()) __builtin_trap();
      for (const auto& inlined : symbol.inlined) (void)inlined.function.size();
    }
    pclntab.SpDelta(pc);
    pclntab.PushesFramePointer(pc);
  }
  pclntab.Lookup(high, &symbol);
  pclntab.Lookup(low - 1, &symbol);
  return 0;
}
