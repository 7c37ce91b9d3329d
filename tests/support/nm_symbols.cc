// CommandOutput through popen; NmSymbols parses nm's "<address> [<size>] <type> <name>" lines.
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

std::vector<NmSymbol> NmSymbols(const std::string& path, const NmQuery& query) {
  std::vector<NmSymbol> symbols;
  std::istringstream lines(CommandOutput(std::string(EMBER_NM) + " --defined-only -S " +
                                         (query.dynamic ? "-D " : "") +
                                         (query.demangle ? "-C " : "") + "'" + path + "'"));
  for (std::string line; std::getline(lines, line);) {
    // "<address> <size> <type> <name>", or "<address> <type> <name>" for a symbol without a
    // size (nm pads sizes to the address width, so a one-letter field is the type).
    std::istringstream in(line);
    std::string address, second;
    if (!(in >> address >> second)) continue;
    const bool sized = second.size() > 1;
    std::string type = second;
    if (sized && !(in >> type)) continue;
    if (type.size() != 1 ||
        (!query.types.empty() && query.types.find(type[0]) == std::string_view::npos)) {
      continue;
    }
    NmSymbol symbol;
    symbol.address = std::stoull(address, nullptr, 16);
    symbol.size = sized ? std::stoull(second, nullptr, 16) : 0;
    symbol.type = type[0];
    std::getline(in >> std::ws, symbol.name);
    if (!query.sized_only || symbol.size > 0) symbols.push_back(symbol);
  }
  return symbols;
}

std::vector<NmSymbol> NmSizedSymbols(const std::string& path, std::string_view types,
                                     bool demangle) {
  return NmSymbols(path, {.types = types, .demangle = demangle, .sized_only = true});
}

}  // namespace ember::testing
