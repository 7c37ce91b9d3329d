// Names of JIT-compiled code from jitdump files (jit-PID.dump), the format perf reads
// (tools/perf/Documentation/jitdump-specification.txt in the Linux tree): V8 with --perf-prof,
// .NET with DOTNET_PerfMapEnabled=1 or 2, JVM agents. JitDump parses records from any byte
// source (tests feed byte images); JitDumpFile reads a process's file incrementally into one.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/untrusted_open.h"
#include "symbolize/perf_map.h"

namespace ember {

// Random access to the bytes of a jitdump: the file grows while it is read.
class JitDumpSource {
 public:
  virtual ~JitDumpSource() = default;
  virtual uint64_t size() const = 0;
  // Copies bytes [offset, offset + size) to `out`; false when they cannot be read.
  virtual bool Read(uint64_t offset, size_t size, char* out) = 0;
};

// Why a jitdump was refused: reading stops there for good (until the file is replaced).
enum class JitDumpRefusal : uint8_t {
  kNone,
  kBadMagic,   // not "JiTD"
  kByteOrder,  // written by a machine of the other byte order
  kVersion,    // a header version other than 1
  kBadHeader,  // a header size below 40 bytes or absurdly large
  kBadRecord,  // a record whose sizes contradict each other, or absurdly large
};
absl::string_view JitDumpRefusalName(JitDumpRefusal refusal);

// Counters since the JitDump was made.
struct JitDumpStats {
  uint64_t code_loads = 0;
  uint64_t code_moves = 0;      // JIT_CODE_MOVE of code the dump had named
  uint64_t debug_infos = 0;     // JIT_CODE_DEBUG_INFO records kept as line tables
  uint64_t other_records = 0;   // unwinding info, unknown kinds: skipped
  uint64_t line_evictions = 0;  // times line tables reached their share of the limit
};

struct JitDumpLine {
  absl::string_view file;  // valid until the next Read
  uint32_t line = 0;
};

// Who wrote a jitdump, for what its debug-info addresses mean. perf, which defines the format,
// takes an entry's address as the address of the code it describes: perf inject subtracts the
// load's code_addr (tools/perf/util/genelf_debug.c, jit_process_debug_info) and places the result
// after the ELF header of the image it makes; perf's JVMTI agent writes each line's native pc
// (tools/perf/jvmti/libjvmti.c, do_get_line_numbers). V8 alone adds the size of an ELF header to
// every address (src/diagnostics/perf-jit.cc, kElfHeaderSize: 0x40 on 64-bit targets, 0x34 on
// 32-bit ones), which matched perf's line tables until 2020 ("perf jit: Fix inaccurate DWARF
// line table" moved them by that header). .NET writes no debug info.
enum class JitDumpWriter {
  kPerf,  // addresses as perf reads them: the code's own
  kV8,    // the code's address plus V8's kElfHeaderSize, told by the header's e_machine
};

// The code of one jitdump, fed in order. Names live in a PerfMap (the newest load covering an
// address names it, as perf has it: code moved, or a new tier of a function JIT-compiled where
// older code was, replaces what was there), under the same limits as a perf map; line tables
// from JIT_CODE_DEBUG_INFO take at most a quarter of limits.max_bytes more.
class JitDump {
 public:
  explicit JitDump(PerfMapLimits limits = {}, JitDumpWriter writer = JitDumpWriter::kPerf);

  // Reads the records of `source` from where the last call stopped, at most about `max_bytes`
  // of them (code bytes are skipped, not read). A record the source does not yet hold whole
  // waits for the next call (the runtime is writing it). A malformed header or record stops
  // reading for good: refusal() says why. Returns how many records were read.
  size_t Read(JitDumpSource& source, uint64_t max_bytes);
  // Forgets everything read (the file was replaced or truncated).
  void Reset();

  const PerfMap& names() const { return names_; }
  // PerfMap::ShedOldest of the names, and the oldest half of the line tables.
  void ShedOldest();
  // The source line of a named address, from the line table of the code it lies in.
  std::optional<JitDumpLine> LineAt(uint64_t address) const;
  JitDumpRefusal refusal() const { return refusal_; }
  uint64_t offset() const { return offset_; }  // bytes of the source consumed
  bool closed() const { return closed_; }      // a JIT_CODE_CLOSE was read
  const JitDumpStats& stats() const { return stats_; }
  size_t EstimatedBytes() const { return names_.EstimatedBytes() + line_bytes_; }

 private:
  struct LineRow {
    uint32_t offset;  // from the code's start
    uint32_t line;
    uint32_t file;  // index into LineTable::files
  };
  struct LineTable {
    uint64_t end = 0;           // of the code it describes
    uint64_t seq = 0;           // order of its load, for eviction
    std::vector<LineRow> rows;  // by offset
    std::vector<std::string> files;
    size_t bytes = 0;
  };
  struct PendingLines {
    uint64_t code_addr = 0;
    std::vector<LineRow> rows;
    std::vector<std::string> files;
  };

  bool ReadHeader(JitDumpSource& source);
  // One record of `size` bytes at offset_, whose prefix is read; false: refused.
  bool ReadRecord(JitDumpSource& source, uint32_t id, uint64_t size);
  bool ReadCodeLoad(JitDumpSource& source, uint64_t size);
  bool ReadCodeMove(JitDumpSource& source, uint64_t size);
  bool ReadDebugInfo(JitDumpSource& source, uint64_t size);
  // Drops the line tables of code that [start, end) overlaps (newer code is there now).
  void DropLines(uint64_t start, uint64_t end);
  void AddLines(uint64_t start, uint64_t end, LineTable table);
  // Drops the line tables of the older half of the loads (all of them when only one is left).
  void DropOlderHalfOfLines();
  bool Refuse(JitDumpRefusal why);

  PerfMapLimits limits_;
  JitDumpWriter writer_;
  // What the writer adds to a debug-info entry's address, set when the header is read.
  uint64_t debug_address_bias_ = 0;
  PerfMap names_;
  std::map<uint64_t, LineTable> lines_;  // by code start; never overlapping
  std::optional<PendingLines> pending_;  // the DEBUG_INFO read last, for the next load
  size_t line_bytes_ = 0;
  uint64_t seq_ = 0;
  bool header_read_ = false;
  bool closed_ = false;
  uint64_t offset_ = 0;
  JitDumpRefusal refusal_ = JitDumpRefusal::kNone;
  JitDumpStats stats_;
};

// Refusals of every jitdump read since the agent started, by reason (for /metrics).
uint64_t JitDumpRefusalCount(JitDumpRefusal refusal);

// A process's jitdump file, read incrementally: each Refresh reads the records appended since the
// last one. A file that shrank or was replaced (other inode) is read again from the start.
class JitDumpFile {
 public:
  enum class Result { kUnchanged, kGrew, kReloaded, kMissing };
  static constexpr uint64_t kMaxReadPerRefresh = uint64_t{16} << 20;

  // `location`: where to open it (under the process's root); `name`: its path as the process
  // names it.
  JitDumpFile(FileLocation location, std::string name, PerfMapLimits limits = {},
              uint64_t max_read_per_refresh = kMaxReadPerRefresh,
              JitDumpWriter writer = JitDumpWriter::kPerf);
  Result Refresh();
  const JitDump& dump() const { return dump_; }
  void ShedOldest() { dump_.ShedOldest(); }
  const std::string& name() const { return name_; }

 private:
  FileLocation location_;
  std::string name_;
  uint64_t max_read_;
  JitDump dump_;
  dev_t dev_ = 0;
  ino_t inode_ = 0;
  bool refusal_logged_ = false;  // once per file
};

}  // namespace ember
