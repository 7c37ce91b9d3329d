// Names of JIT-compiled code from perf maps (/tmp/perf-PID.map), as Node.js --perf-basic-prof, the
// JVM (jcmd PID Compiler.perfmap), .NET (DOTNET_PerfMapEnabled) and CPython -X perf write them.
// PerfMap parses bytes (tests feed it strings); PerfMapFile reads a file incrementally into one.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "common/untrusted_open.h"

namespace ember {

// When an entry would not fit, the oldest half of the entries (by when their line was read) are
// evicted: old JIT code is the likeliest to be gone, and a map that keeps growing keeps naming
// its newest code instead of freezing at the cap.
struct PerfMapLimits {
  size_t max_entries = size_t{1} << 20;      // address ranges held at once
  size_t max_name_bytes = size_t{64} << 20;  // name text held at once
  // Estimated bytes held at once: name text plus kPerfMapEntryBytes per entry
  // (--max-perf-map-bytes).
  size_t max_bytes = size_t{64} << 20;
  // A longer line is skipped (and counted). Java signatures are long, but not this long.
  size_t max_line_bytes = size_t{16} << 10;
};

// Counters since the PerfMap was made; Reset() keeps them.
struct PerfMapStats {
  uint64_t entries = 0;    // lines that became entries
  uint64_t bad_lines = 0;  // not "START SIZE NAME" in hex, zero size, START+SIZE overflows, no name
  uint64_t long_lines = 0;  // over max_line_bytes
  uint64_t dropped = 0;     // good lines refused because their name alone exceeds a limit
  uint64_t evictions = 0;   // times a limit was reached and the oldest entries were evicted
  uint64_t evicted = 0;     // entries evicted, in all
  uint64_t resets = 0;
};

struct PerfMapSymbol {
  uint64_t start = 0;  // the part of the entry's range no later entry covers: [start, end)
  uint64_t end = 0;
  absl::string_view name;  // valid until the next Append or Reset
};

// The entries of one perf map, fed its bytes in order.
//
// Overlaps: a later line wins over the earlier ones it overlaps, on the addresses it covers.
// JITs write a line when they place code, and reuse the space of code they freed (V8 also moves
// code during GC), so the latest line covering an address names what is there now; an older
// entry keeps only the parts of its range no later line covers. perf itself prefers the
// newest entry the same way.
class PerfMap {
 public:
  explicit PerfMap(PerfMapLimits limits = {});

  // Parses `bytes`, which follow the bytes fed before: each complete line becomes an entry; an
  // unfinished last line waits for the rest. Returns how many entries were added.
  size_t Append(absl::string_view bytes);
  // One entry given by its fields (a jitdump's code load), as the line "START SIZE NAME" would be:
  // false, counted as a bad line, for a zero size, a range past 2^64 or no name, and as a long
  // line for a name over max_line_bytes.
  bool Add(uint64_t start, uint64_t size, absl::string_view name);
  // Forgets every entry and any unfinished line (the file was replaced or truncated).
  void Reset();
  // Evicts the oldest half of the entries, as reaching a limit does (counted the same way), for
  // a budget shared with other maps.
  void ShedOldest();

  // The newest entry covering `address`, or nullopt.
  std::optional<PerfMapSymbol> Lookup(uint64_t address) const;

  // Changes whenever an address Lookup named may be named otherwise now: a new entry overlapped
  // older ones, or Reset. Entries added where none was only name addresses that had no name, so
  // they keep the version (a cache of hits stays valid while the JIT keeps appending). Unique
  // across every PerfMap of this program and over time, so (version, address) can key a cache
  // shared by processes.
  uint64_t version() const { return version_; }
  size_t size() const { return ranges_.size(); }
  size_t name_bytes() const { return names_.size(); }
  // What the entries hold: name text plus a fixed estimate per entry (a std::map node).
  size_t EstimatedBytes() const;
  const PerfMapStats& stats() const { return stats_; }
  const PerfMapLimits& limits() const { return limits_; }

 private:
  struct Range {
    uint64_t end = 0;
    uint64_t seq = 0;          // order of the line it came from: eviction goes oldest first
    uint32_t name_offset = 0;  // into names_
    uint32_t name_size = 0;
  };

  void ParseLine(absl::string_view line);
  void Insert(uint64_t start, uint64_t end, absl::string_view name);
  // Whether an entry named `name_size` bytes fits now (it may split an older one in two).
  bool Fits(size_t name_size) const;
  // Evicts the oldest half of the entries (all, when only one is left) and compacts the names.
  void EvictOldest();
  // Rewrites names_ with only the names ranges still use.
  void CompactNames();
  void NewVersion();

  PerfMapLimits limits_;
  PerfMapStats stats_;
  std::map<uint64_t, Range> ranges_;  // by start; never overlapping
  std::string names_;
  std::string partial_line_;
  bool skipping_long_line_ = false;  // inside a line already counted as too long
  bool compacted_ = false;           // the last compaction left names_ over half full
  bool overlapped_ = false;          // an entry of this Append covered part of an older one
  uint64_t version_ = 0;
  uint64_t next_seq_ = 0;

 public:
  // Estimated bytes of one entry: a red-black tree node's header plus its key and Range.
  static constexpr size_t kEntryBytes = 32 + sizeof(std::pair<const uint64_t, Range>);
};

inline constexpr size_t kPerfMapEntryBytes = PerfMap::kEntryBytes;

// A process's perf map file, read incrementally: each Refresh parses only the bytes appended
// since the last one. A file that shrank, was replaced (other inode), or rewritten in place
// (the bytes before the read offset changed, as `jcmd Compiler.perfmap` rewrites) is read again
// from the start.
class PerfMapFile {
 public:
  enum class Result {
    kUnchanged,  // nothing new
    kGrew,       // new bytes were read
    kReloaded,   // read from the start again
    kMissing,    // no file (yet); the entries read before are kept
  };

  // `location` is where to open it (/tmp/perf-NSPID.map under /proc/PID/root); `name` how the
  // process names it (/tmp/perf-NSPID.map).
  PerfMapFile(FileLocation location, std::string name, PerfMapLimits limits = {},
              size_t max_read_per_refresh = size_t{16} << 20);

  // Reads at most max_read_per_refresh new bytes (the rest waits for the next call).
  Result Refresh();
  // PerfMap::ShedOldest; the file is not read again for it.
  void ShedOldest() { map_.ShedOldest(); }

  const PerfMap& map() const { return map_; }
  const FileLocation& location() const { return location_; }
  const std::string& name() const { return name_; }
  // Where the next Refresh opens it: another path to the same file, for a map several processes
  // share (as long as one path is the file read before, reading goes on where it was).
  void set_location(FileLocation location) { location_ = std::move(location); }
  // The file read last; 0 and 0 before any was.
  dev_t dev() const { return dev_; }
  ino_t inode() const { return inode_; }

 private:
  FileLocation location_;
  std::string name_;
  size_t max_read_;
  PerfMap map_;
  dev_t dev_ = 0;
  ino_t inode_ = 0;
  uint64_t offset_ = 0;  // bytes of the file fed to map_
  std::string tail_;     // the last bytes before offset_, to notice a rewrite in place
};

// The pid of process `pid` in its own pid namespace: the last field of the "NSpid:" line of
// /proc/PID/status text; `pid` itself when there is no such line (kernels before 4.1).
uint32_t NamespacePid(absl::string_view status_text, uint32_t pid);

}  // namespace ember
