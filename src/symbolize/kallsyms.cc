// Parsing and lookup of /proc/kallsyms.
#include "symbolize/kallsyms.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ember {
namespace {

constexpr char kKptrRestrictHint[] =
    "kernel symbol addresses are hidden (all zero): run as root (CAP_SYSLOG) or set "
    "sysctl kernel.kptr_restrict=0";

bool IsTextType(char type) { return type == 't' || type == 'T' || type == 'w' || type == 'W'; }

std::string_view NextField(std::string_view& line) {
  size_t start = line.find_first_not_of(" \t");
  if (start == std::string_view::npos) {
    line = {};
    return {};
  }
  line.remove_prefix(start);
  size_t end = line.find_first_of(" \t");
  std::string_view field = line.substr(0, end);
  line.remove_prefix(end == std::string_view::npos ? line.size() : end);
  return field;
}

}  // namespace

absl::StatusOr<KernelSymbols> KernelSymbols::Parse(std::string_view text) {
  KernelSymbols result;
  bool any_nonzero = false;
  while (!text.empty()) {
    size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);

    // Format: "ffffffff81000000 T _stext" or "ffffffffc0a01000 t ext4_foo\t[ext4]".
    std::string_view addr_field = NextField(line);
    std::string_view type_field = NextField(line);
    std::string_view name = NextField(line);
    if (addr_field.empty() || type_field.size() != 1 || name.empty()) continue;
    uint64_t address = 0;
    auto [ptr, ec] =
        std::from_chars(addr_field.data(), addr_field.data() + addr_field.size(), address, 16);
    if (ec != std::errc() || ptr != addr_field.data() + addr_field.size()) continue;
    if (address != 0) any_nonzero = true;
    if (!IsTextType(type_field[0])) continue;

    std::string_view module = NextField(line);
    if (module.size() >= 2 && module.front() == '[' && module.back() == ']') {
      module = module.substr(1, module.size() - 2);
    } else {
      module = {};
    }
    result.symbols_.push_back(KernelSymbol{address, std::string(name), std::string(module)});
  }
  if (!any_nonzero) {
    if (result.symbols_.empty()) return absl::InvalidArgumentError("no kernel symbols found");
    return absl::PermissionDeniedError(kKptrRestrictHint);
  }
  // Stable, so that of several names at one address the first listed wins, as in perf.
  std::stable_sort(
      result.symbols_.begin(), result.symbols_.end(),
      [](const KernelSymbol& a, const KernelSymbol& b) { return a.address < b.address; });
  return result;
}

absl::StatusOr<KernelSymbols> KernelSymbols::Load(const std::string& path) {
  // /proc files report size 0, so read until EOF rather than by size.
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read kernel symbols from ", path, ": ", std::strerror(errno)));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  absl::StatusOr<KernelSymbols> symbols = Parse(contents.str());
  if (!symbols.ok()) {
    return absl::Status(symbols.status().code(),
                        absl::StrCat(path, ": ", symbols.status().message()));
  }
  return symbols;
}

const KernelSymbol* KernelSymbols::Lookup(uint64_t address) const {
  auto it = std::upper_bound(
      symbols_.begin(), symbols_.end(), address,
      [](uint64_t addr, const KernelSymbol& symbol) { return addr < symbol.address; });
  if (it == symbols_.begin()) return nullptr;
  // With duplicates at one address upper_bound lands after all of them; step to the first.
  auto prev = std::prev(it);
  while (prev != symbols_.begin() && std::prev(prev)->address == prev->address) --prev;
  return &*prev;
}

}  // namespace ember
