// Is a process CPython, and which? Finds the interpreter among a process's mapped files (the
// python3.X executable or libpython3.X.so), reads its version and the addresses the frame walker
// starts from out of the ELF file. Reads files only, never the process.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/untrusted_open.h"
#include "elf/load_segments.h"
#include "runtimes/cpython/cpython_layout.h"
#include "runtimes/cpython/frame_walker.h"

namespace ember::python {

enum class DetectOutcome : uint8_t {
  kNotPython = 0,           // no CPython runtime in this file / process
  kSupported = 1,           // `layout` is valid for this interpreter
  kUnsupportedVersion = 2,  // CPython, but one this table does not cover (see `reason`)
};

struct PythonVersion {
  int major = 0;
  int minor = 0;
  int micro = 0;  // -1 when only the file name told the version
};

struct InterpreterInfo {
  DetectOutcome outcome = DetectOutcome::kNotPython;
  std::string path;  // the ELF that holds _PyRuntime
  PythonVersion version;
  // Where the version came from: "Py_Version", "PY_VERSION string" or "file name".
  std::string version_source;
  std::string reason;  // why kUnsupportedVersion (or why kNotPython), for one log line
  // ELF virtual addresses (as in the symbol table; add the load bias for process addresses).
  uint64_t runtime_address = 0;  // _PyRuntime
  uint64_t runtime_size = 0;
  uint64_t code_type_address = 0;   // PyCode_Type, to check that a frame's code is a code object
  uint64_t eval_frame_address = 0;  // _PyEval_EvalFrameDefault, 0 when not in the symbol tables
  uint64_t eval_frame_size = 0;
  std::vector<LoadSegment> segments;
  // Valid when outcome == kSupported. For 3.13 the runtime and interpreter offsets come from the
  // binary's own _Py_DebugOffsets when it has them.
  CPythonLayout layout;
};

// Inspects one ELF file (an executable or a shared library). Errors only for files that cannot
// be read or are not valid ELF; a valid ELF without CPython is kNotPython.
// Opened by OpenUntrusted, under the location's root.
absl::StatusOr<InterpreterInfo> InspectInterpreterElf(const FileLocation& location);

// True for paths whose file name is python3.X[d] or libpython3.X[d].so[...].
bool LooksLikeInterpreterPath(const std::string& path);

// Picks the interpreter among a process's mapped file paths (libpython before the executable, as
// an embedding or --enable-shared build runs the library's copy of _PyRuntime) and inspects it.
// Each path is opened under `root` (e.g. "/proc/PID/root" for a process in a container: its links
// resolve inside it), and InterpreterInfo::path is `root` + the path. kNotPython
// when no path looks like CPython.
// `identities`, when given, holds each path's device and inode from its maps line, which the
// file opened must have.
absl::StatusOr<InterpreterInfo> DetectInterpreter(
    std::span<const std::string> mapped_paths, const std::string& root = "",
    std::span<const std::optional<FileIdentity>> identities = {});

// The process address of ELF address `elf_address` of a file one line of /proc/PID/maps maps
// (placed by the segment it maps, LoadBias). 0 when no segment holds the mapping's offset.
uint64_t ElfToProcessAddress(const InterpreterInfo& info, uint64_t elf_address,
                             const FileMapping& mapping);

// What the agent keeps per Python process: the walker's (and BPF map's) configuration and the
// process address range of _PyEval_EvalFrameDefault, for SpliceStacks.
struct ProcessInterpreter {
  WalkerConfig config;
  uint64_t eval_frame_start = 0;  // [start, end) in the process; 0, 0 when unknown
  uint64_t eval_frame_end = 0;
};

// For a supported `info` whose file the process maps as `mapping` (any one line of
// /proc/PID/maps for info.path). nullopt when the addresses do not fall in its segments.
std::optional<ProcessInterpreter> MakeProcessInterpreter(const InterpreterInfo& info,
                                                         const FileMapping& mapping);

}  // namespace ember::python
