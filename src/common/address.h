// Distinct types for the three address spaces a native frame passes through. Most symbolization
// bugs are mix-ups between them, so they never convert implicitly.
#pragma once

#include <cstdint>

namespace ember {

// Virtual address in a running process (an instruction pointer from a sample).
struct ProcessAddress {
  uint64_t value = 0;
};

// Byte offset in the mapped file: mapping pgoff + (ip - mapping start).
struct FileOffset {
  uint64_t value = 0;
};

// Virtual address as the ELF file's program headers and symbols state it.
struct ElfAddress {
  uint64_t value = 0;
};

}  // namespace ember
