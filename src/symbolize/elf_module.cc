// ElfModule: address translation and symbolization of one ELF file, including the search for its
// separate debug file by build id and .gnu_debuglink.
#include "symbolize/elf_module.h"

#include <elf.h>
#include <gelf.h>
#include <libelf.h>

#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log_safe.h"
#include "common/untrusted_open.h"
#include "elf/elf_file.h"
#include "elf/sigbus_guard.h"
#include "spdlog/spdlog.h"
#include "symbolize/demangle.h"
#include "symbolize/dwarf_lines.h"
#include "symbolize/go_pclntab.h"
#include "symbolize/symbol_table.h"

namespace ember {
namespace {

using internal::ElfFile;

// A candidate separate debug file, accepted when it is the one built with `main`: same build id
// when both have one, else a matching .gnu_debuglink CRC.
std::unique_ptr<ElfFile> OpenDebugCandidate(const FileLocation& location,
                                            const std::string& build_id,
                                            const std::optional<uint32_t>& crc) {
  absl::StatusOr<std::unique_ptr<ElfFile>> file = ElfFile::Open(location, /*check_segments=*/false);
  if (!file.ok()) return nullptr;
  std::string candidate_id = (*file)->BuildId();
  if (!build_id.empty() && !candidate_id.empty()) {
    return candidate_id == build_id ? std::move(*file) : nullptr;
  }
  if (crc.has_value() && internal::FileCrc32(**file) == crc) return std::move(*file);
  return nullptr;
}

std::unique_ptr<ElfFile> FindDebugFile(const ElfFile& main, const std::string& display_path,
                                       const std::string& root, const std::string& build_id,
                                       const std::string& debug_dir) {
  if (build_id.size() > 2) {
    std::string path = absl::StrCat(debug_dir, "/.build-id/", build_id.substr(0, 2), "/",
                                    build_id.substr(2), ".debug");
    if (auto file = OpenDebugCandidate(path, build_id, std::nullopt)) return file;
  }
  std::optional<internal::DebugLink> link = main.GnuDebugLink();
  if (!link.has_value()) return nullptr;
  // A plain file name only, looked for where gdb looks, under the process's own root: a name
  // with "../" or an absolute one would reach files the process does not own.
  if (!IsPlainDebugLinkName(link->file_name)) {
    RecordOpenRefusal(OpenRefusal::kBadDebugLink);
    return nullptr;
  }
  for (std::string& path : DebugLinkCandidates(display_path, link->file_name, debug_dir)) {
    if (auto file = OpenDebugCandidate(FileLocation(root, std::move(path)), build_id, link->crc)) {
      return file;
    }
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ElfModule>> ElfModule::Open(const FileLocation& location,
                                                           const std::string& display_path,
                                                           const ElfModuleOptions& options) {
  // The headers and notes are read through the file's mapping, which faults (SIGBUS) if the file
  // is truncated while they are read: that file is then not symbolized, and what the read left
  // behind is kept, never used again.
  absl::StatusOr<std::unique_ptr<ElfFile>> file =
      absl::DataLossError("the file changed while its headers were read");
  absl::StatusOr<std::vector<LoadSegment>> segments = std::vector<LoadSegment>();
  std::string build_id;
  bool read = internal::RunCatchingSigbus([&] {
    file = ElfFile::Open(location);
    if (!file.ok()) return;
    segments = ReadLoadSegments((*file)->elf());
    build_id = (*file)->BuildId();
  });
  if (!read) {
    if (file.ok()) internal::KeepAbandoned(file->release());
    return absl::DataLossError(
        absl::StrCat(location.Display(), ": the file changed while its headers were read"));
  }
  if (!file.ok()) return file.status();
  if (!segments.ok()) {
    return absl::DataLossError(absl::StrCat(location.Display(), ": ", segments.status().message()));
  }
  std::unique_ptr<ElfModule> module(
      new ElfModule(display_path, location.root, options, std::move(*file)));
  module->segments_ = std::move(segments).value();
  module->build_id_ = std::move(build_id);
  return module;
}

ElfModule::ElfModule(std::string path, std::string root, ElfModuleOptions options,
                     std::unique_ptr<internal::ElfFile> file)
    : path_(std::move(path)),
      root_(std::move(root)),
      options_(std::move(options)),
      file_(std::move(file)) {}

ElfModule::~ElfModule() {
  if (file_changed_) {
    // A read faulted part-way through libelf or libdw: their state cannot be trusted even to be
    // freed. Kept, once per such file.
    internal::KeepAbandoned(go_.release());
    internal::KeepAbandoned(lines_.release());
    internal::KeepAbandoned(symbols_.release());
    internal::KeepAbandoned(debug_file_.release());
    internal::KeepAbandoned(file_.release());
    return;
  }
  // DWARF and symbol names read from the files' mappings: drop them before the files.
  go_.reset();
  lines_.reset();
  symbols_.reset();
  debug_file_.reset();
}

void ElfModule::ReleasePages(internal::FileMappingCheck& file_mappings) const {
  file_->ReleasePages(file_mappings);
  if (debug_file_ != nullptr) debug_file_->ReleasePages(file_mappings);
}

void ElfModule::ReloadSymbols() {
  awaiting_debug_file_ = false;
  // A file cut under a read stays unnamed, its libelf state untouched (see ~ElfModule).
  if (file_changed_) return;
  lines_.reset();
  symbols_.reset();
  debug_file_.reset();
  symbols_loaded_ = false;
}

std::optional<ElfAddress> ElfModule::ToElfAddress(FileOffset offset) const {
  std::optional<uint64_t> address = CodeOffsetToElfAddress(segments_, offset.value);
  if (!address.has_value()) return std::nullopt;
  return ElfAddress{*address};
}

void ElfModule::LoadSymbols() const {
  symbols_loaded_ = true;
  // Most files are not Go: GoPclntab::Open looks at section names and notes only, and scans
  // segments only for a binary that says it is Go but has no section headers.
  absl::StatusOr<std::unique_ptr<internal::GoPclntab>> go =
      internal::GoPclntab::Open(internal::GoImageOfElf(file_->elf()));
  if (go.ok()) {
    go_ = std::move(*go);
  } else if (!absl::IsNotFound(go.status())) {
    // Once per file: a Go binary whose table is corrupt or of Go 1.2 to 1.15 keeps the names its
    // ELF symbols give.
    spdlog::debug("{}: Go symbol table not read: {}", LogSafe(path_),
                  LogSafe(go.status().message()));
  }
  auto symtab = std::make_unique<internal::SymbolTable>(
      internal::SymbolTable::Read(file_->elf(), SHT_SYMTAB));
  bool has_dwarf = file_->HasSectionData(".debug_info");
  if (symtab->empty() || !has_dwarf) {
    debug_file_ = FindDebugFile(*file_, path_, root_, build_id_, options_.debug_dir);
    // Go code is named from Go's own table, stripped or not: a Go binary is not asked for (its
    // build id is rarely on a server, and would be asked again at every retry for ever).
    if (debug_file_ == nullptr && go_ == nullptr && options_.debug_file_source != nullptr &&
        !build_id_.empty()) {
      // Fetched files are the agent's own, in its namespace; a file of another build id is
      // refused here too (OpenDebugCandidate), whatever the source checked.
      if (std::optional<std::string> fetched = options_.debug_file_source->Find(build_id_)) {
        debug_file_ = OpenDebugCandidate(FileLocation(*fetched), build_id_, std::nullopt);
      }
      awaiting_debug_file_ = debug_file_ == nullptr;
    }
  }
  if (symtab->empty() && debug_file_ != nullptr) {
    *symtab = internal::SymbolTable::Read(debug_file_->elf(), SHT_SYMTAB);
  }
  if (symtab->empty()) *symtab = internal::SymbolTable::Read(file_->elf(), SHT_DYNSYM);
  symbols_ = std::move(symtab);

  Elf* dwarf_elf = nullptr;
  if (has_dwarf) {
    dwarf_elf = file_->elf();
  } else if (debug_file_ != nullptr && debug_file_->HasSectionData(".debug_info")) {
    dwarf_elf = debug_file_->elf();
  }
  if (dwarf_elf != nullptr) {
    lines_ = std::make_unique<internal::DwarfLines>(dwarf_elf);
    if (!lines_->valid()) lines_.reset();
  }
}

size_t ElfModule::EstimatedBytes() const {
  size_t bytes = sizeof(*this) + path_.capacity() + build_id_.capacity() +
                 segments_.capacity() * sizeof(LoadSegment) + kElfHandleBytes;
  if (debug_file_ != nullptr) bytes += kElfHandleBytes;
  if (symbols_ != nullptr) bytes += sizeof(*symbols_) + symbols_->EstimatedBytes();
  if (lines_ != nullptr) bytes += lines_->EstimatedBytes();
  if (go_ != nullptr) bytes += go_->EstimatedBytes();
  return bytes;
}

std::optional<SourceSymbol> ElfModule::Symbolize(ElfAddress addr) const {
  if (file_changed_) return std::nullopt;
  // Symbol names and DWARF are read from the files' mappings, which fault where the file was
  // truncated since it was opened: such a module is done with, and its frames stay unnamed.
  const char* name = nullptr;
  size_t name_length = 0;
  std::optional<SourceSymbol> go_symbol;
  bool read = internal::RunCatchingSigbus([&] {
    if (!symbols_loaded_) LoadSymbols();
    if (go_ != nullptr) {
      internal::GoSymbol found;
      if (go_->Lookup(addr.value, &found)) {
        go_symbol.emplace(SourceSymbol{.function = std::string(found.function),
                                       .source_file = std::string(found.file),
                                       .line = found.line,
                                       .inlined = std::move(found.inlined),
                                       .kind = FrameKind::kGo,
                                       .thread_start = found.thread_start});
        return;
      }
    }
    name = symbols_->Find(addr.value);
    if (name != nullptr) name_length = strlen(name);
  });
  if (!read) {
    file_changed_ = true;
    return std::nullopt;
  }
  if (go_symbol.has_value()) return go_symbol;
  if (name == nullptr) return std::nullopt;
  std::string mangled(name_length, '\0');
  SourceSymbol symbol;
  read = internal::RunCatchingSigbus([&] {
    memcpy(mangled.data(), name, name_length);
    if (lines_ != nullptr) lines_->Lookup(addr.value, &symbol);
  });
  if (!read) {
    file_changed_ = true;
    return std::nullopt;
  }
  symbol.function = Demangle(mangled);
  return symbol;
}

}  // namespace ember
