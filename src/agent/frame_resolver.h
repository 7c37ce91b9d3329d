// Turns sampled addresses into symbolized frames, through the process table, the ELF module cache,
// kernel symbols and perf maps (JIT code). Each distinct location is symbolized once and cached.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/strings/string_view.h"
#include "agent/process_table.h"
#include "common/profile.h"
#include "symbolize/elf_module.h"
#include "symbolize/kallsyms.h"

namespace ember {

// User frames that could not be named, by why. Counted when a location is symbolized (once per
// location and cache generation), an address in no mapping each time it is seen.
struct SymbolizationFailures {
  uint64_t unmapped = 0;         // in no mapping of the process, even after re-reading its maps
  uint64_t unreadable_file = 0;  // the mapped file could not be opened as ELF (gone, cut, corrupt)
  uint64_t no_symbol = 0;        // the file is read, but no symbol covers the address
  uint64_t file_changed = 0;     // the file was truncated after it was opened (ElfModule)
};

class FrameResolver {
 public:
  // kernel_symbols may be null (kernel frames then keep their raw address as a name).
  FrameResolver(ProcessTable* processes, ModuleCache* modules, const KernelSymbols* kernel_symbols);

  // `caller` is true for every frame but the leaf: its address is a return address, so the call
  // instruction is the byte before it.
  const Frame* Kernel(uint64_t ip, bool caller);
  // Code in no file (anonymous or memfd memory, or no executable mapping at all) is looked up in
  // the process's perf map, which is read again (rate-limited) when it does not know an address.
  const Frame* User(Process* process, uint64_t ip, bool caller);
  // A frame standing for something that is not code, e.g. "[truncated]".
  const Frame* Marker(absl::string_view name);

  // Drops frames not used in the last two generations. Frames handed out stay valid until then,
  // so call this only after the interval that used them has been written.
  void NextGeneration();
  size_t size() const { return frames_.size(); }
  const SymbolizationFailures& failures() const { return failures_; }

 private:
  struct Key {
    FileIdentity file = {};  // {0,0} for kernel and marker frames
    uint64_t value = 0;      // file offset, kernel address, or 0 for markers
    std::string name = {};   // marker name or "" otherwise
    // JIT frames: the perf map's version (unique across processes and time), `value` the process
    // address. 0 otherwise.
    uint64_t jit_version = 0;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& key) const;
  };
  struct Entry {
    std::unique_ptr<Frame> frame;
    uint64_t generation = 0;
  };

  const Frame* Remember(Key key, Frame frame);
  const Frame* Lookup(const Key& key);
  // The perf map's frame for an address, or nullptr when the map does not name it.
  const Frame* Jit(Process* process, ProcessAddress address);
  Frame SymbolizeNative(Process* process, const MemoryMapping& mapping, FileOffset offset);

  ProcessTable* processes_;
  ModuleCache* modules_;
  const KernelSymbols* kernel_symbols_;
  uint64_t generation_ = 0;
  std::unordered_map<Key, Entry, KeyHash> frames_;
  SymbolizationFailures failures_;
};

}  // namespace ember
