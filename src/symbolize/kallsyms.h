// Kernel symbols from /proc/kallsyms: address -> function name (and module) for kernel frames.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ember {

struct KernelSymbol {
  uint64_t address = 0;
  std::string name;
  std::string module;  // "" for vmlinux, else the module name, e.g. "ext4"
};

// An immutable, address-sorted table of kernel text symbols.
class KernelSymbols {
 public:
  // Parses the contents of /proc/kallsyms. Lines that do not parse are skipped. Fails when no
  // line has a non-zero address: that is what kptr_restrict shows an unprivileged reader.
  static absl::StatusOr<KernelSymbols> Parse(std::string_view text);
  // Reads and parses `path`, failing with a message that says how to fix it when the file is
  // unreadable or all addresses are 0 (kernel.kptr_restrict, or not root).
  static absl::StatusOr<KernelSymbols> Load(const std::string& path = "/proc/kallsyms");

  // The text symbol (t/T/w/W) with the greatest address <= `address`; nullptr below the first.
  const KernelSymbol* Lookup(uint64_t address) const;
  size_t size() const { return symbols_.size(); }

 private:
  std::vector<KernelSymbol> symbols_;  // sorted by address
};

}  // namespace ember
