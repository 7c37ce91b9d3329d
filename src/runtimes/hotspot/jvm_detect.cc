// libjvm.so detection: the dynamic symbol table's gHotSpotVM* symbols and the file's segments.
#include "runtimes/hotspot/jvm_detect.h"

#include <elf.h>
#include <gelf.h>
#include <libelf.h>

#include <array>
#include <cstring>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "elf/elf_file.h"
#include "elf/sigbus_guard.h"

namespace ember::hotspot {
namespace {

struct SymbolSlot {
  const char* name;
  uint64_t VMStructsSymbols::*member;
};

constexpr std::array<SymbolSlot, 21> kSymbols = {{
    {"gHotSpotVMStructs", &VMStructsSymbols::structs},
    {"gHotSpotVMTypes", &VMStructsSymbols::types},
    {"gHotSpotVMIntConstants", &VMStructsSymbols::int_constants},
    {"gHotSpotVMLongConstants", &VMStructsSymbols::long_constants},
    {"gHotSpotVMStructEntryArrayStride", &VMStructsSymbols::struct_stride},
    {"gHotSpotVMStructEntryTypeNameOffset", &VMStructsSymbols::struct_type_name},
    {"gHotSpotVMStructEntryFieldNameOffset", &VMStructsSymbols::struct_field_name},
    {"gHotSpotVMStructEntryTypeStringOffset", &VMStructsSymbols::struct_type_string},
    {"gHotSpotVMStructEntryIsStaticOffset", &VMStructsSymbols::struct_is_static},
    {"gHotSpotVMStructEntryOffsetOffset", &VMStructsSymbols::struct_offset},
    {"gHotSpotVMStructEntryAddressOffset", &VMStructsSymbols::struct_address},
    {"gHotSpotVMTypeEntryArrayStride", &VMStructsSymbols::type_stride},
    {"gHotSpotVMTypeEntryTypeNameOffset", &VMStructsSymbols::type_type_name},
    {"gHotSpotVMTypeEntrySuperclassNameOffset", &VMStructsSymbols::type_superclass_name},
    {"gHotSpotVMTypeEntrySizeOffset", &VMStructsSymbols::type_size},
    {"gHotSpotVMIntConstantEntryArrayStride", &VMStructsSymbols::int_stride},
    {"gHotSpotVMIntConstantEntryNameOffset", &VMStructsSymbols::int_name},
    {"gHotSpotVMIntConstantEntryValueOffset", &VMStructsSymbols::int_value},
    {"gHotSpotVMLongConstantEntryArrayStride", &VMStructsSymbols::long_stride},
    {"gHotSpotVMLongConstantEntryNameOffset", &VMStructsSymbols::long_name},
    {"gHotSpotVMLongConstantEntryValueOffset", &VMStructsSymbols::long_value},
}};

// Fills the members of `out` named by kSymbols from the symbol tables (.dynsym first: libjvm
// exports them all, and a stripped file keeps it).
void ScanSymbols(Elf* elf, uint64_t file_size, VMStructsSymbols* out) {
  for (int wanted : {SHT_DYNSYM, SHT_SYMTAB}) {
    for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
      GElf_Shdr shdr;
      if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != static_cast<uint32_t>(wanted)) {
        continue;
      }
      if (shdr.sh_entsize == 0 || shdr.sh_offset > file_size ||
          shdr.sh_size > file_size - shdr.sh_offset) {
        continue;
      }
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (data == nullptr) continue;
      const size_t count = shdr.sh_size / shdr.sh_entsize;
      for (size_t i = 0; i < count; ++i) {
        GElf_Sym sym;
        if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) break;
        if (sym.st_shndx == SHN_UNDEF || sym.st_value == 0) continue;
        const char* name = elf_strptr(elf, shdr.sh_link, sym.st_name);
        if (name == nullptr || std::strncmp(name, "gHotSpotVM", 10) != 0) continue;
        for (const SymbolSlot& slot : kSymbols) {
          if (std::strcmp(name, slot.name) == 0 && out->*slot.member == 0) {
            out->*slot.member = sym.st_value;
          }
        }
      }
    }
  }
}

absl::StatusOr<LibjvmInfo> InspectOpen(const std::string& path, const internal::ElfFile& file) {
  Elf* elf = file.elf();
  GElf_Ehdr ehdr;
  if (gelf_getehdr(elf, &ehdr) == nullptr || ehdr.e_ident[EI_CLASS] != ELFCLASS64 ||
      ehdr.e_machine != EM_X86_64) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an x86-64 ELF file"));
  }
  LibjvmInfo info;
  info.path = path;
  info.build_id = file.BuildId();
  ScanSymbols(elf, file.file_size(), &info.symbols);
  for (const SymbolSlot& slot : kSymbols) {
    if (info.symbols.*slot.member == 0) {
      return WithOutcome(absl::NotFoundError(absl::StrCat(path, ": no symbol ", slot.name)),
                         JvmOutcome::kUnsupported);
    }
  }
  absl::StatusOr<std::vector<LoadSegment>> segments = ReadLoadSegments(elf);
  if (!segments.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", segments.status().message()));
  }
  if (segments->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no PT_LOAD segment"));
  }
  info.segments = *std::move(segments);
  return info;
}

constexpr absl::string_view kOutcomePayload = "type.ember/hotspot.JvmOutcome";

}  // namespace

absl::string_view JvmOutcomeName(JvmOutcome outcome) {
  switch (outcome) {
    case JvmOutcome::kSupported:
      return "supported";
    case JvmOutcome::kNotReady:
      return "not_ready";
    case JvmOutcome::kUnsupported:
      return "unsupported";
    case JvmOutcome::kUnreadableLibjvm:
      return "unreadable_libjvm";
    case JvmOutcome::kUnreadableProcess:
      return "unreadable_process";
  }
  return "unsupported";
}

JvmOutcome OutcomeOf(const absl::Status& status) {
  if (status.ok()) return JvmOutcome::kSupported;
  auto payload = status.GetPayload(kOutcomePayload);
  if (!payload.has_value() || payload->size() != 1) return JvmOutcome::kUnreadableLibjvm;
  const auto value = static_cast<uint8_t>(payload->Flatten()[0]);
  if (value == 0 || value >= kJvmOutcomes) return JvmOutcome::kUnreadableLibjvm;
  return static_cast<JvmOutcome>(value);
}

absl::Status WithOutcome(absl::Status status, JvmOutcome outcome) {
  if (!status.ok()) {
    status.SetPayload(kOutcomePayload, absl::Cord(std::string(1, static_cast<char>(outcome))));
  }
  return status;
}

bool LooksLikeLibjvmPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  return path.compare(slash == std::string::npos ? 0 : slash + 1, std::string::npos, "libjvm.so") ==
         0;
}

absl::StatusOr<LibjvmInfo> InspectLibjvm(const FileLocation& location) {
  const std::string path = location.Display();
  // Reads go through the file's mapping, which faults (SIGBUS) if the file is truncated meanwhile;
  // then the handle is kept, never used again.
  absl::StatusOr<std::unique_ptr<internal::ElfFile>> file =
      absl::DataLossError(absl::StrCat(path, ": the file changed while it was read"));
  absl::StatusOr<LibjvmInfo> info = file.status();
  const bool read = internal::RunCatchingSigbus([&] {
    file = internal::ElfFile::Open(location);
    if (!file.ok()) {
      info = file.status();
      return;
    }
    info = InspectOpen(path, **file);
  });
  if (!read) {
    if (file.ok()) internal::KeepAbandoned(file->release());
    return absl::DataLossError(absl::StrCat(path, ": the file changed while it was read"));
  }
  return info;
}

absl::StatusOr<std::shared_ptr<const LibjvmInfo>> LibjvmFiles::Inspect(
    const FileLocation& location) {
  if (location.identity.has_value()) {
    for (const Entry& entry : entries_) {
      if (entry.identity == *location.identity) return entry.info;
    }
  }
  absl::StatusOr<LibjvmInfo> info = InspectLibjvm(location);
  if (!info.ok()) return info.status();
  auto shared = std::make_shared<const LibjvmInfo>(*std::move(info));
  if (location.identity.has_value() && capacity_ > 0) {
    if (entries_.size() >= capacity_) entries_.erase(entries_.begin());
    entries_.push_back(Entry{*location.identity, shared});
  }
  return shared;
}

const MemoryMapping* FindLibjvmMapping(std::span<const MemoryMapping> mappings) {
  for (const MemoryMapping& mapping : mappings) {
    if (mapping.IsFileBacked() && LooksLikeLibjvmPath(mapping.path)) return &mapping;
  }
  return nullptr;
}

absl::StatusOr<std::optional<JvmProcess>> DetectJvm(std::span<const MemoryMapping> mappings,
                                                    const std::string& root, LibjvmFiles* files,
                                                    const std::string& proc_dir) {
  const MemoryMapping* found = FindLibjvmMapping(mappings);
  if (found == nullptr) return std::nullopt;
  const FileLocation location(
      root, found->path, found->file,
      proc_dir.empty() ? std::string()
                       : absl::StrFormat("%s/map_files/%x-%x", proc_dir, found->start, found->end));
  absl::StatusOr<std::shared_ptr<const LibjvmInfo>> libjvm =
      files != nullptr ? files->Inspect(location) : [&]() {
        absl::StatusOr<LibjvmInfo> info = InspectLibjvm(location);
        if (!info.ok()) return absl::StatusOr<std::shared_ptr<const LibjvmInfo>>(info.status());
        return absl::StatusOr<std::shared_ptr<const LibjvmInfo>>(
            std::make_shared<const LibjvmInfo>(*std::move(info)));
      }();
  if (!libjvm.ok()) return libjvm.status();
  const FileMapping placed{found->start, found->end, found->offset, found->executable};
  std::optional<uint64_t> bias = LoadBias((*libjvm)->segments, placed);
  if (!bias.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        location.Display(), ": no segment holds the mapped file offset ", found->offset));
  }
  return JvmProcess{*std::move(libjvm), *bias, found->path};
}

}  // namespace ember::hotspot
