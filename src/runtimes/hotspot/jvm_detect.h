// Is a process a HotSpot JVM? Finds libjvm.so among its mappings (opened under /proc/PID/root, so
// a JVM in a container is read from its own file), its load bias, and out of the ELF file the
// addresses of the VM structure tables and of the symbols that say how their entries are laid
// out (vm_structs.h reads those from the process). Reads files only, never the process.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/mapping.h"
#include "common/untrusted_open.h"
#include "elf/load_segments.h"

namespace ember::hotspot {

// What became of a JVM, for one log line and the outcome label of a metric. Every error of
// DetectJvm and of vm_structs.h carries its outcome (OutcomeOf), so a caller never guesses it
// from a status code: a file's open may fail kUnavailable too, which is no "not ready".
enum class JvmOutcome : uint8_t {
  kSupported = 0,          // the layout is resolved
  kNotReady = 1,           // libjvm's tables (or the VM's statics) are not initialised: retry
  kUnsupported = 2,        // a libjvm without an entry or symbol the layout needs, or hostile
                           // tables; retrying will not help
  kUnreadableLibjvm = 3,   // the libjvm.so file cannot be opened or read as x86-64 ELF
  kUnreadableProcess = 4,  // the process's memory cannot be read (it exited, or no access)
};
inline constexpr size_t kJvmOutcomes = 5;
// "supported", "not_ready", "unsupported", "unreadable_libjvm", "unreadable_process".
absl::string_view JvmOutcomeName(JvmOutcome outcome);
// kSupported for OK; the outcome an error was tagged with; kUnreadableLibjvm for an untagged one.
JvmOutcome OutcomeOf(const absl::Status& status);
// `status` (an error) tagged with `outcome`.
absl::Status WithOutcome(absl::Status status, JvmOutcome outcome);

// ELF addresses (add the load bias for process addresses) of libjvm's exported table symbols.
// The four table pointers are in .data; every stride and offset symbol is in .bss, so its value
// exists only in a process whose libjvm initialisers ran.
struct VMStructsSymbols {
  uint64_t structs = 0;         // gHotSpotVMStructs (VMStructEntry*)
  uint64_t types = 0;           // gHotSpotVMTypes (VMTypeEntry*)
  uint64_t int_constants = 0;   // gHotSpotVMIntConstants
  uint64_t long_constants = 0;  // gHotSpotVMLongConstants
  // gHotSpotVMStructEntry*: ArrayStride, TypeNameOffset, FieldNameOffset, TypeStringOffset,
  // IsStaticOffset, OffsetOffset, AddressOffset (each a uint64_t).
  uint64_t struct_stride = 0;
  uint64_t struct_type_name = 0;
  uint64_t struct_field_name = 0;
  uint64_t struct_type_string = 0;
  uint64_t struct_is_static = 0;
  uint64_t struct_offset = 0;
  uint64_t struct_address = 0;
  // gHotSpotVMTypeEntry*: ArrayStride, TypeNameOffset, SuperclassNameOffset, SizeOffset.
  uint64_t type_stride = 0;
  uint64_t type_type_name = 0;
  uint64_t type_superclass_name = 0;
  uint64_t type_size = 0;
  // gHotSpotVMIntConstantEntry* and gHotSpotVMLongConstantEntry*: ArrayStride, NameOffset,
  // ValueOffset.
  uint64_t int_stride = 0;
  uint64_t int_name = 0;
  uint64_t int_value = 0;
  uint64_t long_stride = 0;
  uint64_t long_name = 0;
  uint64_t long_value = 0;
};

// What one libjvm.so file says, shared by every process that maps it.
struct LibjvmInfo {
  std::string path;      // as opened (root + path inside it)
  std::string build_id;  // lower-case hex GNU build id, "" when it has none
  std::vector<LoadSegment> segments;
  VMStructsSymbols symbols;
};

// Reads one libjvm.so file. An error naming the file for a file that cannot be opened or is not
// x86-64 ELF (kUnreadableLibjvm), or that lacks a table symbol, named (kUnsupported: another
// JVM's libjvm.so, e.g. OpenJ9's).
absl::StatusOr<LibjvmInfo> InspectLibjvm(const FileLocation& location);

// True for paths whose file name is exactly libjvm.so (any directory).
bool LooksLikeLibjvmPath(const std::string& path);

// The first file-backed mapping of libjvm.so among `mappings` (the one DetectJvm reads); nullptr
// when the process maps none.
const MemoryMapping* FindLibjvmMapping(std::span<const MemoryMapping> mappings);

// A JVM process: its libjvm and where the process loaded it.
struct JvmProcess {
  std::shared_ptr<const LibjvmInfo> libjvm = nullptr;
  uint64_t bias = 0;  // process address minus ELF address
  // libjvm's path as this process maps it (its maps line): the module of its Java frames. The
  // shared LibjvmInfo's path is where the first process that mapped the file had it opened.
  std::string mapped_path = {};
  // The process address of a libjvm ELF address.
  uint64_t ToProcess(uint64_t elf_address) const { return elf_address + bias; }
};

// Remembers what libjvm files said, keyed by device and inode (as their maps lines name them),
// so that a fleet of JVMs of one JDK opens its libjvm once. Bounded: the oldest entry goes.
// Not thread-safe.
class LibjvmFiles {
 public:
  explicit LibjvmFiles(size_t capacity = 8) : capacity_(capacity) {}
  absl::StatusOr<std::shared_ptr<const LibjvmInfo>> Inspect(const FileLocation& location);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    FileIdentity identity;
    std::shared_ptr<const LibjvmInfo> info;
  };
  size_t capacity_;
  std::vector<Entry> entries_;  // oldest first
};

// Finds libjvm.so among `mappings` (one process's /proc/PID/maps) and inspects it, opened under
// `root` (e.g. "/proc/PID/root") with the identity its maps line names. nullopt when no mapping is
// libjvm.so; an error when one is but its file cannot be read or placed. `files`, when given,
// caches the file's reading. `proc_dir` ("/proc/PID"), when given, lets the file be opened
// through its map_files entry first: a JDK upgraded under a running JVM has replaced the path.
absl::StatusOr<std::optional<JvmProcess>> DetectJvm(std::span<const MemoryMapping> mappings,
                                                    const std::string& root,
                                                    LibjvmFiles* files = nullptr,
                                                    const std::string& proc_dir = "");

}  // namespace ember::hotspot
