// Turns sampled addresses into symbolized frames, through the process table, the ELF module cache,
// kernel symbols and the language runtimes (code in no file, e.g. JIT code named from perf maps).
// Each distinct location is symbolized once and cached.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "common/profile.h"
#include "process/process_table.h"
#include "runtimes/runtime.h"
#include "symbolize/elf_module.h"
#include "symbolize/kallsyms.h"
#include "symbolize/vdso.h"

namespace ember {

// Counters since the resolver was made.
struct FrameResolverStats {
  uint64_t hits = 0;     // frames found in the cache
  uint64_t misses = 0;   // frames symbolized and added to it
  uint64_t evicted = 0;  // frames dropped to stay within max_bytes
  // Kernel frames symbolized above the kernel image, where modules and BPF programs loaded after
  // the kernel's symbols were read lie (KernelSymbols::PastKernelImage).
  uint64_t kernel_misses_past_image = 0;
};

// User frames that could not be named, by why. Counted when a location is symbolized (once per
// location and cache generation), an address in no mapping each time it is seen.
struct SymbolizationFailures {
  uint64_t unmapped = 0;         // in no mapping of the process, even after re-reading its maps
  uint64_t unreadable_file = 0;  // the mapped file could not be opened as ELF (gone, cut, corrupt)
  uint64_t no_symbol = 0;        // the file is read, but no symbol covers the address
  uint64_t file_changed = 0;     // the file was truncated after it was opened (ElfModule)
  // A process's [vdso] mapping could not be read, or held no ELF image with symbols (its frames
  // there keep the [vdso] marker). Once per process and vDSO mapping (or exec), however often
  // the read is tried again.
  uint64_t vdso_unreadable = 0;
};

// How many of `user_frames` (leaf first) a stack keeps: up to and including the first frame
// whose function nothing calls (Frame::thread_start: runtime.goexit, where a goroutine starts),
// whatever a walk made of the stack past it; nullopt when there is none.
std::optional<size_t> FramesToThreadStart(std::span<const Frame* const> user_frames);

class FrameResolver final : private CodeFrameCache {
 public:
  // kernel_symbols may be null (kernel frames then keep their raw address as a name). max_bytes
  // bounds the cached frames' estimated bytes (the hash node, the Frame, and the heap
  // blocks of their strings and inlined functions), see NextGeneration.
  FrameResolver(ProcessTable* processes, ModuleCache* modules, const KernelSymbols* kernel_symbols,
                size_t max_bytes = size_t{64} << 20);
  // One per agent, never copied or assigned: the frames it handed out stay where they are, and
  // the runtimes its StackBuilder set (set_runtimes) stay set.
  FrameResolver(const FrameResolver&) = delete;
  FrameResolver& operator=(const FrameResolver&) = delete;

  // `caller` is true for every frame but the leaf: its address is a return address, so the call
  // instruction is the byte before it.
  const Frame* Kernel(uint64_t ip, bool caller);
  // Code in no file (anonymous or memfd memory, or no executable mapping at all) is named by the
  // runtimes (Runtime::NameCodeOutsideFiles), their frames cached here under their version.
  const Frame* User(Process* process, uint64_t ip, bool caller);
  // The runtimes that name code in no file; null (the default): none, such code keeps its marker.
  // Not owned; set by the StackBuilder that owns them.
  void set_runtimes(RuntimeSet* runtimes) { runtimes_ = runtimes; }
  // A frame standing for something that is not code, e.g. "[truncated]".
  const Frame* Marker(absl::string_view name);

  // Drops frames not used in the last two generations, then, above max_bytes, the least recently
  // used ones. Frames handed out stay valid until then, so call this only after the interval
  // that used them has been written. Between calls, a frame that would take the cache above
  // max_bytes first evicts frames not used since the last call, oldest generation first, down to
  // seven eighths of it; frames of the current generation stay (the interval holds them), so
  // only they can take the cache above max_bytes, until the next call.
  void NextGeneration();
  // Names kernel frames from `kernel_symbols` from now on, dropping every cached kernel frame.
  // Frames handed out go with them: call this only where NextGeneration may be called.
  void ReplaceKernelSymbols(const KernelSymbols* kernel_symbols);
  // Names again, in place, every cached frame of these files, whose modules have just reloaded
  // their symbols (a separate debug file arrived: ModuleCache::DebugFileArrived). The frames keep
  // their addresses, so the samples of this interval that hold them show the new names too: a
  // frame is named late, no sample waits. Returns how many frames were named again.
  size_t Rename(const std::vector<FileIdentity>& files);
  size_t size() const { return frames_.size(); }
  size_t bytes() const { return bytes_; }
  const FrameResolverStats& stats() const { return stats_; }
  const SymbolizationFailures& failures() const { return failures_; }

 private:
  struct Key {
    FileIdentity file = {};  // {0,0} for kernel and marker frames
    uint64_t value = 0;      // file offset, kernel address, or 0 for markers
    std::string name = {};   // marker name or "" otherwise
    // Frames of code in no file: the version a runtime gave them (unique across processes and
    // time), `value` the process address. 0 otherwise.
    uint64_t jit_version = 0;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& key) const;
  };
  struct Entry {
    std::unique_ptr<Frame> frame;
    uint64_t generation = 0;
    size_t bytes = 0;
  };

  // The last file-backed frame found for an address of a process's maps, in a small table by
  // pid and address: most samples' frames are ones the samples just before had, and this answers
  // them without the mapping search, the key and its hash. Good only while `generation` is the
  // current one (the frame is then one of this interval's, which no eviction drops) and for the
  // maps of that version (maps versions are never reused, not even by another process).
  struct RecentFrame {
    uint64_t maps_version = 0;
    uint64_t address = 0;  // the process address looked up (a return address less one)
    uint64_t generation = 0;
    const Frame* frame = nullptr;
  };
  static constexpr int kRecentFrameBits = 10;  // 1024 entries, 32 KiB
  static size_t RecentSlot(uint32_t pid, uint64_t address);

  const Frame* Remember(Key key, Frame frame);
  const Frame* Lookup(const Key& key);
  // CodeFrameCache, for the runtimes.
  const Frame* Find(uint64_t version, ProcessAddress address) override;
  const Frame* Add(uint64_t version, ProcessAddress address, Frame frame) override;
  // The frame of an address in the process's [vdso] mapping, named from its image; nullptr when
  // the image could not be read.
  const Frame* Vdso(Process* process, const MemoryMapping& mapping, ProcessAddress address);
  Frame SymbolizeNative(Process* process, const MemoryMapping& mapping, FileOffset offset);
  // Names `frame` (module, address) from `module` at file offset `offset`; false when it has no
  // symbol there.
  static bool NameFrom(const ElfModule& module, FileOffset offset, Frame& frame);
  // Evicts frames of earlier generations, oldest first, until bytes_ is down to `target`.
  void EvictOlderGenerations(size_t target);
  // What a cached frame holds: the hash node with its key, the Frame, and the heap blocks of
  // their strings and inlined functions.
  static size_t EstimatedFrameBytes(const Key& key, const Frame& frame);

  ProcessTable* processes_;
  ModuleCache* modules_;
  RuntimeSet* runtimes_ = nullptr;
  const KernelSymbols* kernel_symbols_;
  size_t max_bytes_;
  uint64_t generation_ = 0;
  // Flat: a lookup per sampled frame is the hot path. The Frame itself is on the heap, so the
  // pointers handed out stay valid as the table grows.
  absl::flat_hash_map<Key, Entry, KeyHash> frames_;
  std::vector<RecentFrame> recent_ = std::vector<RecentFrame>(size_t{1} << kRecentFrameBits);
  size_t bytes_ = 0;          // EstimatedFrameBytes of every cached frame
  size_t current_bytes_ = 0;  // of those used in the current generation
  FrameResolverStats stats_;
  SymbolizationFailures failures_;
  VdsoImages vdso_images_;
};

}  // namespace ember
