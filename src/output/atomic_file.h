// Writes a whole output file so that readers only ever see the old or the new contents: pprof
// files and the flame graph page are picked up by other tools while the agent keeps running.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace ember {

// Writes `contents` to a temporary file next to `path`, syncs it and renames it over `path`.
// On failure the temporary file is removed and `path` is left untouched.
absl::Status WriteFileAtomically(const std::string& path, std::string_view contents);

}  // namespace ember
