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

#include "absl/status/statusor.h"
#include "common/profile.h"
#include "symbolize/address.h"

namespace ember {

namespace internal {
class DwarfLines;
class ElfFile;
class SymbolTable;
}  // namespace internal

// Identity of a mapped file, from /proc/PID/maps (device + inode).
struct FileIdentity {
  uint64_t dev = 0;
  uint64_t inode = 0;
  bool operator==(const FileIdentity&) const = default;
};

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
};

struct ElfModuleOptions {
  // Root of separate debug files (tests point it at a fixture dir).
  std::string debug_dir = "/usr/lib/debug";
};

// One ELF binary or shared library, opened once, shared by every process that maps it. Opening
// reads only the headers; symbols, the separate debug file and DWARF are loaded on the first
// Symbolize() call, so modules that are mapped but never sampled stay cheap.
class ElfModule {
 public:
  // open_path: what to open (may be /proc/PID/map_files/START-END or /proc/PID/root/PATH);
  // display_path: the path as the process mapped it (names, .gnu_debuglink search dir).
  // Errors: unreadable / not ELF / corrupt -> a clear absl::Status, never a crash.
  static absl::StatusOr<std::unique_ptr<ElfModule>> Open(const std::string& open_path,
                                                         const std::string& display_path,
                                                         const ElfModuleOptions& options = {});
  ~ElfModule();
  ElfModule(const ElfModule&) = delete;
  ElfModule& operator=(const ElfModule&) = delete;

  const std::string& path() const { return path_; }          // display_path
  const std::string& build_id() const { return build_id_; }  // lower-case hex, "" when none

  // File offset (mapping pgoff + (ip - mapping start)) -> ELF virtual address via the PT_LOAD
  // program headers; nullopt when no segment covers the offset.
  std::optional<ElfAddress> ToElfAddress(FileOffset offset) const;

  // The function containing addr (from .symtab, else .dynsym, of the file or of its separate
  // debug file), demangled, with DWARF file:line and the chain of inlined functions when debug
  // info exists. nullopt when no symbol covers it. Not thread-safe: the first call loads the
  // symbol tables, and DWARF lookups fill per-compile-unit caches.
  std::optional<SourceSymbol> Symbolize(ElfAddress addr) const;

  // True once a read of the file's mapping faulted (SIGBUS: the file was truncated after it was
  // opened, e.g. overwritten in place). Symbolize then returns nullopt for good, and the module's
  // libelf and libdw state is leaked rather than freed.
  bool file_changed() const { return file_changed_; }

 private:
  struct Segment {
    uint64_t offset;
    uint64_t file_size;
    uint64_t vaddr;
    bool executable;
  };

  ElfModule(std::string path, ElfModuleOptions options, std::unique_ptr<internal::ElfFile> file);
  void LoadSymbols() const;

  std::string path_;
  std::string build_id_;
  ElfModuleOptions options_;
  std::unique_ptr<internal::ElfFile> file_;
  std::vector<Segment> segments_;

  // Loaded lazily by the first Symbolize().
  mutable bool symbols_loaded_ = false;
  mutable std::unique_ptr<internal::ElfFile> debug_file_;
  mutable std::unique_ptr<internal::SymbolTable> symbols_;
  mutable std::unique_ptr<internal::DwarfLines> lines_;
  mutable bool file_changed_ = false;
};

// Bounded cache of open modules keyed by file identity, shared across processes. Eviction happens
// only in NextGeneration(), so a module pointer returned by Get() stays valid until then.
class ModuleCache {
 public:
  explicit ModuleCache(size_t max_modules = 1024, ElfModuleOptions options = {});
  ~ModuleCache();

  // Returns the cached module or opens it; nullptr when it cannot be opened (the failure is cached
  // too, so a broken file is not retried on every sample, and is logged once at warn).
  // Marks the entry used in the current generation.
  ElfModule* Get(const FileIdentity& id, const std::string& open_path,
                 const std::string& display_path);

  // Starts a new generation and drops entries not used in the last `keep_generations`
  // generations, then, if still above max_modules, the least recently used. Called once per
  // export interval, after the interval has been written.
  void NextGeneration(int keep_generations = 3);

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::unique_ptr<ElfModule> module;  // nullptr: opening failed
    uint64_t last_generation = 0;
    uint64_t last_use = 0;  // tick of the last Get(), for LRU order
  };

  size_t max_modules_;
  ElfModuleOptions options_;
  uint64_t generation_ = 0;
  uint64_t tick_ = 0;
  std::unordered_map<FileIdentity, Entry, FileIdentityHash> entries_;
};

}  // namespace ember
