// What binutils list of a file, for tests that check the symbolizer's answers against them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ember::testing {

// The standard output of `command`, run by the shell; a test failure when it does not exit 0.
std::string CommandOutput(const std::string& command);

struct NmSymbol {
  uint64_t address = 0;
  uint64_t size = 0;
  std::string name;
};

// The symbols of `path` with a size above zero whose nm type letter is one of `types` (e.g. "Tt"),
// as `nm --defined-only -S` lists them, demangled (-C) when `demangle`.
std::vector<NmSymbol> NmSizedSymbols(const std::string& path, std::string_view types,
                                     bool demangle);

}  // namespace ember::testing
