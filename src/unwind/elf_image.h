// The unwinder's view of one ELF file: the opened file, shared by every process that maps it,
// and how a mapping of it places the file in an address space.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "symbolize/elf_module.h"

typedef struct Elf Elf;

namespace ember {

namespace internal {
class ElfFile;
}

// Where one module lies in a process: libdwfl wants the range of the whole file image and derives
// the load bias from its start.
struct ModulePlacement {
  uint64_t low = 0;   // address of the first PT_LOAD segment's page
  uint64_t high = 0;  // end of the last PT_LOAD segment
  uint64_t bias = 0;  // process address minus ELF virtual address
};

class ElfImage {
 public:
  // A file on disk (or behind /proc/PID/map_files).
  static absl::StatusOr<std::shared_ptr<ElfImage>> Open(const std::string& path);
  // The vDSO of this process: the kernel maps the same image into every process.
  static absl::StatusOr<std::shared_ptr<ElfImage>> OpenOwnVdso();
  ~ElfImage();
  ElfImage(const ElfImage&) = delete;
  ElfImage& operator=(const ElfImage&) = delete;

  // The libelf handle. libelf reference-counts it: elf_begin(-1, ELF_C_READ_MMAP, elf()) gives
  // another owner a handle that stays valid after this image is gone.
  Elf* elf() const { return elf_; }

  // Placement of the file when `file_offset` of it is mapped at `start`; nullopt when no
  // loadable segment holds that offset.
  std::optional<ModulePlacement> Place(uint64_t start, uint64_t file_offset) const;

 private:
  struct Segment {
    uint64_t offset, vaddr, file_size, mem_size, align;
  };
  ElfImage(std::unique_ptr<internal::ElfFile> file, Elf* elf);
  absl::Status ReadSegments();

  std::unique_ptr<internal::ElfFile> file_;  // null for the vDSO
  Elf* elf_;
  std::vector<Segment> segments_;  // PT_LOAD, in file order
};

// Images by file identity, shared by every process's unwinding state. An image stays alive while
// any process state holds it; the cache itself drops images unused for a few generations.
class ElfImageCache {
 public:
  explicit ElfImageCache(size_t max_images = 1024) : max_images_(max_images) {}

  // The image, opened on first use; nullptr when the file cannot be opened (cached and logged
  // once at debug level).
  std::shared_ptr<ElfImage> Get(const FileIdentity& file, const std::string& open_path);
  std::shared_ptr<ElfImage> Vdso();

  void NextGeneration(int keep_generations = 3);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::shared_ptr<ElfImage> image;  // nullptr: opening failed
    uint64_t last_generation = 0;
  };
  size_t max_images_;
  uint64_t generation_ = 0;
  std::unordered_map<FileIdentity, Entry, FileIdentityHash> entries_;
  std::optional<std::shared_ptr<ElfImage>> vdso_;
};

}  // namespace ember
