// A consistent fake CPython interpreter in a sparse memory image, for any supported layout: one
// interpreter, one thread, two frames (`inner` called by `<module>`), each code object with its
// names, file and a line table. Tests (and the fuzz target's seeds) change one value of it at a
// time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "python_memory_image.h"

namespace ember::python::fake {

using fuzzing::ImageTarget;
using fuzzing::MemoryImage;

struct FakeInterpreter {
  // Where everything lives: user-space addresses far apart, so no object overlaps another.
  static constexpr uint64_t kRuntime = 0x10000, kInterp = 0x20000, kTstate = 0x30000,
                            kCframe = 0x38000, kInnerFrame = 0x40000, kOuterFrame = 0x41000,
                            kInnerCode = 0x50000, kOuterCode = 0x51000, kInnerName = 0x60000,
                            kOuterName = 0x61000, kFile = 0x62000, kQualname = 0x63000,
                            kInnerTable = 0x70000, kOuterTable = 0x71000, kCodeType = 0x80000;
  static constexpr uint64_t kThreadId = 0x7f00deadb000;
  static constexpr uint32_t kNativeTid = 4242;
  static constexpr int kInnerFirstLine = 10, kOuterFirstLine = 1;

  explicit FakeInterpreter(uint8_t layout_index);

  // The compact str at `address`, of `kind` (1 with `ascii`, 1, 2 or 4).
  void PutString(uint64_t address, const std::vector<uint32_t>& chars, uint32_t kind, bool ascii);
  // A line table (bytes object) at `address` for the layout's format: `first_line` + 1 for the
  // first code units, + 3 after them (see the .cc for the bytes).
  void PutLineTable(uint64_t address);
  // The byte offset of the innermost frame's instruction (on its line first_line + 3).
  static constexpr int kInnerOffset = 4;

  const CPythonLayout& layout() const { return target.config.layout; }
  // Writes a value into the object holding `address`; the address must be inside one.
  template <typename T>
  void Set(uint64_t address, T value) {
    if (!memory.WriteValue(address, value)) __builtin_trap();
  }

  ImageTarget target;
  MemoryImage memory;
};

}  // namespace ember::python::fake
