// Parses the kernel's CPU list format ("0-3,8,10-11"), as in /sys/devices/system/cpu/online.
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ember {

absl::StatusOr<std::vector<int>> ParseCpuList(std::string_view text);

}  // namespace ember
