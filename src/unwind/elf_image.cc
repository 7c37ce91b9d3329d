// ElfImage: an ELF file's loadable segments, for placing it in a process for libdwfl.
#include "unwind/elf_image.h"

#include <elf.h>
#include <libelf.h>
#include <sys/auxv.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "elf/elf_file.h"

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
  absl::StatusOr<std::vector<LoadSegment>> segments = ReadLoadSegments(elf_);
  if (!segments.ok()) return segments.status();
  if (segments->empty()) return absl::DataLossError("no loadable segments");
  layout_.segments_ = std::move(segments).value();
  return absl::OkStatus();
}

ModulePlacement LoadLayout::AtElfAddresses() const {
  if (segments_.empty()) return {};
  return WithBias(0);
}

std::optional<ModulePlacement> LoadLayout::Place(uint64_t start, uint64_t end,
                                                 uint64_t file_offset) const {
  if (end <= start) return std::nullopt;
  std::optional<uint64_t> bias = LoadBias(
      segments_, {.start = start, .end = end, .file_offset = file_offset, .executable = true});
  if (!bias) return std::nullopt;
  ModulePlacement placement = WithBias(*bias);
  if (placement.high <= placement.low) return std::nullopt;
  return placement;
}

ModulePlacement LoadLayout::WithBias(uint64_t bias) const {
  ModulePlacement placement;
  placement.bias = bias;
  // libdwfl takes the first segment's address rounded down to its alignment as the module start
  // and computes the bias back from it, so report exactly that.
  const LoadSegment& first = segments_.front();
  uint64_t first_vaddr = first.align > 1 ? first.vaddr & ~(first.align - 1) : first.vaddr;
  placement.low = bias + first_vaddr;
  uint64_t elf_end = 0;
  for (const LoadSegment& s : segments_) elf_end = std::max(elf_end, s.vaddr + s.mem_size);
  placement.high = bias + elf_end;
  return placement;
}

}  // namespace ember
