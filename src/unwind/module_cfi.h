// The call-frame information of one ELF file, shared by every process that maps it: a libdwfl
// session holding that file alone at its own ELF addresses, stepped one frame at a time with
// registers and stack memory served by Dwfl_Thread_Callbacks from a sample's snapshot.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>

#include "symbolize/elf_module.h"
#include "unwind/elf_image.h"

typedef struct Dwfl Dwfl;

namespace ember {

inline constexpr int kCfiRegisterCount = 17;  // x86-64 DWARF: rax..r15, then rip (16)

// A frame's registers; a bit of `known` is set for each register whose value is known.
struct FrameRegisters {
  uint64_t value[kCfiRegisterCount] = {};
  uint32_t known = 0;
  bool Has(int reg) const { return (known >> reg) & 1u; }
  void Set(int reg, uint64_t v) {
    value[reg] = v;
    known |= 1u << reg;
  }
};

// Stack memory: `bytes` copied from address `start`.
struct StackMemory {
  uint64_t start = 0;
  std::span<const uint8_t> bytes;
  std::optional<uint64_t> Read(uint64_t addr) const;
};

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
};

class ModuleCfi {
 public:
  explicit ModuleCfi(std::shared_ptr<ElfImage> image);
  ~ModuleCfi();
  ModuleCfi(const ModuleCfi&) = delete;
  ModuleCfi& operator=(const ModuleCfi&) = delete;

  // Unwinds one frame whose registers are `frame` (their pc a process address, `bias` the
  // process address minus the ELF address of this module). `is_return_address`: the pc is a
  // return address, so the CFI is looked up at the call, one byte before it.
  StepResult Step(const FrameRegisters& frame, uint64_t bias, bool is_return_address,
                  const StackMemory& stack);

  const ElfImage& image() const { return *image_; }

 private:
  friend struct CfiCallbacks;
  struct StepState;
  bool Open();

  std::shared_ptr<ElfImage> image_;
  Dwfl* dwfl_ = nullptr;
  bool opened_ = false;        // Open() was tried
  StepState* step_ = nullptr;  // the step in progress, for the callbacks
};

// ModuleCfi by file identity, shared by every process's address space. An entry stays while an
// address space holds it; the cache drops entries unused for a few generations.
class ModuleCfiCache {
 public:
  // The module's CFI, opened on first use; nullptr when the file cannot be opened (cached and
  // logged once at debug level).
  std::shared_ptr<ModuleCfi> Get(const FileIdentity& file, const std::string& open_path);
  // This process's vDSO: the kernel maps the same image into every process.
  std::shared_ptr<ModuleCfi> Vdso();
  void NextGeneration(int keep_generations = 3);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::shared_ptr<ModuleCfi> cfi;  // nullptr: opening failed
    uint64_t last_generation = 0;
  };
  uint64_t generation_ = 0;
  std::unordered_map<FileIdentity, Entry, FileIdentityHash> entries_;
  std::optional<std::shared_ptr<ModuleCfi>> vdso_;
};

}  // namespace ember
