// When the agent reads the kernel's symbols again. Modules and BPF programs loaded after the
// start are not in the table it read then, and their frames would take the name of whatever
// symbol lies below them. It reads them again at once when the list of modules changed, and, for
// BPF programs (which /proc/modules does not list), at most once per `recheck` while frames keep
// being named above the kernel image.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace ember {

class KernelSymbolsRefresh {
 public:
  using Clock = std::chrono::steady_clock;

  // `modules` is /proc/modules as read with the symbols (nullopt where it cannot be read: a
  // kernel without loadable modules).
  KernelSymbolsRefresh(std::optional<absl::string_view> modules, Clock::time_point read_at,
                       Clock::duration recheck);

  // Whether to read the symbols now: `modules` is /proc/modules now, `misses_past_image` the
  // resolver's count of kernel frames symbolized above the kernel image so far. A yes counts the
  // symbols as read at `now`, with these.
  bool Check(std::optional<absl::string_view> modules, uint64_t misses_past_image,
             Clock::time_point now);

 private:
  static std::optional<size_t> Fingerprint(std::optional<absl::string_view> modules);

  std::optional<size_t> modules_;
  uint64_t misses_past_image_ = 0;
  Clock::time_point read_at_;
  Clock::duration recheck_;
};

}  // namespace ember
