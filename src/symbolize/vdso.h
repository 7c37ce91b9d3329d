// Names of code in a process's vDSO, from the kernel's image of it (its .dynsym). The kernel maps
// one image into every 64-bit process and another into 32-bit (ia32, x32) ones, so an image is
// told by its bytes, read from the process, and parsed once for every process that maps it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "elf/load_segments.h"

namespace ember {

class VdsoImage {
 public:
  // Parses an image copied from memory: the bytes of a [vdso] mapping from its start (page
  // padding after the image is fine). Errors: not ELF, no loadable segment, no .dynsym.
  static absl::StatusOr<std::unique_ptr<VdsoImage>> Parse(std::string bytes);
  // The bytes of this process's own vDSO (getauxval(AT_SYSINFO_EHDR)), as far as its headers
  // and sections reach.
  static absl::StatusOr<std::string> OwnImageBytes();

  // The function at `offset` from the mapping's start, nullopt when no symbol covers it. The
  // kernel's own names (`__vdso_clock_gettime`, `__kernel_clock_gettime` on arm64) win over
  // their aliases (`clock_gettime`): they tell the vDSO's code from the C library function of
  // the same name that calls it.
  std::optional<absl::string_view> Symbolize(uint64_t offset) const;
  // As Symbolize, the ELF address (what `nm` shows) for `offset`; nullopt outside its segments.
  std::optional<uint64_t> ToElfAddress(uint64_t offset) const;
  const std::string& build_id() const { return build_id_; }  // lower-case hex, "" when none
  // Tells images apart by all their bytes (trailing zeros aside), never by the build id alone:
  // the bytes come from a process's memory, which it may rewrite while keeping the kernel's
  // build-id note. "#" and the hex hash of the bytes.
  const std::string& identity() const { return identity_; }
  uint64_t identity_hash() const { return identity_hash_; }
  // The bytes identity() hashes: the image without the zeros that pad its mapping.
  absl::string_view content() const;
  // Unique among the images one VdsoImages handed out, never reused: two images of different
  // bytes never share it, whatever their hashes (a key for what is cached of an image). 0 for an
  // image parsed directly.
  uint64_t serial() const { return serial_; }
  const std::string& bytes() const { return bytes_; }
  size_t EstimatedBytes() const;

 private:
  struct Symbol {
    uint64_t start;
    uint64_t end;
    std::string name;
    int rank;
  };
  VdsoImage() = default;
  friend class VdsoImages;

  std::string bytes_;
  std::string build_id_;
  std::string identity_;
  uint64_t identity_hash_ = 0;
  uint64_t serial_ = 0;
  std::vector<LoadSegment> segments_;  // PT_LOAD, in file order
  std::vector<Symbol> symbols_;        // by start, then rank descending
};

// The images seen, by their bytes: each distinct one parsed once. Bounded: a host has one per
// ABI (64-bit, ia32, x32) and kernel, so a few. Past `max_images` a new image takes the place of
// the least recently found one no process holds any more; when every kept image is held, the new
// one is handed out but not kept. So images of processes that went (or rewrote their vDSO) do
// not keep the kernel's out for good, and an odd process's image never displaces one that others
// use.
class VdsoImages {
 public:
  explicit VdsoImages(size_t max_images = 8) : max_images_(max_images) {}
  // The image whose bytes these are; nullptr when they are no vDSO image (counted in refusals).
  // Callers hold the image (a shared_ptr) for as long as their process maps it.
  std::shared_ptr<const VdsoImage> Find(std::string bytes);
  size_t size() const { return images_.size(); }
  uint64_t refusals() const { return refusals_; }

 private:
  struct Kept {
    std::shared_ptr<const VdsoImage> image;
    uint64_t last_found = 0;
  };
  size_t max_images_;
  std::vector<Kept> images_;
  uint64_t tick_ = 0;
  uint64_t next_serial_ = 1;
  uint64_t refusals_ = 0;
};

}  // namespace ember
