// The decision to read the kernel's symbols again.
#include "agent/kernel_symbols_refresh.h"

#include <functional>
#include <string>

namespace ember {

KernelSymbolsRefresh::KernelSymbolsRefresh(std::optional<std::string_view> modules,
                                           Clock::time_point read_at, Clock::duration recheck)
    : modules_(Fingerprint(modules)), read_at_(read_at), recheck_(recheck) {}

bool KernelSymbolsRefresh::Check(std::optional<std::string_view> modules,
                                 uint64_t misses_past_image, Clock::time_point now) {
  const std::optional<size_t> fingerprint = Fingerprint(modules);
  if (fingerprint == modules_ &&
      (misses_past_image <= misses_past_image_ || now - read_at_ < recheck_)) {
    return false;
  }
  modules_ = fingerprint;
  misses_past_image_ = misses_past_image;
  read_at_ = now;
  return true;
}

// Of each line ("ext4 1040384 3 - Live 0xffffffffc0a00000"), the name, size and state: the use
// count changes whenever a module is used (a mount, a network namespace), its symbols do not.
std::optional<size_t> KernelSymbolsRefresh::Fingerprint(std::optional<std::string_view> modules) {
  if (!modules) return std::nullopt;
  std::string kept;
  std::string_view text = *modules;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    for (int field = 0; !line.empty(); ++field) {
      const size_t end = line.find(' ');
      if (field == 0 || field == 1 || field == 4) kept.append(line.substr(0, end)).push_back(' ');
      line.remove_prefix(end == std::string_view::npos ? line.size() : end + 1);
    }
    kept.push_back('\n');
  }
  return std::hash<std::string>{}(kept);
}

}  // namespace ember
