// CheckDebugFile: the ELF and build-id check of a fetched debug file.
#include "symbolize/debug_file_source.h"

#include <memory>

#include "absl/strings/ascii.h"
#include "common/untrusted_open.h"
#include "elf/elf_file.h"
#include "elf/sigbus_guard.h"

namespace ember {

bool IsBuildIdText(absl::string_view text) {
  if (text.size() < 2 || text.size() > 128 || text.size() % 2 != 0) return false;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

DebugFileCheck CheckDebugFile(const std::string& path, absl::string_view build_id) {
  // A separate debug file's program headers describe the binary's contents, which it no longer
  // carries: only its sections are checked against its size (check_segments=false).
  if (!OpenUntrusted(FileLocation(path)).ok()) return DebugFileCheck::kUnreadable;
  DebugFileCheck result = DebugFileCheck::kNotElf;
  absl::StatusOr<std::unique_ptr<internal::ElfFile>> file = absl::UnavailableError("not read");
  // The file is the agent's own, but the server chose its bytes, and it may change under the
  // read: a fault reads as "not ELF", and what libelf made of it is kept, never used again.
  const bool read = internal::RunCatchingSigbus([&] {
    file = internal::ElfFile::Open(FileLocation(path), /*check_segments=*/false);
    if (!file.ok()) return;
    result =
        (*file)->BuildId() == build_id ? DebugFileCheck::kOk : DebugFileCheck::kBuildIdMismatch;
  });
  if (!read) {
    if (file.ok()) internal::KeepAbandoned(file->release());
    return DebugFileCheck::kNotElf;
  }
  return result;
}

}  // namespace ember
