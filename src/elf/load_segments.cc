// ReadLoadSegments, the one reader of PT_LOAD headers, and MappedSegment and LoadBias, the one
// computation that places an ELF file's mapping.
#include "elf/load_segments.h"

#include <elf.h>
#include <gelf.h>
#include <libelf.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ember {
namespace {
constexpr uint64_t kPage = 4096;
constexpr uint64_t kPageMask = ~(kPage - 1);

// Its file bytes and their pages lie below 2^64: a header no linker writes is not placed.
bool InRange(const LoadSegment& s) {
  return s.file_size <= UINT64_MAX - s.offset && s.file_size <= UINT64_MAX - kPage &&
         s.vaddr <= UINT64_MAX - kPage - s.file_size;
}
}  // namespace

absl::StatusOr<std::vector<LoadSegment>> ReadLoadSegments(Elf* elf) {
  size_t count = 0;
  if (elf == nullptr || elf_getphdrnum(elf, &count) != 0) {
    return absl::DataLossError(
        absl::StrCat("unreadable program header table (", elf_errmsg(-1), ")"));
  }
  // libelf counts only the headers that lie inside the image: a table cut off by the end of the
  // file would lose its last segments without a word.
  GElf_Ehdr ehdr;
  size_t image_size = 0;
  if (gelf_getehdr(elf, &ehdr) == nullptr || elf_rawfile(elf, &image_size) == nullptr) {
    return absl::DataLossError(absl::StrCat("unreadable ELF header (", elf_errmsg(-1), ")"));
  }
  const uint64_t declared = ehdr.e_phnum == PN_XNUM ? count : ehdr.e_phnum;
  const uint64_t table_size =
      std::max<uint64_t>(gelf_fsize(elf, ELF_T_PHDR, 1, EV_CURRENT), ehdr.e_phentsize) * declared;
  if (declared != count ||
      (count > 0 && (ehdr.e_phoff > image_size || table_size > image_size - ehdr.e_phoff))) {
    return absl::DataLossError("program header table extends past the end of the file");
  }
  std::vector<LoadSegment> segments;
  for (size_t i = 0; i < count; ++i) {
    GElf_Phdr phdr;
    if (gelf_getphdr(elf, static_cast<int>(i), &phdr) == nullptr) {
      return absl::DataLossError(
          absl::StrCat("unreadable program header ", i, " (", elf_errmsg(-1), ")"));
    }
    if (phdr.p_type != PT_LOAD) continue;
    segments.push_back({.offset = phdr.p_offset,
                        .vaddr = phdr.p_vaddr,
                        .file_size = phdr.p_filesz,
                        .mem_size = phdr.p_memsz,
                        .executable = (phdr.p_flags & PF_X) != 0,
                        .writable = (phdr.p_flags & PF_W) != 0,
                        .align = phdr.p_align});
  }
  return segments;
}

const LoadSegment* MappedSegment(std::span<const LoadSegment> segments,
                                 const FileMapping& mapping) {
  const uint64_t length = mapping.end > mapping.start ? mapping.end - mapping.start : 0;
  // The loader maps a segment from its first file page to the page its file bytes end in, at the
  // same place within the page as in the file (offset and address are congruent modulo the
  // page), so a mapping of it starts at one of those pages and ends by the last. mprotect
  // (RELRO) can split that mapping, but every part stays within the segment's pages.
  const LoadSegment* fitting = nullptr;
  const LoadSegment* holding = nullptr;  // holds the first byte, but the mapping runs past it
  for (const LoadSegment& s : segments) {
    const uint64_t first_page = s.offset & kPageMask;
    if (!InRange(s) || mapping.file_offset < first_page ||
        mapping.file_offset >= s.offset + s.file_size) {
      continue;
    }
    const uint64_t mapped_bytes =
        ((s.vaddr + s.file_size + kPage - 1) & kPageMask) - (s.vaddr & kPageMask);
    const uint64_t into = mapping.file_offset - first_page;
    const bool fits = into <= mapped_bytes && length <= mapped_bytes - into;
    // Two segments can share a page (LLD puts code right after read-only data): the one of the
    // mapping's kind is the one mapped there with its permissions.
    const LoadSegment** slot = fits ? &fitting : &holding;
    if (*slot == nullptr ||
        (s.executable == mapping.executable && (*slot)->executable != mapping.executable)) {
      *slot = &s;
    }
  }
  return fitting != nullptr ? fitting : holding;
}

std::optional<uint64_t> LoadBias(std::span<const LoadSegment> segments,
                                 const FileMapping& mapping) {
  const LoadSegment* s = MappedSegment(segments, mapping);
  if (s == nullptr) return std::nullopt;
  // The mapping's first byte is file byte `file_offset`, which the segment puts at ELF address
  // vaddr + (file_offset - offset).
  return mapping.start - (s->vaddr + (mapping.file_offset - s->offset));
}

std::optional<uint64_t> CodeOffsetToElfAddress(std::span<const LoadSegment> segments,
                                               uint64_t file_offset) {
  std::optional<uint64_t> bias = LoadBias(segments, {.start = file_offset,
                                                     .end = file_offset + 1,
                                                     .file_offset = file_offset,
                                                     .executable = true});
  if (!bias.has_value()) return std::nullopt;
  return file_offset - *bias;
}

}  // namespace ember
