// A frame's registers and the stack memory a step reads: what every unwinding step works on.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

namespace ember {

inline constexpr int kCfiRegisterCount = 17;  // x86-64 DWARF: rax..r15, then rip (16)

// A frame's registers; a bit of `known` is set for each register whose value is known.
struct FrameRegisters {
  uint64_t value[kCfiRegisterCount] = {};
  uint32_t known = 0;
  bool Has(int reg) const { return (known >> reg) & 1u; }
  void Set(int reg, uint64_t v) {
    value[reg] = v;
    known |= 1u << reg;
  }
};

// Stack memory: `bytes` copied from address `start`.
struct StackMemory {
  uint64_t start = 0;
  std::span<const uint8_t> bytes;
  std::optional<uint64_t> Read(uint64_t addr) const {
    if (addr < start || addr - start > bytes.size() || bytes.size() - (addr - start) < 8) {
      return std::nullopt;
    }
    uint64_t value;
    std::memcpy(&value, bytes.data() + (addr - start), sizeof(value));
    return value;
  }
};

}  // namespace ember
