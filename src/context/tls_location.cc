// Resolution of otel_thread_ctx_v1: its symbol and PT_TLS from the file, the relocated GOT slots
// from the process's memory (what its dynamic loader decided at load time).
#include "context/tls_location.h"

#include <elf.h>
#include <gelf.h>
#include <libelf.h>

#include <cstring>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "elf/elf_file.h"
#include "elf/sigbus_guard.h"

namespace ember::context {
namespace {

constexpr char kSymbolName[] = "otel_thread_ctx_v1";

bool IsTlsRelocation(uint32_t type) {
  return type == R_X86_64_TLSDESC || type == R_X86_64_DTPMOD64 || type == R_X86_64_DTPOFF64 ||
         type == R_X86_64_TPOFF64;
}

// Fills `info` from an opened file; runs under the SIGBUS guard.
absl::Status InspectOpenElf(const std::string& path, Elf* elf, uint64_t file_size,
                            TlsFileInfo* info) {
  GElf_Ehdr ehdr;
  if (gelf_getehdr(elf, &ehdr) == nullptr || ehdr.e_ident[EI_CLASS] != ELFCLASS64 ||
      ehdr.e_machine != EM_X86_64) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an x86-64 ELF file"));
  }
  // .dynsym: the symbol's index (relocations name it by index) and value.
  Elf_Scn* dynsym = nullptr;
  GElf_Shdr dynsym_header;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) != nullptr && shdr.sh_type == SHT_DYNSYM) {
      dynsym = scn;
      dynsym_header = shdr;
      break;
    }
  }
  if (dynsym == nullptr) return absl::OkStatus();  // a static executable: nothing to find
  if (dynsym_header.sh_entsize != sizeof(Elf64_Sym) || dynsym_header.sh_offset > file_size ||
      dynsym_header.sh_size > file_size - dynsym_header.sh_offset) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": .dynsym lies outside the file"));
  }
  Elf_Data* symbols = elf_getdata(dynsym, nullptr);
  if (symbols == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": .dynsym cannot be read"));
  }
  const size_t count = dynsym_header.sh_size / dynsym_header.sh_entsize;
  absl::flat_hash_set<uint64_t> named;  // indexes of symbols called otel_thread_ctx_v1
  for (size_t i = 1; i < count; ++i) {
    GElf_Sym sym;
    if (gelf_getsym(symbols, static_cast<int>(i), &sym) == nullptr) break;
    const char* name = elf_strptr(elf, dynsym_header.sh_link, sym.st_name);
    if (name == nullptr || std::strcmp(name, kSymbolName) != 0) continue;
    named.insert(i);
    if (sym.st_shndx == SHN_UNDEF) continue;
    if (GELF_ST_TYPE(sym.st_info) != STT_TLS) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": ", kSymbolName, " is not a thread-local variable"));
    }
    info->defines = true;
    info->symbol_value = sym.st_value;
  }
  if (named.empty()) return absl::OkStatus();

  size_t headers = 0;
  if (elf_getphdrnum(elf, &headers) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": unreadable program headers"));
  }
  bool has_tls = false;
  for (size_t i = 0; i < headers; ++i) {
    GElf_Phdr phdr;
    if (gelf_getphdr(elf, static_cast<int>(i), &phdr) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": unreadable program headers"));
    }
    if (phdr.p_type == PT_TLS) {
      has_tls = true;
      info->tls_vaddr = phdr.p_vaddr;
      info->tls_memsz = phdr.p_memsz;
      info->tls_align = phdr.p_align;
    } else if (phdr.p_type == PT_LOAD) {
      info->segments.push_back({phdr.p_offset, phdr.p_vaddr, phdr.p_filesz, phdr.p_memsz,
                                (phdr.p_flags & PF_X) != 0, (phdr.p_flags & PF_W) != 0,
                                phdr.p_align});
    }
  }
  if (info->defines) {
    // A TLS block must hold the symbol, with a power-of-two alignment the loader can honour.
    const uint64_t align = info->tls_align == 0 ? 1 : info->tls_align;
    if (!has_tls || (align & (align - 1)) != 0 || align > (uint64_t{1} << 20) ||
        info->tls_memsz > (uint64_t{1} << 32) || info->symbol_value > info->tls_memsz ||
        info->tls_memsz - info->symbol_value < sizeof(uint64_t)) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": ", kSymbolName, " lies outside the file's TLS segment"));
    }
  }

  // Every RELA section linked to .dynsym (.rela.dyn, .rela.plt).
  const size_t dynsym_index = elf_ndxscn(dynsym);
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != SHT_RELA ||
        shdr.sh_link != dynsym_index) {
      continue;
    }
    if (shdr.sh_entsize != sizeof(Elf64_Rela) || shdr.sh_offset > file_size ||
        shdr.sh_size > file_size - shdr.sh_offset) {
      return absl::InvalidArgumentError(absl::StrCat(path,
                                                     ": a relocation section lies outside "
                                                     "the file"));
    }
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr) continue;
    const size_t relocations = shdr.sh_size / shdr.sh_entsize;
    for (size_t i = 0; i < relocations; ++i) {
      GElf_Rela rela;
      if (gelf_getrela(data, static_cast<int>(i), &rela) == nullptr) break;
      const uint32_t type = GELF_R_TYPE(rela.r_info);
      const uint64_t symbol = GELF_R_SYM(rela.r_info);
      if (!IsTlsRelocation(type)) continue;
      if (symbol != 0 && !named.contains(symbol)) continue;
      info->relocations.push_back({type, rela.r_offset, rela.r_addend, symbol != 0});
    }
  }
  return absl::OkStatus();
}

bool ReadU64(MemoryReader& memory, uint64_t address, uint64_t* out) {
  return memory.Read(address, out, sizeof(*out));
}

// The first relocation of `type` against the name (or, with against_name false, against none).
const TlsRelocation* FindRelocation(const TlsFileInfo& info, uint32_t type, bool against_name) {
  for (const TlsRelocation& r : info.relocations) {
    if (r.type == type && r.against_name == against_name) return &r;
  }
  return nullptr;
}

struct Mapped {
  const MemoryMapping* mapping;
  FileLocation location;
};

// Process address minus ELF address of the file `mapping` maps.
absl::StatusOr<uint64_t> BiasOf(const TlsFileInfo& info, const MemoryMapping& mapping) {
  std::optional<uint64_t> bias =
      LoadBias(info.segments, {mapping.start, mapping.end, mapping.offset, mapping.executable});
  if (!bias.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat(mapping.path, ": its mapping matches none of its segments"));
  }
  return *bias;
}

absl::Status NotRelocated(const std::string& path, uint64_t slot) {
  return absl::UnavailableError(absl::StrFormat(
      "%s: the GOT slot of %s at 0x%x is not relocated yet", path, kSymbolName, slot));
}

absl::Status Unreadable(const std::string& path, uint64_t slot) {
  return absl::UnavailableError(
      absl::StrFormat("%s: the GOT slot of %s at 0x%x cannot be read", path, kSymbolName, slot));
}

// From the relocations of `info` (a file mapped with load bias `bias`): where the variable
// lives. `symbol_value` is its st_value in its defining file, used by relocations against no
// symbol (then `info` must be the defining file's). nullopt when `info` has no usable one.
absl::StatusOr<std::optional<TlsLocation>> FromRelocations(const TlsFileInfo& info, uint64_t bias,
                                                           uint64_t symbol_value, bool defining,
                                                           uint8_t dtv_shift,
                                                           const std::string& path,
                                                           MemoryReader& memory) {
  TlsLocation location;
  location.config.dtv_entry_shift = dtv_shift;
  auto tp_offset = [&](int64_t offset, TlsModel model) {
    location.config.kind = EMBER_CONTEXT_TLS_TP_OFFSET;
    location.config.offset = offset;
    location.model = model;
    return std::optional<TlsLocation>(location);
  };
  auto dtv = [&](uint64_t module_id, int64_t offset, TlsModel model) {
    location.config.kind = EMBER_CONTEXT_TLS_DTV;
    location.config.module_id = module_id;
    location.config.offset = offset;
    location.model = model;
    return std::optional<TlsLocation>(location);
  };
  for (bool against_name : {true, false}) {
    if (!against_name && !defining) break;
    // What the relocation's slot resolved, minus what the addend added; against no symbol the
    // slot holds the module's block, and the variable lies symbol_value further.
    const int64_t extra = against_name ? 0 : static_cast<int64_t>(symbol_value);
    if (const TlsRelocation* r = FindRelocation(info, R_X86_64_TLSDESC, against_name)) {
      const uint64_t slot = bias + r->offset;
      uint64_t descriptor[2];
      if (!memory.Read(slot, descriptor, sizeof(descriptor))) return Unreadable(path, slot);
      if (descriptor[0] == 0) return NotRelocated(path, slot);
      const int64_t arg = static_cast<int64_t>(descriptor[1]);
      if (arg < 0) return tp_offset(arg - r->addend + extra, TlsModel::kTlsDescStatic);
      // glibc's (and musl's) dynamic descriptor: {module id, offset in its block}, ...
      uint64_t tls_index[2];
      if (!memory.Read(descriptor[1], tls_index, sizeof(tls_index))) {
        return absl::UnavailableError(
            absl::StrFormat("%s: the TLS descriptor of %s at 0x%x cannot be read", path,
                            kSymbolName, descriptor[1]));
      }
      if (tls_index[0] == 0) return NotRelocated(path, slot);
      return dtv(tls_index[0], static_cast<int64_t>(tls_index[1]) - r->addend + extra,
                 TlsModel::kTlsDescDynamic);
    }
    if (const TlsRelocation* r = FindRelocation(info, R_X86_64_TPOFF64, against_name)) {
      const uint64_t slot = bias + r->offset;
      uint64_t value = 0;
      if (!ReadU64(memory, slot, &value)) return Unreadable(path, slot);
      // Variant II: every static block lies below the TP, so a relocated slot is negative.
      if (static_cast<int64_t>(value) >= 0) return NotRelocated(path, slot);
      return tp_offset(static_cast<int64_t>(value) - r->addend + extra, TlsModel::kInitialExec);
    }
    if (const TlsRelocation* r = FindRelocation(info, R_X86_64_DTPMOD64, against_name)) {
      const uint64_t slot = bias + r->offset;
      uint64_t module_id = 0;
      if (!ReadU64(memory, slot, &module_id)) return Unreadable(path, slot);
      if (module_id == 0) return NotRelocated(path, slot);
      if (!against_name) {
        return dtv(module_id, static_cast<int64_t>(symbol_value), TlsModel::kLocalDynamic);
      }
      // Its DTPOFF64 pair, in the next slot as compilers emit the tls_index.
      int64_t offset = static_cast<int64_t>(symbol_value);
      bool paired = false;
      for (const TlsRelocation& d : info.relocations) {
        if (d.type != R_X86_64_DTPOFF64 || !d.against_name || d.offset != r->offset + 8) continue;
        uint64_t value = 0;
        if (!ReadU64(memory, bias + d.offset, &value)) return Unreadable(path, bias + d.offset);
        offset = static_cast<int64_t>(value) - d.addend;
        paired = true;
        break;
      }
      if (!paired && !defining) continue;  // no offset known in another file
      return dtv(module_id, offset, TlsModel::kGeneralDynamic);
    }
  }
  return std::nullopt;
}

}  // namespace

const char* TlsModelName(TlsModel model) {
  switch (model) {
    case TlsModel::kExecutable:
      return "executable";
    case TlsModel::kTlsDescStatic:
      return "tlsdesc_static";
    case TlsModel::kTlsDescDynamic:
      return "tlsdesc_dynamic";
    case TlsModel::kGeneralDynamic:
      return "general_dynamic";
    case TlsModel::kInitialExec:
      return "initial_exec";
    case TlsModel::kLocalDynamic:
      return "local_dynamic";
  }
  return "unknown";
}

absl::StatusOr<TlsFileInfo> InspectTlsFile(const FileLocation& location) {
  const std::string path = location.Display();
  absl::StatusOr<std::unique_ptr<internal::ElfFile>> file =
      absl::DataLossError(absl::StrCat(path, ": the file changed while it was read"));
  TlsFileInfo info;
  absl::Status status;
  // A file truncated under its process faults its mapping's reads: it is then not inspected, and
  // its handle is kept, never used again.
  const bool read = internal::RunCatchingSigbus([&] {
    file = internal::ElfFile::Open(location);
    if (!file.ok()) {
      status = file.status();
      return;
    }
    status = InspectOpenElf(path, (*file)->elf(), (*file)->file_size(), &info);
  });
  if (!read) {
    if (file.ok()) internal::KeepAbandoned(file->release());
    return absl::DataLossError(absl::StrCat(path, ": the file changed while it was read"));
  }
  if (!status.ok()) return status;
  return info;
}

uint64_t ExecutableTlsBlockOffset(uint64_t memsz, uint64_t align, uint64_t vaddr) {
  if (align == 0) align = 1;
  // The block's first byte sits at TP - offset, congruent to vaddr modulo align.
  const uint64_t firstbyte = (0 - vaddr) & (align - 1);
  return ((memsz - firstbyte + align - 1) & ~(align - 1)) + firstbyte;
}

absl::StatusOr<TlsLocation> FindThreadContextTls(const Process& process, MemoryReader& memory) {
  if (process.mappings.empty()) {
    return absl::UnavailableError(absl::StrCat("process ", process.pid, ": no mappings known"));
  }
  const std::string dir =
      process.proc_dir.empty() ? absl::StrCat("/proc/", process.pid) : process.proc_dir;
  const std::string root = absl::StrCat(dir, "/root");
  const std::string pid_dir = absl::StrCat("/proc/", process.pid);
  // musl's loader (its libc: /lib/ld-musl-x86_64.so.1, or Debian's
  // /usr/lib/x86_64-linux-musl/libc.so it links to) keeps DTV entries of one pointer; glibc's
  // (ld-linux-x86-64.so.2) of two.
  bool musl = false;
  bool glibc = false;
  for (const MemoryMapping& m : process.mappings) {
    const absl::string_view name = absl::string_view(m.path).substr(m.path.rfind('/') + 1);
    if (absl::StartsWith(name, "ld-linux")) glibc = true;
    if (absl::StartsWith(name, "ld-musl-") || absl::StrContains(m.path, "-linux-musl/")) {
      musl = true;
    }
  }
  const uint8_t dtv_shift = musl && !glibc ? 3 : 4;
  // One mapping per file, the executable's first.
  std::vector<const MemoryMapping*> files;
  absl::flat_hash_set<std::pair<uint64_t, uint64_t>> seen;
  for (int pass = 0; pass < 2; ++pass) {
    for (const MemoryMapping& m : process.mappings) {
      if (!m.IsFileBacked()) continue;
      const bool is_executable = m.path == process.executable_path;
      if (is_executable != (pass == 0)) continue;
      if (!seen.insert({m.file.dev, m.file.inode}).second) continue;
      files.push_back(&m);
    }
  }
  struct Inspected {
    const MemoryMapping* mapping;
    TlsFileInfo info;
  };
  std::vector<Inspected> inspected;
  std::optional<size_t> defining;
  int unreadable = 0;
  std::string first_unreadable;
  absl::Status bad_definition;
  for (const MemoryMapping* m : files) {
    FileLocation location(root, m->path, m->file,
                          absl::StrFormat("%s/map_files/%x-%x", pid_dir, m->start, m->end));
    absl::StatusOr<TlsFileInfo> info = InspectTlsFile(location);
    if (!info.ok()) {
      // A file that defines the name badly is the process's error, told when no other file
      // defines it well; one the agent cannot read (or refused to open) may or may not hold it.
      if (absl::IsFailedPrecondition(info.status()) && !RefusalOf(info.status()).has_value()) {
        if (bad_definition.ok()) bad_definition = info.status();
        continue;
      }
      if (unreadable == 0) first_unreadable = std::string(info.status().message());
      ++unreadable;
      continue;
    }
    if (info->relocations.empty() && !info->defines) continue;
    inspected.push_back({m, *std::move(info)});
    if (inspected.back().info.defines && !defining.has_value()) {
      defining = inspected.size() - 1;
    }
  }
  if (!defining.has_value()) {
    if (!bad_definition.ok()) return bad_definition;
    std::string also;
    if (unreadable > 0) {
      also = absl::StrCat(" (", unreadable,
                          " mapped files could not be read, first: ", first_unreadable, ")");
    }
    return absl::NotFoundError(
        absl::StrCat("process ", process.pid, ": no mapped file defines ", kSymbolName, also));
  }
  const Inspected& owner = inspected[*defining];
  const std::string& path = owner.mapping->path;
  const uint64_t value = owner.info.symbol_value;
  if (path == process.executable_path) {
    TlsLocation location;
    location.module_path = path;
    location.model = TlsModel::kExecutable;
    location.config.kind = EMBER_CONTEXT_TLS_TP_OFFSET;
    location.config.dtv_entry_shift = dtv_shift;
    location.config.offset = static_cast<int64_t>(value) -
                             static_cast<int64_t>(ExecutableTlsBlockOffset(
                                 owner.info.tls_memsz, owner.info.tls_align, owner.info.tls_vaddr));
    return location;
  }
  // A library: its own relocations first, then those of the files that use it by name.
  std::vector<const Inspected*> order = {&owner};
  for (const Inspected& other : inspected) {
    if (&other != &owner) order.push_back(&other);
  }
  for (const Inspected* file : order) {
    absl::StatusOr<uint64_t> bias = BiasOf(file->info, *file->mapping);
    if (!bias.ok()) return bias.status();
    absl::StatusOr<std::optional<TlsLocation>> found = FromRelocations(
        file->info, *bias, value, file == &owner, dtv_shift, file->mapping->path, memory);
    if (!found.ok()) return found.status();
    if (found->has_value()) {
      TlsLocation location = **found;
      location.module_path = path;
      return location;
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat(path, ": no relocation of ", kSymbolName, " tells where its threads keep it"));
}

}  // namespace ember::context
