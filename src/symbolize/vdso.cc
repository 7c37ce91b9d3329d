// VdsoImage: a vDSO image's symbols, read with libelf from a copy of its bytes.
#include "symbolize/vdso.h"

#include <elf.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/auxv.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ember {
namespace {

// An image is two or three pages; anything near this is no vDSO.
constexpr size_t kMaxImageBytes = size_t{1} << 20;

absl::string_view TrimZeros(absl::string_view bytes) {
  const size_t last = bytes.find_last_not_of('\0');
  return bytes.substr(0, last == absl::string_view::npos ? 0 : last + 1);
}

uint64_t HashOf(absl::string_view bytes) {
  return std::hash<std::string_view>()(std::string_view(bytes.data(), bytes.size()));
}

struct ElfEnd {
  void operator()(Elf* elf) const { elf_end(elf); }
};

// The kernel's names first, then global over weak, then the public spelling.
int Rank(const GElf_Sym& sym, absl::string_view name) {
  int rank = 0;
  if (absl::StartsWith(name, "__vdso_") || absl::StartsWith(name, "__kernel_")) rank += 8;
  if (GELF_ST_BIND(sym.st_info) == STB_GLOBAL) rank += 4;
  if (GELF_ST_TYPE(sym.st_info) == STT_FUNC) rank += 2;
  return rank;
}

std::string Hex(const unsigned char* bytes, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 15]);
  }
  return out;
}

std::string BuildId(Elf* elf) {
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != SHT_NOTE) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr || data->d_buf == nullptr) continue;
    GElf_Nhdr nhdr;
    size_t name_offset = 0;
    size_t desc_offset = 0;
    for (size_t offset = 0; offset < data->d_size;) {
      size_t next = gelf_getnote(data, offset, &nhdr, &name_offset, &desc_offset);
      if (next == 0) break;
      const auto* base = static_cast<const unsigned char*>(data->d_buf);
      if (nhdr.n_type == NT_GNU_BUILD_ID && nhdr.n_namesz == sizeof(ELF_NOTE_GNU) &&
          std::memcmp(base + name_offset, ELF_NOTE_GNU, sizeof(ELF_NOTE_GNU)) == 0 &&
          nhdr.n_descsz > 0) {
        return Hex(base + desc_offset, nhdr.n_descsz);
      }
      offset = next;
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<std::string> VdsoImage::OwnImageBytes() {
  const auto* base = reinterpret_cast<const unsigned char*>(getauxval(AT_SYSINFO_EHDR));
  if (base == nullptr) return absl::NotFoundError("this process has no vDSO");
  if (std::memcmp(base, ELFMAG, SELFMAG) != 0) return absl::DataLossError("the vDSO is not ELF");
  // Only the agent's own class is read here: it is the kernel's image for programs like it.
  const auto* ehdr = reinterpret_cast<const Elf64_Ehdr*>(base);
  size_t size = ehdr->e_shoff + size_t{ehdr->e_shnum} * ehdr->e_shentsize;
  const auto* phdrs = reinterpret_cast<const Elf64_Phdr*>(base + ehdr->e_phoff);
  for (int i = 0; i < ehdr->e_phnum; ++i) {
    size = std::max<size_t>(size, phdrs[i].p_offset + phdrs[i].p_filesz);
  }
  if (size > kMaxImageBytes) return absl::DataLossError("the vDSO's headers are implausible");
  return std::string(reinterpret_cast<const char*>(base), size);
}

absl::StatusOr<std::unique_ptr<VdsoImage>> VdsoImage::Parse(std::string bytes) {
  if (bytes.size() < EI_NIDENT || bytes.size() > kMaxImageBytes ||
      std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0) {
    return absl::InvalidArgumentError("not an ELF image");
  }
  elf_version(EV_CURRENT);
  std::unique_ptr<VdsoImage> image(new VdsoImage());
  image->bytes_ = std::move(bytes);
  // libelf checks every header and section it hands out against the image's size.
  std::unique_ptr<Elf, ElfEnd> elf(elf_memory(image->bytes_.data(), image->bytes_.size()));
  if (elf == nullptr || elf_kind(elf.get()) != ELF_K_ELF) {
    return absl::InvalidArgumentError(absl::StrCat("not an ELF image: ", elf_errmsg(-1)));
  }
  absl::StatusOr<std::vector<LoadSegment>> segments = ReadLoadSegments(elf.get());
  if (!segments.ok()) return absl::InvalidArgumentError(segments.status().message());
  image->segments_ = std::move(segments).value();
  if (image->segments_.empty()) return absl::InvalidArgumentError("no loadable segment");

  for (Elf_Scn* scn = elf_nextscn(elf.get(), nullptr); scn != nullptr;
       scn = elf_nextscn(elf.get(), scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != SHT_DYNSYM) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr || shdr.sh_entsize == 0) continue;
    const size_t count = std::min<size_t>(shdr.sh_size / shdr.sh_entsize, 4096);
    for (size_t i = 0; i < count; ++i) {
      GElf_Sym sym;
      if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) continue;
      const int type = GELF_ST_TYPE(sym.st_info);
      if ((type != STT_FUNC && type != STT_NOTYPE) || sym.st_shndx == SHN_UNDEF ||
          sym.st_size == 0 || sym.st_value + sym.st_size < sym.st_value) {
        continue;
      }
      const char* name = elf_strptr(elf.get(), shdr.sh_link, sym.st_name);
      if (name == nullptr || name[0] == '\0') continue;
      image->symbols_.push_back({sym.st_value, sym.st_value + sym.st_size,
                                 std::string(name, strnlen(name, 256)), Rank(sym, name)});
    }
  }
  if (image->symbols_.empty()) return absl::InvalidArgumentError("no function symbols");
  std::sort(image->symbols_.begin(), image->symbols_.end(), [](const Symbol& a, const Symbol& b) {
    return a.start != b.start ? a.start < b.start : a.rank > b.rank;
  });
  image->build_id_ = BuildId(elf.get());
  image->identity_hash_ = HashOf(image->content());
  image->identity_ = absl::StrCat("#", absl::Hex(image->identity_hash_, absl::kZeroPad16));
  return image;
}

std::optional<uint64_t> VdsoImage::ToElfAddress(uint64_t offset) const {
  return CodeOffsetToElfAddress(segments_, offset);
}

std::optional<absl::string_view> VdsoImage::Symbolize(uint64_t offset) const {
  std::optional<uint64_t> address = ToElfAddress(offset);
  if (!address) return std::nullopt;
  // A handful of symbols: the best-ranked one covering the address.
  const Symbol* best = nullptr;
  for (const Symbol& s : symbols_) {
    if (s.start > *address) break;
    if (*address < s.end && (best == nullptr || s.rank > best->rank)) best = &s;
  }
  if (best == nullptr) return std::nullopt;
  return absl::string_view(best->name);
}

size_t VdsoImage::EstimatedBytes() const {
  size_t bytes = sizeof(*this) + bytes_.capacity() + segments_.capacity() * sizeof(LoadSegment) +
                 symbols_.capacity() * sizeof(Symbol);
  for (const Symbol& s : symbols_) bytes += s.name.capacity();
  return bytes;
}

absl::string_view VdsoImage::content() const { return TrimZeros(bytes_); }

std::shared_ptr<const VdsoImage> VdsoImages::Find(std::string bytes) {
  // The mapping is page-sized: the image is its start, the rest zeros. A hash match is only a
  // candidate: the bytes decide.
  const absl::string_view content = TrimZeros(bytes);
  const uint64_t hash = HashOf(content);
  for (Kept& kept : images_) {
    if (kept.image->identity_hash() == hash && kept.image->content() == content) {
      kept.last_found = ++tick_;
      return kept.image;
    }
  }
  absl::StatusOr<std::unique_ptr<VdsoImage>> parsed = VdsoImage::Parse(std::move(bytes));
  if (!parsed.ok()) {
    ++refusals_;
    return nullptr;
  }
  (*parsed)->serial_ = next_serial_++;
  std::shared_ptr<const VdsoImage> image = std::move(parsed).value();
  Kept* slot = nullptr;
  if (images_.size() < max_images_) {
    slot = &images_.emplace_back();
  } else {
    for (Kept& kept : images_) {
      // Held by the table alone: no process maps it now.
      if (kept.image.use_count() == 1 && (slot == nullptr || kept.last_found < slot->last_found)) {
        slot = &kept;
      }
    }
  }
  if (slot != nullptr) *slot = Kept{image, ++tick_};
  return image;
}

}  // namespace ember
