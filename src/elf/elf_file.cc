// ElfFile: opening, validating and reading headers of one ELF file with libelf.
#include "elf/elf_file.h"

#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"

namespace ember::internal {
namespace {

absl::Status CorruptError(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(path, ": corrupt or truncated ELF file: ", what));
}

absl::Status LibelfError(const std::string& path, const std::string& what) {
  return CorruptError(path, absl::StrCat(what, " (", elf_errmsg(-1), ")"));
}

bool FitsInFile(uint64_t offset, uint64_t size, uint64_t file_size) {
  return offset <= file_size && size <= file_size - offset;
}

// Validates everything Open() promises lies inside the file.
absl::Status Validate(Elf* elf, const std::string& path, uint64_t file_size, bool check_segments) {
  GElf_Ehdr ehdr;
  if (gelf_getehdr(elf, &ehdr) == nullptr) return LibelfError(path, "bad ELF header");
  if (ehdr.e_type != ET_EXEC && ehdr.e_type != ET_DYN) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not an executable or shared library (ELF type ", ehdr.e_type, ")"));
  }
  // Check the raw header tables against the file size first: libelf quietly reports zero
  // sections when the section header table was cut off, which would hide a truncated file.
  if (ehdr.e_phoff != 0 &&
      !FitsInFile(ehdr.e_phoff, uint64_t{ehdr.e_phnum} * ehdr.e_phentsize, file_size)) {
    return CorruptError(path, "program headers extend past the end of the file");
  }
  if (ehdr.e_shoff != 0 &&
      !FitsInFile(ehdr.e_shoff, uint64_t{std::max<uint16_t>(ehdr.e_shnum, 1)} * ehdr.e_shentsize,
                  file_size)) {
    return CorruptError(path, "section headers extend past the end of the file");
  }
  size_t phnum = 0;
  if (elf_getphdrnum(elf, &phnum) != 0) return LibelfError(path, "bad program header count");
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr phdr;
    if (gelf_getphdr(elf, static_cast<int>(i), &phdr) == nullptr) {
      return LibelfError(path, "unreadable program header");
    }
    if (check_segments && (phdr.p_type == PT_LOAD || phdr.p_type == PT_NOTE) &&
        !FitsInFile(phdr.p_offset, phdr.p_filesz, file_size)) {
      return CorruptError(path, "segment extends past the end of the file");
    }
  }
  size_t shnum = 0;
  size_t shstrndx = 0;
  if (elf_getshdrnum(elf, &shnum) != 0) return LibelfError(path, "bad section header count");
  if (shnum > 0 && elf_getshdrstrndx(elf, &shstrndx) != 0) {
    return LibelfError(path, "bad section name table index");
  }
  if (shnum > 0 && !FitsInFile(ehdr.e_shoff, uint64_t{shnum} * ehdr.e_shentsize, file_size)) {
    return CorruptError(path, "section headers extend past the end of the file");
  }
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr) return LibelfError(path, "unreadable section header");
    if (shdr.sh_type != SHT_NOBITS && !FitsInFile(shdr.sh_offset, shdr.sh_size, file_size)) {
      return CorruptError(path, "section extends past the end of the file");
    }
  }
  return absl::OkStatus();
}

std::string HexString(const unsigned char* bytes, size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    hex.push_back(kDigits[bytes[i] >> 4]);
    hex.push_back(kDigits[bytes[i] & 0xf]);
  }
  return hex;
}

// Looks for an NT_GNU_BUILD_ID note in one block of note data.
std::string BuildIdFromNotes(Elf_Data* data) {
  if (data == nullptr || data->d_buf == nullptr) return "";
  GElf_Nhdr nhdr;
  size_t name_offset = 0;
  size_t desc_offset = 0;
  size_t offset = 0;
  while (offset < data->d_size) {
    size_t next = gelf_getnote(data, offset, &nhdr, &name_offset, &desc_offset);
    if (next == 0) break;
    const char* base = static_cast<const char*>(data->d_buf);
    if (nhdr.n_type == NT_GNU_BUILD_ID && nhdr.n_namesz == sizeof(ELF_NOTE_GNU) &&
        std::memcmp(base + name_offset, ELF_NOTE_GNU, sizeof(ELF_NOTE_GNU)) == 0 &&
        nhdr.n_descsz > 0) {
      return HexString(reinterpret_cast<const unsigned char*>(base + desc_offset), nhdr.n_descsz);
    }
    offset = next;
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<ElfFile>> ElfFile::Open(const FileLocation& location,
                                                       bool check_segments) {
  elf_version(EV_CURRENT);
  absl::StatusOr<UntrustedFile> opened = OpenUntrusted(location);
  if (!opened.ok()) return opened.status();
  const UniqueFd fd = std::move(opened->fd);
  const struct stat& st = opened->st;
  const std::string path = location.Display();
  if (st.st_size < static_cast<off_t>(EI_NIDENT)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an ELF file (too small)"));
  }
  Elf* elf = elf_begin(fd.get(), ELF_C_READ_MMAP, nullptr);
  if (elf == nullptr) return LibelfError(path, "cannot read ELF");
  std::unique_ptr<ElfFile> file(new ElfFile(elf, static_cast<uint64_t>(st.st_size)));
  if (elf_kind(elf) != ELF_K_ELF) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an ELF file"));
  }
  if (absl::Status status = Validate(elf, path, file->file_size_, check_segments); !status.ok())
    return status;
  // The whole file is mapped, so libelf never needs the fd again.
  elf_cntl(elf, ELF_C_FDDONE);
  return file;
}

void ElfFile::ReleasePages(FileMappingCheck& mappings) const {
  size_t size = 0;
  char* image = elf_rawfile(elf_, &size);
  if (image == nullptr || size == 0) return;
  if (image_ == Image::kNotChecked) {
    image_ = mappings.IsFileMappingStart(reinterpret_cast<uintptr_t>(image)) ? Image::kFileMapping
                                                                             : Image::kElsewhere;
  }
  if (image_ == Image::kFileMapping) madvise(image, size, MADV_DONTNEED);
}

bool FileMappingCheck::IsFileMappingStart(uintptr_t address) {
  if (!starts_.has_value()) {
    starts_.emplace();
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
      unsigned long from = 0, to = 0, offset = 0, inode = 0;
      char perms[5] = {};
      if (sscanf(line.c_str(), "%lx-%lx %4s %lx %*s %lu", &from, &to, perms, &offset, &inode) ==
              5 &&
          inode != 0 && offset == 0 && perms[0] == 'r' && perms[1] == '-' && perms[3] == 'p') {
        starts_->insert(from);
      }
    }
  }
  return starts_->contains(address);
}

ElfFile::~ElfFile() { elf_end(elf_); }

std::string ElfFile::BuildId() const {
  // Sections first: separate debug files keep the note section but their segments may not
  // match their contents.
  for (Elf_Scn* scn = elf_nextscn(elf_, nullptr); scn != nullptr; scn = elf_nextscn(elf_, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != SHT_NOTE) continue;
    std::string id = BuildIdFromNotes(elf_getdata(scn, nullptr));
    if (!id.empty()) return id;
  }
  size_t phnum = 0;
  if (elf_getphdrnum(elf_, &phnum) != 0) return "";
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr phdr;
    if (gelf_getphdr(elf_, static_cast<int>(i), &phdr) == nullptr || phdr.p_type != PT_NOTE) {
      continue;
    }
    Elf_Type type = phdr.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR;
    std::string id =
        BuildIdFromNotes(elf_getdata_rawchunk(elf_, phdr.p_offset, phdr.p_filesz, type));
    if (!id.empty()) return id;
  }
  return "";
}

Elf_Scn* ElfFile::FindSection(const char* name) const {
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf_, &shstrndx) != 0) return nullptr;
  for (Elf_Scn* scn = elf_nextscn(elf_, nullptr); scn != nullptr; scn = elf_nextscn(elf_, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr) continue;
    const char* scn_name = elf_strptr(elf_, shstrndx, shdr.sh_name);
    if (scn_name != nullptr && std::strcmp(scn_name, name) == 0) return scn;
  }
  return nullptr;
}

bool ElfFile::HasSectionData(const char* name) const {
  Elf_Scn* scn = FindSection(name);
  GElf_Shdr shdr;
  return scn != nullptr && gelf_getshdr(scn, &shdr) != nullptr && shdr.sh_type != SHT_NOBITS &&
         shdr.sh_size > 0;
}

std::optional<DebugLink> ElfFile::GnuDebugLink() const {
  Elf_Scn* scn = FindSection(".gnu_debuglink");
  if (scn == nullptr) return std::nullopt;
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (data == nullptr || data->d_buf == nullptr || data->d_size < 8) return std::nullopt;
  // Layout: NUL-terminated file name, padding to 4 bytes, then a 4-byte CRC in file byte order.
  const char* base = static_cast<const char*>(data->d_buf);
  size_t name_len = strnlen(base, data->d_size);
  size_t crc_offset = (name_len + 1 + 3) & ~size_t{3};
  if (name_len == 0 || name_len == data->d_size || crc_offset + 4 > data->d_size) {
    return std::nullopt;
  }
  DebugLink link;
  link.file_name.assign(base, name_len);
  // Reading the CRC through libelf's translation gets the byte order right on any host.
  Elf_Data src{};
  src.d_buf = const_cast<char*>(base + crc_offset);
  src.d_type = ELF_T_WORD;
  src.d_size = 4;
  src.d_version = EV_CURRENT;
  Elf_Data dst = src;
  dst.d_buf = &link.crc;
  GElf_Ehdr ehdr;
  if (gelf_getehdr(elf_, &ehdr) == nullptr ||
      gelf_xlatetom(elf_, &dst, &src, ehdr.e_ident[EI_DATA]) == nullptr) {
    return std::nullopt;
  }
  return link;
}

std::optional<uint32_t> FileCrc32(const ElfFile& file) {
  size_t size = 0;
  const char* image = elf_rawfile(file.elf(), &size);
  if (image == nullptr) return std::nullopt;
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes a uInt length: the image goes in chunks.
  constexpr size_t kChunk = size_t{1} << 30;
  for (size_t done = 0; done < size; done += kChunk) {
    const size_t n = std::min(kChunk, size - done);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(image + done), static_cast<uInt>(n));
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace ember::internal
