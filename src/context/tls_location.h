// Where the threads of a process keep their OpenTelemetry thread-context pointer, the TLS variable
// `otel_thread_ctx_v1` (OTEP 4947): which mapped file defines it, and how a thread reaches it
// from its thread pointer, in the form the BPF program reads (ember_context_proc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/untrusted_open.h"
#include "elf/load_segments.h"
#include "process/process_table.h"
#include "runtimes/process_memory.h"
#include "sample_record.h"

namespace ember::context {

// How the process's code reaches the variable, which decides where Ember reads it from.
enum class TlsModel {
  kExecutable,      // defined in the executable: initial/local exec, a fixed offset from the TP
  kTlsDescStatic,   // TLSDESC resolved to a static TLS offset (a library loaded at start)
  kTlsDescDynamic,  // TLSDESC resolved to glibc's dynamic descriptor: module id, through the DTV
  kGeneralDynamic,  // R_X86_64_DTPMOD64/DTPOFF64 against the symbol: through the DTV
  kInitialExec,     // R_X86_64_TPOFF64 against the symbol in a GOT: a fixed offset from the TP
  kLocalDynamic,    // only the library's own module id (DTPMOD64 without symbol): through the DTV
};

const char* TlsModelName(TlsModel model);

struct TlsLocation {
  ember_context_proc config{};  // what the BPF side reads (sample_record.h)
  std::string module_path;      // the file defining otel_thread_ctx_v1, as the process maps it
  TlsModel model = TlsModel::kExecutable;
};

// One TLS relocation of a file that can place otel_thread_ctx_v1: against that name, or against
// no symbol (a module's own TLS, local-dynamic).
struct TlsRelocation {
  uint32_t type = 0;         // R_X86_64_TLSDESC, _DTPMOD64, _DTPOFF64 or _TPOFF64
  uint64_t offset = 0;       // r_offset: the ELF address of the GOT slot it writes
  int64_t addend = 0;        // r_addend
  bool against_name = true;  // false: symbol index 0
};

// What one ELF file says of otel_thread_ctx_v1, read from the file alone.
struct TlsFileInfo {
  bool defines = false;       // a defined STT_TLS otel_thread_ctx_v1 in .dynsym
  uint64_t symbol_value = 0;  // its st_value: offset in the file's TLS block
  // PT_TLS (defines only).
  uint64_t tls_vaddr = 0;
  uint64_t tls_memsz = 0;
  uint64_t tls_align = 0;
  std::vector<LoadSegment> segments;
  std::vector<TlsRelocation> relocations;
};

// Reads `location`'s .dynsym, PT_TLS and RELA relocations. An error for a file that cannot be
// read, is not x86-64 ELF, or whose otel_thread_ctx_v1 is defined but is not a TLS variable (or
// has no PT_TLS to live in).
absl::StatusOr<TlsFileInfo> InspectTlsFile(const FileLocation& location);

// Offset from the thread pointer of the main executable's TLS block (x86-64, TLS variant II):
// the block ends below the TP, at the lowest offset of at least `memsz` whose start has the
// alignment of `vaddr` modulo `align`, as glibc's and musl's loaders place it.
uint64_t ExecutableTlsBlockOffset(uint64_t memsz, uint64_t align, uint64_t vaddr);

// Finds a defined STT_TLS `otel_thread_ctx_v1` in .dynsym of the files `process` maps
// (executable first, then libraries), and where each thread keeps it. NotFound: no mapped file
// defines it (yet: a dlopen may come later). Other errors: unreadable file/memory, no usable
// relocation, unsupported model. Files are read as the process sees them (map_files / root).
absl::StatusOr<TlsLocation> FindThreadContextTls(const Process& process, MemoryReader& memory);

}  // namespace ember::context
