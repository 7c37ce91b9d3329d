// HotSpot's VM structure tables (gHotSpotVMStructs, gHotSpotVMTypes, gHotSpotVMIntConstants,
// gHotSpotVMLongConstants), read from a live JVM and resolved into the HotSpotLayout the walk
// and the namer use. The tables, their strides and every non-static offset are filled by libjvm's
// initialisers, so they are read from the process, never from the file; what they say holds for
// every process of the same libjvm build, so the layout is cached by build id.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtimes/hotspot/hotspot_layout.h"
#include "runtimes/hotspot/jvm_detect.h"
#include "runtimes/process_memory.h"

namespace ember::hotspot {

// Bounds on what a process's tables may state; anything past them is refused as malformed.
inline constexpr uint64_t kMaxEntryStride = 256;
// JDK 17 has ~790 struct and ~770 type entries.
inline constexpr size_t kMaxEntries = 16384;  // per table
inline constexpr size_t kMaxNameBytes = 256;  // a name or type string, NUL included
// All strings of the four tables together, NUL included, counting each row's copy.
inline constexpr size_t kMaxStringBytes = size_t{1} << 20;
inline constexpr uint64_t kMaxTypeSize = 64 * 1024;  // of a type whose fields are read

// One VMStructEntry: a field of a VM type, non-static (its offset) or static (its address).
struct VMStructRow {
  std::string type_name;
  std::string field_name;
  std::string type_string;  // the field's C++ type, "" when the table has none
  bool is_static = false;
  uint64_t offset = 0;   // non-static: bytes from the object's start
  uint64_t address = 0;  // static: process address
};

// One VMTypeEntry.
struct VMTypeRow {
  std::string type_name;
  std::string superclass_name;  // "" when none
  uint64_t size = 0;
};

// The four tables as the process holds them, in table order.
struct VMTables {
  std::vector<VMStructRow> structs;
  std::vector<VMTypeRow> types;
  std::vector<std::pair<std::string, int32_t>> int_constants;
  std::vector<std::pair<std::string, uint64_t>> long_constants;
};

// Errors, each tagged with its outcome (OutcomeOf in jvm_detect.h):
// - kNotReady (code kUnavailable): the tables are not initialised yet (a stride symbol reads 0 or
//   a table pointer is null): libjvm's initialisers have not run; ask again later.
// - kUnsupported, code kUnimplemented: this build lacks an entry the layout needs; the message
//   names the first missing one ("CodeCache::_heaps").
// - kUnsupported, code kDataLoss: the tables break a bound above (stride, count, terminator,
//   name, offset past its type's size).
// - kUnreadableProcess (code kFailedPrecondition): process memory could not be read.
// OutcomeOf(status) == JvmOutcome::kNotReady.
bool IsNotReady(const absl::Status& status);

// Reads the four tables of the process whose libjvm `jvm` describes.
absl::StatusOr<VMTables> ReadVMTables(MemoryReader& reader, const JvmProcess& jvm);

// Resolves the layout from tables read from a process that loaded libjvm at `bias`: alternatives
// chosen by which entries exist, widths from the type strings (sizes in the types table), statics
// as ELF addresses. Reads the version statics (Abstract_VM_Version) through `reader`.
absl::StatusOr<HotSpotLayout> ResolveLayout(const VMTables& tables, uint64_t bias,
                                            MemoryReader& reader);

// ReadVMTables, then ResolveLayout.
absl::StatusOr<HotSpotLayout> ReadHotSpotLayout(MemoryReader& reader, const JvmProcess& jvm);

// Layouts by libjvm build id, so that a second JVM of the same build reads none of its tables.
// Bounded: the least recently used build goes. A libjvm without a build id is never cached.
// Not thread-safe: one owner (the runtime, on the process table's thread) asks it.
class LayoutCache {
 public:
  explicit LayoutCache(size_t capacity = 8) : capacity_(capacity) {}
  // The layout of `jvm`'s build, read through `reader` (the process's memory) when not cached.
  // Errors are not cached: a not-ready JVM is asked again.
  absl::StatusOr<std::shared_ptr<const HotSpotLayout>> Get(MemoryReader& reader,
                                                           const JvmProcess& jvm);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string build_id;
    std::shared_ptr<const HotSpotLayout> layout;
  };
  size_t capacity_;
  std::vector<Entry> entries_;  // most recently used last
};

}  // namespace ember::hotspot
