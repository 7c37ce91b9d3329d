// MappedSegment and LoadBias: the one computation that places an ELF file's mapping.
#include "elf/load_segments.h"

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

}  // namespace ember
