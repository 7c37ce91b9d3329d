// Interpreter detection in an ElfFile: symbols (_PyRuntime, Py_Version, PyCode_Type,
// _PyEval_EvalFrameDefault), the PY_VERSION string in .rodata, and 3.13's _Py_DebugOffsets.
#include "runtimes/cpython/interpreter_detect.h"

#include <elf.h>
#include <gelf.h>
#include <libelf.h>

#include <cstring>
#include <optional>
#include <regex>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/untrusted_open.h"
#include "elf/elf_file.h"
#include "elf/sigbus_guard.h"

namespace ember::python {
namespace {

struct Symbol {
  uint64_t value = 0;
  uint64_t size = 0;
};

struct Symbols {
  std::optional<Symbol> runtime, py_version, code_type, eval_frame;
};

void ScanSymbols(Elf* elf, uint64_t file_size, Symbols* out) {
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr) continue;
    if (shdr.sh_type != SHT_SYMTAB && shdr.sh_type != SHT_DYNSYM) continue;
    if (shdr.sh_entsize == 0 || shdr.sh_offset > file_size ||
        shdr.sh_size > file_size - shdr.sh_offset) {
      continue;
    }
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr) continue;
    size_t count = shdr.sh_size / shdr.sh_entsize;
    for (size_t i = 0; i < count; ++i) {
      GElf_Sym sym;
      if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) break;
      if (sym.st_shndx == SHN_UNDEF || sym.st_value == 0) continue;
      const char* name = elf_strptr(elf, shdr.sh_link, sym.st_name);
      if (name == nullptr || name[0] == '\0') continue;
      std::optional<Symbol>* slot = nullptr;
      if (std::strcmp(name, "_PyRuntime") == 0) {
        slot = &out->runtime;
      } else if (std::strcmp(name, "Py_Version") == 0) {
        slot = &out->py_version;
      } else if (std::strcmp(name, "PyCode_Type") == 0) {
        slot = &out->code_type;
      } else if (std::strcmp(name, "_PyEval_EvalFrameDefault") == 0) {
        slot = &out->eval_frame;
      }
      if (slot != nullptr && !slot->has_value()) *slot = Symbol{sym.st_value, sym.st_size};
    }
  }
}

// Copies `size` bytes at ELF address `address` out of the section holding them. False for
// addresses in no section, in .bss, or past the end of the file.
bool ReadAtAddress(Elf* elf, uint64_t file_size, uint64_t address, void* out, size_t size) {
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr) continue;
    if (shdr.sh_type == SHT_NOBITS || (shdr.sh_flags & SHF_ALLOC) == 0) continue;
    // Compared without forming `address + size`: symbol values come from the file, any bits.
    if (address < shdr.sh_addr || size > shdr.sh_size ||
        address - shdr.sh_addr > shdr.sh_size - size) {
      continue;
    }
    if (shdr.sh_offset > file_size || shdr.sh_size > file_size - shdr.sh_offset) return false;
    Elf_Data* data = elf_rawdata(scn, nullptr);
    if (data == nullptr || data->d_buf == nullptr || data->d_size < shdr.sh_size) return false;
    std::memcpy(out, static_cast<const char*>(data->d_buf) + (address - shdr.sh_addr), size);
    return true;
  }
  return false;
}

// "3.11" from ".../python3.11", ".../libpython3.11d.so.1.0"; nullopt otherwise. Sets
// free_threaded for a 't' ABI suffix (3.13t).
std::optional<PythonVersion> VersionFromFileName(const std::string& path, bool* free_threaded) {
  static const std::regex kPattern(R"(^(?:lib)?python(\d+)\.(\d+)([dmt]*)(?:\.so(?:\..*)?)?$)");
  std::string name = path.substr(path.rfind('/') + 1);
  std::smatch match;
  if (!std::regex_match(name, match, kPattern)) return std::nullopt;
  PythonVersion version;
  if (!absl::SimpleAtoi(match[1].str(), &version.major) ||
      !absl::SimpleAtoi(match[2].str(), &version.minor)) {
    return std::nullopt;
  }
  version.micro = -1;
  if (free_threaded != nullptr) *free_threaded = absl::StrContains(match[3].str(), "t");
  return version;
}

std::optional<PythonVersion> ScanRodata(Elf* elf, uint64_t file_size, int want_minor, bool tails) {
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return std::nullopt;
  static const std::regex kVersion(R"(^3\.(\d{1,2})\.(\d{1,2})(?:(?:a|b|rc)\d+)?\+?$)");
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr) continue;
    const char* name = elf_strptr(elf, shstrndx, shdr.sh_name);
    if (name == nullptr || std::strcmp(name, ".rodata") != 0) continue;
    if (shdr.sh_type == SHT_NOBITS || shdr.sh_offset > file_size ||
        shdr.sh_size > file_size - shdr.sh_offset) {
      return std::nullopt;
    }
    Elf_Data* data = elf_rawdata(scn, nullptr);
    if (data == nullptr || data->d_buf == nullptr) return std::nullopt;
    const char* bytes = static_cast<const char*>(data->d_buf);
    size_t size = data->d_size;
    for (size_t i = 0; i + 6 < size; ++i) {
      // A string that starts right after a NUL with "3.".
      if (bytes[i] != '3' || bytes[i + 1] != '.') continue;
      if (i > 0 && bytes[i - 1] != '\0') {
        char before = bytes[i - 1];
        if (!tails || (before >= '0' && before <= '9') || before == '.') continue;
      }
      size_t end = i;
      while (end < size && end - i < 16 && bytes[end] != '\0') ++end;
      if (end >= size || bytes[end] != '\0') continue;
      std::string candidate(bytes + i, end - i);
      std::smatch match;
      if (!std::regex_match(candidate, match, kVersion)) continue;
      PythonVersion version{3, 0, 0};
      if (!absl::SimpleAtoi(match[1].str(), &version.minor) ||
          !absl::SimpleAtoi(match[2].str(), &version.micro)) {
        continue;
      }
      if (want_minor >= 0 && version.minor != want_minor) continue;
      if (version.minor < 6 || version.minor > 30) continue;
      return version;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

// Looks for PY_VERSION ("3.9.18", "3.10.0rc1+") as a NUL-terminated string in .rodata. The
// linker may merge it into the tail of a longer string ("/opt/python/3.8.18"), so with
// `want_minor` >= 0 (from the file name) a tail after a non-digit also counts, for that minor
// version only; without it only whole strings do.
std::optional<PythonVersion> VersionFromRodata(Elf* elf, uint64_t file_size, int want_minor) {
  for (bool tails : {false, true}) {
    if (tails && want_minor < 0) break;
    if (std::optional<PythonVersion> v = ScanRodata(elf, file_size, want_minor, tails)) return v;
  }
  return std::nullopt;
}

// 3.13's _PyRuntime starts with _Py_DebugOffsets, whose initial value is in .data. The layout
// below is 3.13.0's (checked against its DWARF); it is used only when every frame and code offset
// it states agrees with the built-in table, and then supplies the runtime and interpreter offsets
// that may move between 3.13 patch releases.
absl::Status ApplyDebugOffsets313(Elf* elf, uint64_t file_size, const Symbol& runtime,
                                  uint32_t version_hex, CPythonLayout* layout) {
  struct {
    char cookie[8];
    uint64_t version;
    uint64_t free_threaded;
    uint64_t runtime_state[3];       // size, finalizing, interpreters_head
    uint64_t interpreter_state[13];  // size, id, next, threads_head, ...
    uint64_t thread_state[9];  // size, prev, next, interp, current_frame, thread_id, native, ...
    uint64_t interpreter_frame[6];  // size, previous, executable, instr_ptr, localsplus, owner
    uint64_t code_object[10];  // size, filename, name, qualname, linetable, firstlineno, argcount,
                               // localsplusnames, localspluskinds, co_code_adaptive
  } offsets;
  static_assert(sizeof(offsets) == 352);
  if (runtime.size < sizeof(offsets) ||
      !ReadAtAddress(elf, file_size, runtime.value, &offsets, sizeof(offsets))) {
    return absl::NotFoundError("no initialised _Py_DebugOffsets in the binary");
  }
  if (std::memcmp(offsets.cookie, "xdebugpy", 8) != 0) {
    return absl::NotFoundError("_PyRuntime does not start with the _Py_DebugOffsets cookie");
  }
  if (offsets.version != version_hex) {
    return absl::FailedPreconditionError("_Py_DebugOffsets.version differs from Py_Version");
  }
  if (offsets.free_threaded != 0) {
    return absl::UnimplementedError("free-threaded (no-GIL) build");
  }
  const uint64_t* t = offsets.thread_state;
  const uint64_t* f = offsets.interpreter_frame;
  const uint64_t* c = offsets.code_object;
  bool agrees = t[2] == layout->tstate_next && t[4] == layout->tstate_frame &&
                t[5] == layout->tstate_thread_id && t[6] == layout->tstate_native_thread_id &&
                f[1] == layout->frame_previous && f[2] == layout->frame_code &&
                f[3] == layout->frame_last_instruction && f[5] == layout->frame_owner &&
                c[1] == layout->code_filename && c[2] == layout->code_name &&
                c[3] == layout->code_qualname && c[4] == layout->code_linetable &&
                c[5] == layout->code_firstlineno && c[9] == layout->code_adaptive;
  if (!agrees) {
    return absl::FailedPreconditionError(
        "its _Py_DebugOffsets disagree with Ember's 3.13 table (a newer 3.13 layout)");
  }
  if (offsets.runtime_state[2] > runtime.size || offsets.runtime_state[2] > (1u << 20) ||
      offsets.interpreter_state[3] > (1u << 20)) {
    return absl::FailedPreconditionError("implausible _Py_DebugOffsets");
  }
  layout->runtime_interpreters_head = static_cast<uint32_t>(offsets.runtime_state[2]);
  layout->interp_threads_head = static_cast<uint32_t>(offsets.interpreter_state[3]);
  return absl::OkStatus();
}

InterpreterInfo InspectOpenElf(const std::string& path, Elf* elf, uint64_t file_size) {
  InterpreterInfo info;
  info.path = path;
  Symbols symbols;
  ScanSymbols(elf, file_size, &symbols);
  if (!symbols.runtime.has_value()) {
    info.reason = "no _PyRuntime symbol (not CPython 3.7+, or a stripped static build)";
    return info;
  }
  info.runtime_address = symbols.runtime->value;
  info.runtime_size = symbols.runtime->size;
  if (symbols.code_type) info.code_type_address = symbols.code_type->value;
  if (symbols.eval_frame) {
    info.eval_frame_address = symbols.eval_frame->value;
    info.eval_frame_size = symbols.eval_frame->size;
  }
  if (absl::StatusOr<std::vector<LoadSegment>> segments = ReadLoadSegments(elf); segments.ok()) {
    info.segments = std::move(segments).value();
  }

  // The version: Py_Version (3.11+) is exact; else PY_VERSION in .rodata; else the file name.
  bool free_threaded = false;
  std::optional<PythonVersion> from_name = VersionFromFileName(path, &free_threaded);
  uint64_t version_hex = 0;
  if (symbols.py_version.has_value() &&
      ReadAtAddress(elf, file_size, symbols.py_version->value, &version_hex, 4)) {
    info.version = {static_cast<int>(version_hex >> 24),
                    static_cast<int>((version_hex >> 16) & 0xff),
                    static_cast<int>((version_hex >> 8) & 0xff)};
    info.version_source = "Py_Version";
  } else if (std::optional<PythonVersion> v =
                 VersionFromRodata(elf, file_size, from_name ? from_name->minor : -1)) {
    info.version = *v;
    info.version_source = "PY_VERSION string";
  } else if (from_name.has_value()) {
    info.version = *from_name;
    info.version_source = "file name";
  } else {
    info.outcome = DetectOutcome::kUnsupportedVersion;
    info.reason = "has _PyRuntime but no recognisable version";
    return info;
  }

  std::string version_text = absl::StrCat(info.version.major, ".", info.version.minor);
  if (info.version.micro >= 0) absl::StrAppend(&version_text, ".", info.version.micro);
  const CPythonLayout* layout = FindLayout(info.version.major, info.version.minor);
  if (layout == nullptr) {
    info.outcome = DetectOutcome::kUnsupportedVersion;
    info.reason = absl::StrCat("CPython ", version_text, " is not supported (3.8 to 3.13 are)");
    return info;
  }
  if (free_threaded) {
    info.outcome = DetectOutcome::kUnsupportedVersion;
    info.reason = absl::StrCat("CPython ", version_text, " free-threaded build is not supported");
    return info;
  }
  info.layout = *layout;
  if (layout->minor == 13) {
    absl::Status applied = ApplyDebugOffsets313(elf, file_size, *symbols.runtime,
                                                static_cast<uint32_t>(version_hex), &info.layout);
    // A missing _Py_DebugOffsets keeps the 3.13.0 table; one that disagrees means a layout this
    // table does not know, and walking it with the wrong offsets would produce garbage frames.
    if (!applied.ok() && !absl::IsNotFound(applied)) {
      info.outcome = DetectOutcome::kUnsupportedVersion;
      info.reason = absl::StrCat("CPython ", version_text, ": ", applied.message());
      return info;
    }
  }
  info.outcome = DetectOutcome::kSupported;
  return info;
}

}  // namespace

bool LooksLikeInterpreterPath(const std::string& path) {
  return VersionFromFileName(path, nullptr).has_value();
}

absl::StatusOr<InterpreterInfo> InspectInterpreterElf(const FileLocation& location) {
  const std::string path = location.Display();
  // Everything below reads through the file's mapping, which faults (SIGBUS) if the file is
  // truncated meanwhile (replaced in place under the process). Then the file is not inspected,
  // and its handle is kept, never used again.
  absl::StatusOr<std::unique_ptr<internal::ElfFile>> file =
      absl::DataLossError(absl::StrCat(path, ": the file changed while it was read"));
  absl::StatusOr<InterpreterInfo> info = file.status();
  bool read = internal::RunCatchingSigbus([&] {
    file = internal::ElfFile::Open(location);
    if (!file.ok()) {
      info = file.status();
      return;
    }
    Elf* elf = (*file)->elf();
    GElf_Ehdr ehdr;
    if (gelf_getehdr(elf, &ehdr) == nullptr || ehdr.e_ident[EI_CLASS] != ELFCLASS64 ||
        ehdr.e_machine != EM_X86_64) {
      info = absl::InvalidArgumentError(absl::StrCat(path, ": not an x86-64 ELF file"));
      return;
    }
    info = InspectOpenElf(path, elf, (*file)->file_size());
  });
  if (!read) {
    if (file.ok()) internal::KeepAbandoned(file->release());
    return absl::DataLossError(absl::StrCat(path, ": the file changed while it was read"));
  }
  return info;
}

absl::StatusOr<InterpreterInfo> DetectInterpreter(
    std::span<const std::string> mapped_paths, const std::string& root,
    std::span<const std::optional<FileIdentity>> identities) {
  const std::string* executable = nullptr;
  const std::string* library = nullptr;
  for (const std::string& path : mapped_paths) {
    if (!LooksLikeInterpreterPath(path)) continue;
    std::string name = path.substr(path.rfind('/') + 1);
    if (absl::StartsWith(name, "lib")) {
      if (library == nullptr) library = &path;
    } else if (executable == nullptr) {
      executable = &path;
    }
  }
  // A python3.X executable linked against libpython has no _PyRuntime of its own; try the library
  // first and fall back to the executable (static builds, e.g. Debian's).
  absl::Status last_error = absl::OkStatus();
  for (const std::string* candidate : {library, executable}) {
    if (candidate == nullptr) continue;
    const auto index = static_cast<size_t>(candidate - mapped_paths.data());
    absl::StatusOr<InterpreterInfo> info = InspectInterpreterElf(FileLocation(
        root, *candidate, index < identities.size() ? identities[index] : std::nullopt));
    if (!info.ok()) {
      last_error = info.status();
      continue;
    }
    if (info->outcome != DetectOutcome::kNotPython) return info;
  }
  if (!last_error.ok()) return last_error;
  InterpreterInfo none;
  none.reason = "no python3.X or libpython3.X mapping";
  return none;
}

uint64_t ElfToProcessAddress(const InterpreterInfo& info, uint64_t elf_address,
                             const FileMapping& mapping) {
  std::optional<uint64_t> bias = LoadBias(info.segments, mapping);
  return bias ? elf_address + *bias : 0;
}

std::optional<ProcessInterpreter> MakeProcessInterpreter(const InterpreterInfo& info,
                                                         const FileMapping& mapping) {
  if (info.outcome != DetectOutcome::kSupported) return std::nullopt;
  ProcessInterpreter out;
  out.config.layout = info.layout;
  out.config.runtime_address = ElfToProcessAddress(info, info.runtime_address, mapping);
  if (out.config.runtime_address == 0) return std::nullopt;
  if (info.code_type_address != 0) {
    out.config.code_type_address = ElfToProcessAddress(info, info.code_type_address, mapping);
  }
  if (info.eval_frame_address != 0) {
    out.eval_frame_start = ElfToProcessAddress(info, info.eval_frame_address, mapping);
    if (out.eval_frame_start != 0) out.eval_frame_end = out.eval_frame_start + info.eval_frame_size;
  }
  return out;
}

}  // namespace ember::python
