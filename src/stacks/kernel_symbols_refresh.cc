// The decision to read the kernel's symbols again.
#include "stacks/kernel_symbols_refresh.h"

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ember {

KernelSymbolsRefresh::KernelSymbolsRefresh(std::optional<absl::string_view> modules,
                                           Clock::time_point read_at, Clock::duration recheck)
    : modules_(Fingerprint(modules)), read_at_(read_at), recheck_(recheck) {}

bool KernelSymbolsRefresh::Check(std::optional<absl::string_view> modules,
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
std::optional<size_t> KernelSymbolsRefresh::Fingerprint(std::optional<absl::string_view> modules) {
  if (!modules) return std::nullopt;
  std::string kept;
  for (absl::string_view line : absl::StrSplit(*modules, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    for (size_t field : {0, 1, 4}) {
      if (field < fields.size()) absl::StrAppend(&kept, fields[field], " ");
    }
    kept.push_back('\n');
  }
  return std::hash<std::string>{}(kept);
}

}  // namespace ember
