// ElfImage: an ELF file's loadable segments, for placing it in a process for libdwfl.
#include "unwind/elf_image.h"

#include <elf.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/auxv.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "symbolize/elf_file.h"

namespace ember {

ElfImage::ElfImage(std::string path, std::unique_ptr<internal::ElfFile> file, Elf* elf)
    : path_(std::move(path)), file_(std::move(file)), elf_(elf) {}

ElfImage::~ElfImage() {
  if (file_ == nullptr) elf_end(elf_);  // the vDSO's handle is ours; ElfFile ends its own
}

void ElfImage::ReleasePages(internal::FileMappingCheck& file_mappings) const {
  if (file_ != nullptr) file_->ReleasePages(file_mappings);
}

absl::StatusOr<std::shared_ptr<ElfImage>> ElfImage::Open(const FileLocation& location) {
  auto file = internal::ElfFile::Open(location);
  const std::string path = location.Display();
  if (!file.ok()) return file.status();
  Elf* elf = (*file)->elf();
  std::shared_ptr<ElfImage> image(new ElfImage(path, std::move(file).value(), elf));
  if (absl::Status status = image->ReadSegments(); !status.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", status.message()));
  }
  return image;
}

absl::StatusOr<std::shared_ptr<ElfImage>> ElfImage::OpenOwnVdso() {
  auto* ehdr = reinterpret_cast<const Elf64_Ehdr*>(getauxval(AT_SYSINFO_EHDR));
  if (ehdr == nullptr) return absl::NotFoundError("this process has no vDSO");
  // The section header table comes last in the vDSO image, so it ends the image.
  size_t size = ehdr->e_shoff + size_t{ehdr->e_shnum} * ehdr->e_shentsize;
  if (ehdr->e_shoff == 0 || size > (size_t{1} << 20)) {
    return absl::DataLossError("the vDSO image has no usable section headers");
  }
  // libelf only reads the image: the kernel keeps it mapped for the life of the process.
  Elf* elf = elf_memory(const_cast<char*>(reinterpret_cast<const char*>(ehdr)), size);
  if (elf == nullptr) return absl::DataLossError(absl::StrCat("vDSO: ", elf_errmsg(-1)));
  std::shared_ptr<ElfImage> image(new ElfImage("[vdso]", nullptr, elf));
  if (absl::Status status = image->ReadSegments(); !status.ok()) {
    return absl::DataLossError(absl::StrCat("vDSO: ", status.message()));
  }
  return image;
}

absl::Status ElfImage::ReadSegments() {
  size_t count = 0;
  if (elf_getphdrnum(elf_, &count) != 0) return absl::DataLossError("no program headers");
  for (size_t i = 0; i < count; ++i) {
    GElf_Phdr phdr;
    if (gelf_getphdr(elf_, static_cast<int>(i), &phdr) == nullptr || phdr.p_type != PT_LOAD) {
      continue;
    }
    layout_.segments_.push_back({.offset = phdr.p_offset,
                                 .vaddr = phdr.p_vaddr,
                                 .file_size = phdr.p_filesz,
                                 .mem_size = phdr.p_memsz,
                                 .align = phdr.p_align,
                                 .executable = (phdr.p_flags & PF_X) != 0});
  }
  if (layout_.segments_.empty()) return absl::DataLossError("no loadable segments");
  return absl::OkStatus();
}

ModulePlacement LoadLayout::AtElfAddresses() const {
  if (segments_.empty()) return {};
  return WithBias(0);
}

std::optional<ModulePlacement> LoadLayout::Place(uint64_t start, uint64_t end,
                                                 uint64_t file_offset) const {
  constexpr uint64_t kPageMask = ~uint64_t{4095};
  if (end <= start) return std::nullopt;
  const uint64_t length = end - start;
  // The loader maps a segment from its first file page to the page its file bytes end in, at the
  // same place within the page as in the file (offset and address are congruent modulo the
  // page), so a mapping of it starts at one of those pages and ends by the last. mprotect
  // (RELRO) can split that mapping, but every part stays within the segment's pages.
  const Segment* mapped = nullptr;
  const Segment* holding = nullptr;  // holds the offset, though the mapping runs past its pages
  for (const Segment& s : segments_) {
    const uint64_t first_page = s.offset & kPageMask;
    if (file_offset < first_page || file_offset >= s.offset + s.file_size) continue;
    const uint64_t mapped_bytes =
        ((s.vaddr + s.file_size + 4095) & kPageMask) - (s.vaddr & kPageMask);
    const bool fits = file_offset - first_page <= mapped_bytes &&
                      length <= mapped_bytes - (file_offset - first_page);
    // The callers' mappings are executable: with two segments in one page, the code's wins.
    const Segment** slot = fits ? &mapped : &holding;
    if (*slot == nullptr || (s.executable && !(*slot)->executable)) *slot = &s;
  }
  if (mapped == nullptr) mapped = holding;
  if (mapped == nullptr) return std::nullopt;
  // The mapping's first byte is file byte `file_offset`, which the segment puts at ELF address
  // vaddr + (file_offset - offset).
  const uint64_t bias = start - (mapped->vaddr + file_offset - mapped->offset);
  ModulePlacement placement = WithBias(bias);
  if (placement.high <= placement.low) return std::nullopt;
  return placement;
}

ModulePlacement LoadLayout::WithBias(uint64_t bias) const {
  ModulePlacement placement;
  placement.bias = bias;
  // libdwfl takes the first segment's address rounded down to its alignment as the module start
  // and computes the bias back from it, so report exactly that.
  const Segment& first = segments_.front();
  uint64_t first_vaddr = first.align > 1 ? first.vaddr & ~(first.align - 1) : first.vaddr;
  placement.low = bias + first_vaddr;
  uint64_t elf_end = 0;
  for (const Segment& s : segments_) elf_end = std::max(elf_end, s.vaddr + s.mem_size);
  placement.high = bias + elf_end;
  return placement;
}

}  // namespace ember
