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
  uint64_t size = 0;  // 0 when nm gives none
  char type = 0;      // nm's type letter
  std::string name;
};

struct NmQuery {
  std::string_view types = {};  // the nm type letters to keep (e.g. "Tt"); empty keeps every one
  bool dynamic = false;         // the dynamic symbol table (-D) instead of the static one
  bool demangle = false;        // -C
  bool sized_only = false;      // only symbols with a size above zero
};

// The defined symbols of `path`, as `nm --defined-only -S` lists them, in nm's order.
std::vector<NmSymbol> NmSymbols(const std::string& path, const NmQuery& query);

// The symbols of `path` with a size above zero whose nm type letter is one of `types` (e.g. "Tt"),
// demangled (-C) when `demangle`.
std::vector<NmSymbol> NmSizedSymbols(const std::string& path, std::string_view types,
                                     bool demangle);

}  // namespace ember::testing
