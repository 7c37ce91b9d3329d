// The unwinder's view of one ELF file: the opened file, and how a mapping of it places the file
// in an address space.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/untrusted_open.h"
#include "elf/load_segments.h"

typedef struct Elf Elf;

namespace ember {

namespace internal {
class ElfFile;
class FileMappingCheck;
}  // namespace internal

// Where one module lies in a process: libdwfl wants the range of the whole file image and derives
// the load bias from its start.
struct ModulePlacement {
  uint64_t low = 0;   // address of the first PT_LOAD segment's page
  uint64_t high = 0;  // end of the last PT_LOAD segment
  uint64_t bias = 0;  // process address minus ELF virtual address
};

// An ELF file's loadable segments: how a mapping of the file places it. A copy outlives the file.
class LoadLayout {
 public:
  // Placement of the file when the executable mapping [start, end) maps it from `file_offset`
  // on (as /proc/PID/maps states it), by the segment it maps (LoadBias); nullopt when no
  // loadable segment holds that offset.
  std::optional<ModulePlacement> Place(uint64_t start, uint64_t end, uint64_t file_offset) const;
  // The placement at the file's own ELF addresses (bias 0).
  ModulePlacement AtElfAddresses() const;

 private:
  friend class ElfImage;
  ModulePlacement WithBias(uint64_t bias) const;
  std::vector<LoadSegment> segments_;  // PT_LOAD, in file order; never empty once read
};

class ElfImage {
 public:
  // A file on disk (or behind /proc/PID/map_files).
  static absl::StatusOr<std::shared_ptr<ElfImage>> Open(const FileLocation& location);
  // The vDSO of this process: the kernel maps the same image into every process.
  static absl::StatusOr<std::shared_ptr<ElfImage>> OpenOwnVdso();
  ~ElfImage();
  ElfImage(const ElfImage&) = delete;
  ElfImage& operator=(const ElfImage&) = delete;

  // The libelf handle. libelf reference-counts it: elf_begin(-1, ELF_C_READ_MMAP, elf()) gives
  // another owner a handle that stays valid after this image is gone.
  Elf* elf() const { return elf_; }
  const std::string& path() const { return path_; }  // as opened, or "[vdso]"

  const LoadLayout& layout() const { return layout_; }
  std::optional<ModulePlacement> Place(uint64_t start, uint64_t end, uint64_t file_offset) const {
    return layout_.Place(start, end, file_offset);
  }
  ModulePlacement AtElfAddresses() const { return layout_.AtElfAddresses(); }
  // Drops this process's pages of the file's mapping (internal::ElfFile::ReleasePages).
  void ReleasePages(internal::FileMappingCheck& file_mappings) const;

 private:
  ElfImage(std::string path, std::unique_ptr<internal::ElfFile> file, Elf* elf);
  absl::Status ReadSegments();

  std::string path_;
  std::unique_ptr<internal::ElfFile> file_;  // null for the vDSO
  Elf* elf_;
  LoadLayout layout_;
};

}  // namespace ember
