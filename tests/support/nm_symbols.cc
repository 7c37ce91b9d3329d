// CommandOutput through popen; NmSizedSymbols parses nm's "<address> <size> <type> <name>" lines.
#include "support/nm_symbols.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>

namespace ember::testing {

std::string CommandOutput(const std::string& command) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return output;
  }
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0) << command;
  return output;
}

std::vector<NmSymbol> NmSizedSymbols(const std::string& path, std::string_view types,
                                     bool demangle) {
  std::vector<NmSymbol> symbols;
  std::istringstream lines(CommandOutput(std::string(EMBER_NM) + " --defined-only -S " +
                                         (demangle ? "-C " : "") + "'" + path + "'"));
  for (std::string line; std::getline(lines, line);) {
    // Symbols without a size have three fields: their type letter lands in `size`.
    std::istringstream in(line);
    std::string address, size, type;
    if (!(in >> address >> size >> type) || type.size() != 1 || size.size() == 1 ||
        types.find(type[0]) == std::string_view::npos) {
      continue;
    }
    NmSymbol symbol;
    symbol.address = std::stoull(address, nullptr, 16);
    symbol.size = std::stoull(size, nullptr, 16);
    std::getline(in >> std::ws, symbol.name);
    if (symbol.size > 0) symbols.push_back(symbol);
  }
  return symbols;
}

}  // namespace ember::testing
