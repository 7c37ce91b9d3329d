// Native symbolization: one opened ELF module (symbols, DWARF lines, separate debug file) and a
// bounded cache of modules keyed by file identity, shared by every process that maps them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/address.h"
#include "common/profile.h"
#include "common/untrusted_open.h"
#include "elf/load_segments.h"
#include "symbolize/debug_file_source.h"

namespace ember {

namespace internal {
class DwarfLines;
class ElfFile;
class FileMappingCheck;
class GoPclntab;
class SymbolTable;
}  // namespace internal

struct FileIdentityHash {
  size_t operator()(const FileIdentity& id) const;
};

struct SourceSymbol {
  std::string function;     // demangled; the out-of-line function the symbol table names
  std::string source_file;  // from DWARF line info; empty when unknown
  // 0 when unknown. In inlined code this is the line of `function` that the outermost inlined
  // call sits on, so it always belongs to `function`.
  uint32_t line = 0;
  // The functions inlined at the address, innermost first (as pprof and OTLP list a location's
  // lines, before `function`). The first one's line is the line table's row for the address,
  // each later one's the call site of the one before it. Empty outside inlined code and
  // without DWARF.
  std::vector<InlineFrame> inlined;
  // kGo when named from Go's own symbol table (.gopclntab), else kNative.
  FrameKind kind = FrameKind::kNative;
  // Nothing calls the function: a thread or goroutine starts there (Go's runtime.goexit,
  // runtime.mstart, runtime.rt0_go), so a stack that reaches it is whole.
  bool thread_start = false;
};

struct ElfModuleOptions {
  // Root of separate debug files (tests point it at a fixture dir). Files by build id are looked
  // for here, in the agent's namespace (a build id names one file only); by .gnu_debuglink name
  // here under the process's root.
  std::string debug_dir = "/usr/lib/debug";
  // Asked by build id when no local debug file is found (a debuginfod fetcher); null: none.
  // Not owned; outlives the modules.
  DebugFileSource* debug_file_source = nullptr;
};

// One ELF binary or shared library, opened once, shared by every process that maps it. Opening
// reads only the headers; symbols, the separate debug file and DWARF are loaded on the first
// Symbolize() call, so modules that are mapped but never sampled stay cheap.
class ElfModule {
 public:
  // location: what to open (its map_files entry, or its path under its process's root); its
  // root is also where the separate debug file named by .gnu_debuglink is looked for.
  // display_path: the path as the process mapped it (names, .gnu_debuglink search dir).
  // Errors: unreadable / refused / not ELF / corrupt -> a clear absl::Status, never a crash.
  static absl::StatusOr<std::unique_ptr<ElfModule>> Open(const FileLocation& location,
                                                         const std::string& display_path,
                                                         const ElfModuleOptions& options = {});
  ~ElfModule();
  ElfModule(const ElfModule&) = delete;
  ElfModule& operator=(const ElfModule&) = delete;

  const std::string& path() const { return path_; }          // display_path
  const std::string& build_id() const { return build_id_; }  // lower-case hex, "" when none

  // File offset (mapping pgoff + (ip - mapping start)) of an instruction -> ELF virtual address
  // (CodeOffsetToElfAddress); nullopt when no segment holds the offset.
  std::optional<ElfAddress> ToElfAddress(FileOffset offset) const;

  // The function containing addr (from .symtab, else .dynsym, of the file or of its separate
  // debug file), demangled, with DWARF file:line and the chain of inlined functions when debug
  // info exists. Go code is named from the binary's own Go symbol table instead, with its file,
  // line and inlined functions, stripped or not, so both builds of a program name it alike.
  // nullopt when no symbol covers it. Not thread-safe: the first call loads the
  // symbol tables, and DWARF lookups fill per-compile-unit caches.
  std::optional<SourceSymbol> Symbolize(ElfAddress addr) const;

  // Heap memory it holds, estimated: this object and its arrays, kElfHandleBytes per open file
  // (libelf's descriptor and section headers), the symbol table's arrays once loaded, and what
  // DWARF lookups have cached (DwarfLines). Section contents are read through libelf's mapping of
  // the file (page cache the kernel can reclaim) and are not counted. O(1).
  size_t EstimatedBytes() const;
  static constexpr size_t kElfHandleBytes = 4096;
  // True once a read of the file's mapping faulted (SIGBUS: the file was truncated after it was
  // opened, e.g. overwritten in place). Symbolize then returns nullopt for good, and the module's
  // libelf and libdw state is leaked rather than freed.
  bool file_changed() const { return file_changed_; }
  // Drops this process's pages of the mappings of the file and its debug file
  // (internal::ElfFile::ReleasePages).
  void ReleasePages(internal::FileMappingCheck& file_mappings) const;

  // True when symbols were loaded without a debug file, which was asked of the
  // DebugFileSource: ReloadSymbols once it has it.
  bool awaiting_debug_file() const { return awaiting_debug_file_; }
  // Drops the symbols, DWARF and debug file loaded so far; the next Symbolize loads them again
  // (and finds the debug file that has arrived since).
  void ReloadSymbols();

 private:
  ElfModule(std::string path, std::string root, ElfModuleOptions options,
            std::unique_ptr<internal::ElfFile> file);
  void LoadSymbols() const;

  std::string path_;
  std::string root_;  // FileLocation::root of the process it was opened through
  std::string build_id_;
  ElfModuleOptions options_;
  std::unique_ptr<internal::ElfFile> file_;
  std::vector<LoadSegment> segments_;  // PT_LOAD, in file order

  // Loaded lazily by the first Symbolize().
  mutable bool symbols_loaded_ = false;
  mutable std::unique_ptr<internal::ElfFile> debug_file_;
  mutable std::unique_ptr<internal::SymbolTable> symbols_;
  mutable std::unique_ptr<internal::DwarfLines> lines_;
  mutable std::unique_ptr<internal::GoPclntab> go_;  // Go binaries only
  mutable bool file_changed_ = false;
  mutable bool awaiting_debug_file_ = false;
};

// Counters since the cache was made.
struct ModuleCacheStats {
  uint64_t hits = 0;         // Get found the module (or its cached failure)
  uint64_t misses = 0;       // Get opened it
  uint64_t unreachable = 0;  // Get had no path to open it through (nothing cached)
  uint64_t evicted = 0;      // modules dropped to stay within max_modules or max_bytes
};

// Bounded cache of open modules keyed by file identity, shared across processes, in module count
// and in estimated bytes (ElfModule::EstimatedBytes). A module pointer returned by Get() stays
// valid until the next Get() or NextGeneration(): a caller symbolizes with it at once.
class ModuleCache {
 public:
  explicit ModuleCache(size_t max_modules = 1024, ElfModuleOptions options = {},
                       size_t max_bytes = size_t{192} << 20);
  ~ModuleCache();

  // Returns the cached module or opens it; nullptr when it cannot be opened (the failure is cached
  // too, so a broken file is not retried on every sample, and is logged once at warn). An empty
  // open path means the file cannot be reached now (its process is gone): nullptr, and nothing
  // is cached, as another process may map the same file.
  // Marks the entry used in the current generation. A module grows as it is symbolized with
  // (symbols load on first use, DWARF lookups cache): the growth of the module returned last is
  // counted at the next call, and then, when the cache holds more than max_bytes, the least
  // recently used modules other than the one returned are evicted, down to seven eighths of it.
  // So after every Get, bytes() <= max_bytes unless the returned module alone is bigger.
  ElfModule* Get(const FileIdentity& id, const FileLocation& location,
                 const std::string& display_path);
  // The same, with the path to open made only when the module is not cached (finding a path
  // that opens may take a system call).
  ElfModule* Get(const FileIdentity& id, absl::FunctionRef<FileLocation()> location,
                 const std::string& display_path);

  // Marks the cached module of `id`, if any, used in the current generation without opening it:
  // for a caller that reuses what it symbolized with the module before (a cached frame). A module
  // whose every sampled address is such a frame is still in use; evicted, the next new address in
  // it would open the file and read its DWARF again (libc's, decompressed from libc6-dbg: 80 ms).
  void MarkUsed(const FileIdentity& id);
  // Starts a new generation and drops entries not used in the last `keep_generations`
  // generations, then, if still above max_modules, the least recently used. Called once per
  // export interval, after the interval has been written.
  void NextGeneration(int keep_generations = 3);
  // Drops this process's pages of every cached module's file mappings (ElfModule::ReleasePages).
  void ReleasePages(internal::FileMappingCheck& file_mappings) const;

  // Where modules without a local debug file ask for one (ElfModuleOptions::debug_file_source).
  void SetDebugFileSource(DebugFileSource* source) { options_.debug_file_source = source; }
  // The debug file of `build_id` has arrived: the cached modules of that build id that waited
  // for it load their symbols again at their next use. Returns their file identities, for the
  // caller to name their cached frames again.
  std::vector<FileIdentity> DebugFileArrived(const std::string& build_id);
  // Build ids of the cached modules that wait for a debug file, for asking again.
  std::vector<std::string> AwaitedBuildIds() const;
  // The cached module of `id`, marked used, or nullptr; never opens a file. Valid as Get's.
  ElfModule* Find(const FileIdentity& id);

  size_t size() const { return entries_.size(); }
  // EstimatedBytes of every cached module (a failed open counts as kFailedEntryBytes), the
  // growth of the one returned last included.
  size_t bytes() const;
  const ModuleCacheStats& stats() const { return stats_; }
  static constexpr size_t kFailedEntryBytes = 128;

 private:
  struct Entry {
    std::unique_ptr<ElfModule> module;  // nullptr: opening failed
    uint64_t last_generation = 0;
    uint64_t last_use = 0;  // tick of the last Get() or MarkUsed(), for LRU order
    size_t bytes = 0;       // as last counted
  };
  using Map = std::unordered_map<FileIdentity, Entry, FileIdentityHash>;

  static size_t BytesOf(const Entry& entry);
  // Counts the growth of the module returned last.
  void Reaccount();
  // Evicts the least recently used entries other than `keep` while there are more than
  // `max_entries` or more than `max_bytes` bytes.
  void EvictLeastRecentlyUsed(size_t max_entries, size_t max_bytes, const Entry* keep);

  size_t max_modules_;
  size_t max_bytes_;
  ElfModuleOptions options_;
  uint64_t generation_ = 0;
  uint64_t tick_ = 0;
  Map entries_;
  Entry* last_ = nullptr;  // the entry Get returned last, while it is cached
  size_t bytes_ = 0;       // sum of the entries' `bytes`
  ModuleCacheStats stats_;
};

}  // namespace ember
