// Internal: one opened and validated ELF file (RAII over the fd and libelf handle), plus the few
// header lookups the symbolizer needs. Not part of the library's public API.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "common/untrusted_open.h"

typedef struct Elf Elf;
typedef struct Elf_Scn Elf_Scn;

namespace ember::internal {

struct DebugLink {
  std::string file_name;  // basename of the separate debug file
  uint32_t crc = 0;       // CRC-32 of the whole debug file
};

// Whether an address starts one of this process's private read-only mappings of a file from its
// offset 0 (what libelf's ELF_C_READ_MMAP makes). /proc/self/maps, hundreds of lines, is read at
// the first question, once per check; none when nothing is asked.
class FileMappingCheck {
 public:
  bool IsFileMappingStart(uintptr_t address);

 private:
  std::optional<absl::flat_hash_set<uintptr_t>> starts_;  // empty when the maps cannot be read
};

class ElfFile {
 public:
  // Opens `location` read-only (OpenUntrusted: under its process's root, never blocking, a
  // regular file of the expected identity), maps it, and checks that every header and section it
  // declares lies inside the file, so later reads of a truncated or corrupt file fail cleanly
  // instead of faulting. The fd is closed before returning: a cache of a thousand modules must not
  // hold a thousand fds. Separate debug files pass check_segments=false: their program headers
  // describe the original binary's contents, which they no longer carry.
  static absl::StatusOr<std::unique_ptr<ElfFile>> Open(const FileLocation& location,
                                                       bool check_segments = true);
  ~ElfFile();
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;

  Elf* elf() const { return elf_; }
  uint64_t file_size() const { return file_size_; }

  // Lower-case hex GNU build id, "" when there is none.
  std::string BuildId() const;
  std::optional<DebugLink> GnuDebugLink() const;
  // The first section called `name`, nullptr if none.
  Elf_Scn* FindSection(const char* name) const;
  // True when `name` exists and has contents in this file (not SHT_NOBITS, as in stripped
  // binaries' debug files and debug files' code sections).
  bool HasSectionData(const char* name) const;

  // Drops this process's pages of the file's mapping: they stay in the page cache, and a later
  // read faults them back in. So the agent's resident memory shows what it reads now, not every
  // page it ever read. Only when `mappings` finds a file mapping at the start of the file's image:
  // libelf may have read the file into the heap instead, whose pages must stay. The answer holds
  // for the file's life, so it is asked once.
  void ReleasePages(FileMappingCheck& mappings) const;

 private:
  ElfFile(Elf* elf, uint64_t file_size) : elf_(elf), file_size_(file_size) {}

  enum class Image : uint8_t { kNotChecked, kFileMapping, kElsewhere };

  Elf* elf_;
  uint64_t file_size_;
  mutable Image image_ = Image::kNotChecked;
};

// CRC-32 (the .gnu_debuglink checksum) of the whole file, read through libelf's image of it
// rather than opened again by path; nullopt when there is no image. Reads the file's mapping:
// call it where a SIGBUS is caught.
std::optional<uint32_t> FileCrc32(const ElfFile& file);

}  // namespace ember::internal
