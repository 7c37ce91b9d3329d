// Separate debug files from elsewhere than the local disk (a debuginfod server): what the
// symbolizer asks by build id, never waiting on the network, and the check a fetched file passes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace ember {

class DebugFileSource {
 public:
  virtual ~DebugFileSource() = default;
  // The path, in the agent's own mount namespace, of the debug file fetched for `build_id`
  // (lower-case hex) when one is at hand; else asks for it to be fetched (unless it is on its way
  // or was not found lately) and returns nullopt. Called on the sampling path: never blocks on
  // the network or the disk.
  virtual std::optional<std::string> Find(const std::string& build_id) = 0;
};

// Whether a fetched file is the debug file of `build_id`.
enum class DebugFileCheck : uint8_t {
  kOk,
  kUnreadable,       // could not be opened as a regular file (OpenUntrusted refused or failed)
  kNotElf,           // not an ELF file, or one whose headers lie outside it
  kBuildIdMismatch,  // an ELF file of another (or no) build id
};

// Opens `path` as any file a process names (OpenUntrusted: never blocking, a regular file) and
// reads its ELF headers and build id. Any content is handled: a refusal, never a crash.
DebugFileCheck CheckDebugFile(const std::string& path, absl::string_view build_id);

// A GNU build id as the agent writes it: lower-case hex, an even number of 2 to 128 digits.
bool IsBuildIdText(absl::string_view text);

}  // namespace ember
