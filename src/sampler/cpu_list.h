// Parses the kernel's CPU list format ("0-3,8,10-11"), as in /sys/devices/system/cpu/online.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ember {

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text);

}  // namespace ember
