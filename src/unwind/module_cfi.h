// The call-frame information of one ELF file, shared by every process that maps it: a libdwfl
// session holding that file alone at its own ELF addresses, stepped one frame at a time with
// registers and stack memory served by Dwfl_Thread_Callbacks from a sample's snapshot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>

#include "absl/container/flat_hash_map.h"
#include "symbolize/elf_module.h"
#include "unwind/cfi_row.h"
#include "unwind/elf_image.h"
#include "unwind/frame_registers.h"

namespace ember::internal {
class GoPclntab;
}  // namespace ember::internal

typedef struct Dwfl Dwfl;
typedef struct Dwfl_Module Dwfl_Module;

namespace ember {

enum class StepEnd {
  kStepped,    // the caller's registers are in `caller`
  kOutermost,  // the CFI says this frame has no caller (the return address is undefined)
  kFailed,     // no CFI covers the pc, or the CFI could not be evaluated
};

struct StepResult {
  StepEnd end = StepEnd::kFailed;
  FrameRegisters caller;
  // The caller's pc is an interrupted instruction, not a return address: this frame was a
  // signal trampoline.
  bool caller_is_activation = false;
  bool read_past_stack = false;  // the step needed memory at or above the end of `stack`

  // Back to a failed step with no caller registers known (their memory is reused).
  void Reset() {
    end = StepEnd::kFailed;
    caller.Clear();
    caller_is_activation = false;
    read_past_stack = false;
  }
};

class ModuleCfi {
 public:
  // `compact_rows`: step frames whose CFI row has the compact form (cfi_row.h) without libdwfl,
  // keeping at most `max_rows` rows (looked-up addresses); false leaves every step to libdwfl.
  explicit ModuleCfi(std::shared_ptr<ElfImage> image, bool compact_rows = true,
                     size_t max_rows = kDefaultMaxRows);
  static constexpr size_t kDefaultMaxRows = 1 << 16;
  ~ModuleCfi();
  ModuleCfi(const ModuleCfi&) = delete;
  ModuleCfi& operator=(const ModuleCfi&) = delete;

  // Unwinds one frame whose registers are `frame` (their pc a process address, `bias` the
  // process address minus the ELF address of this module). `is_return_address`: the pc is a
  // return address, so the CFI is looked up at the call, one byte before it.
  // The outcome goes to `result`, reset first (its memory is reused from step to step).
  void Step(const FrameRegisters& frame, uint64_t bias, bool is_return_address,
            const StackMemory& stack, StepResult& result);

  const ElfImage& image() const { return *image_; }
  bool file_changed() const { return file_changed_; }

  struct RowStats {
    uint64_t compact_steps = 0;  // frames stepped by a cached compact row
    uint64_t libdwfl_steps = 0;  // frames left to libdwfl
    uint64_t rows_read = 0;      // rows looked up in libdw (cache misses)
    size_t rows_cached = 0;
  };
  const RowStats& row_stats() const { return row_stats_; }
  // Bytes the row cache holds, estimated from its entries and buckets.
  size_t row_cache_bytes() const;
  // Empties the row cache; returns how many rows it held.
  size_t ClearRows();
  // Drops this process's pages of the file's mapping (ElfImage::ReleasePages).
  void ReleasePages(internal::FileMappingCheck& file_mappings) const {
    image_->ReleasePages(file_mappings);
  }

 private:
  friend struct CfiCallbacks;
  struct StepState;
  bool Open();
  // `lookup_pc`: the ELF address whose CFI row steps the frame.
  void StepInFile(uint64_t lookup_pc, const FrameRegisters& frame, uint64_t bias,
                  const StackMemory& stack, StepResult& result);
  // The row for ELF address `elf_pc`, with `compact` false when there is none: from the cache,
  // else (read_missing) read from the file and cached, else nullptr. Valid until the next call.
  const CfiRow* FindRow(uint64_t elf_pc, bool read_missing);
  CfiRow ReadRow(uint64_t elf_pc);
  // A row for Go code made from the binary's own Go symbol table (its stack-pointer deltas): Go
  // binaries have no .eh_frame, and stripped ones no .debug_frame either, and Go leaves leaf
  // functions without a frame pointer, so a frame-pointer walk misses their callers.
  CfiRow GoRow(uint64_t elf_pc);
  // False when the compact row cannot step this frame, or (!read_missing) a row it needs is not
  // cached yet (`result` is then to be reset).
  bool CompactStep(uint64_t lookup_pc, const FrameRegisters& frame, uint64_t bias,
                   const StackMemory& stack, StepResult& result, bool read_missing);
  void LibdwflStep(uint64_t lookup_pc, const FrameRegisters& frame, const StackMemory& stack,
                   StepResult& result);

  std::shared_ptr<ElfImage> image_;
  const bool compact_rows_;
  const size_t max_rows_;
  Dwfl* dwfl_ = nullptr;
  Dwfl_Module* module_ = nullptr;
  uint64_t elf_low_ = 0;  // the file's ELF address range
  uint64_t elf_high_ = 0;
  bool opened_ = false;        // Open() was tried
  bool file_changed_ = false;  // a read of the file faulted: it was truncated under the agent
  StepState* step_ = nullptr;  // the step in progress, for the callbacks
  absl::flat_hash_map<uint64_t, CfiRow> rows_;  // by ELF lookup address
  bool go_opened_ = false;                      // GoRow looked for the Go symbol table
  std::unique_ptr<internal::GoPclntab> go_;     // the Go symbol table, in Go binaries
  // The last row found: a step looks its caller's row up, which the next step needs again.
  uint64_t last_pc_ = 0;
  const CfiRow* last_row_ = nullptr;
  RowStats row_stats_;
};

// ModuleCfi by file identity, shared by every process's address space. An entry stays while an
// address space holds it; the cache drops entries unused for a few generations.
class ModuleCfiCache {
 public:
  // Each module's row cache (see ModuleCfi).
  explicit ModuleCfiCache(bool compact_rows = true, size_t max_rows = ModuleCfi::kDefaultMaxRows)
      : compact_rows_(compact_rows), max_rows_(max_rows) {}

  // The module's CFI, opened on first use; nullptr when the file cannot be opened (cached and
  // logged once at debug level). An empty open_path (the file cannot be reached now, as its
  // process is gone) finds only what is cached and caches nothing.
  std::shared_ptr<ModuleCfi> Get(const FileIdentity& file, const FileLocation& open_path);
  // This process's vDSO: the kernel maps the same image into every process.
  std::shared_ptr<ModuleCfi> Vdso();
  // Drops modules unused for keep_generations generations, then, while the row caches together
  // hold more than max_row_bytes, empties the biggest ones.
  void NextGeneration(int keep_generations = 3, size_t max_row_bytes = SIZE_MAX);
  // Drops this process's pages of every open file's mapping (ElfImage::ReleasePages).
  void ReleasePages(internal::FileMappingCheck& file_mappings) const;
  size_t size() const { return entries_.size(); }
  // Row statistics since the cache was made (modules dropped since included; rows_cached is
  // what the open modules hold now), and the bytes of the open modules' row caches.
  ModuleCfi::RowStats row_stats() const;
  size_t row_cache_bytes() const;
  uint64_t rows_evicted() const { return rows_evicted_; }  // emptied to stay within the budget

 private:
  struct Entry {
    std::shared_ptr<ModuleCfi> cfi;  // nullptr: opening failed
    uint64_t last_generation = 0;
  };
  template <typename F>
  void ForEachModule(F f) const;

  const bool compact_rows_;
  const size_t max_rows_;
  ModuleCfi::RowStats retired_;  // what dropped modules counted
  uint64_t rows_evicted_ = 0;
  uint64_t generation_ = 0;
  std::unordered_map<FileIdentity, Entry, FileIdentityHash> entries_;
  std::optional<std::shared_ptr<ModuleCfi>> vdso_;
};

}  // namespace ember
