// Unwinds user stacks from a sample's registers and stack snapshot with DWARF CFI (.eh_frame,
// then .debug_frame) through elfutils libdwfl, frame by frame: each frame is stepped by the
// libdwfl session of the file its pc lies in (ModuleCfi), opened once per file and shared by every
// process. libdwfl falls back to frame pointers where a module has no CFI, and so does the
// unwinder for code outside every file (JIT code) unless the runtime that generated the code steps
// it (RuntimeStepper, runtime_step.h). Per process it keeps only where each file is mapped.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/functional/function_ref.h"
#include "common/mapping.h"
#include "symbolize/elf_module.h"
#include "unwind/module_cfi.h"
#include "unwind/runtime_step.h"

namespace ember {

// x86-64 DWARF register numbers of the registers a snapshot carries.
inline constexpr int kUnwindRegisterCount = kCfiRegisterCount;  // rax..r15, then rip
inline constexpr int kUnwindRegisterSp = 7;
inline constexpr int kUnwindRegisterIp = 16;

// What a sample carries for unwinding.
struct UserStack {
  std::span<const uint64_t> registers;  // kUnwindRegisterCount values, DWARF order
  std::span<const uint8_t> stack;       // memory from registers[kUnwindRegisterSp] upwards
  bool clamped = false;                 // the stack goes on past `stack`
  // Which of `registers` are known, by bit: a walk begun in BPF hands over sp, ip and bp only.
  uint32_t known_registers = (1u << kUnwindRegisterCount) - 1;
  // The first frame's pc is a return address: the walk goes on from a caller's frame.
  bool first_is_return_address = false;
};

struct UnwoundFrame {
  uint64_t pc = 0;
  // A return address (the call is the byte before it), as opposed to the interrupted
  // instruction itself (the leaf, and the frame a signal interrupted).
  bool is_return_address = false;
  // What the runtime that stepped this frame kept of it; all zero for a frame stepped by CFI or
  // its frame pointer.
  RuntimeFrame runtime;
};

enum class UnwindEnd {
  kOutermost,  // reached the first frame of the thread (or the end of its stack memory)
  kTruncated,  // the snapshot or the frame limit ended first: there are more frames
  kError,      // a frame could be unwound neither by CFI nor by its frame pointer
};

struct UnwindResult {
  std::vector<UnwoundFrame> frames;  // leaf first
  UnwindEnd end = UnwindEnd::kError;
};

class DwarfUnwinder {
 public:
  struct Limits {
    size_t max_processes = 256;  // address spaces kept; the least recently used go first
    size_t max_frames = 127;
    // Step frames by cached compact CFI rows where they allow (cfi_row.h); false: libdwfl only.
    bool compact_rows = true;
    size_t max_rows_per_file = ModuleCfi::kDefaultMaxRows;
    // The row caches of every file together, checked once per generation: past it the biggest
    // are emptied.
    size_t max_row_cache_bytes = size_t{64} << 20;
  };

  DwarfUnwinder() : DwarfUnwinder(Limits{}) {}
  explicit DwarfUnwinder(Limits limits);
  ~DwarfUnwinder();
  DwarfUnwinder(const DwarfUnwinder&) = delete;
  DwarfUnwinder& operator=(const DwarfUnwinder&) = delete;

  // Unwinds one stack of process `pid`. `layout_version` names the process's current mappings
  // (it changes with every re-read of its maps); `mappings` is called only when this version is
  // new, to (re)build the process's address space.
  using MappingsFn = absl::FunctionRef<std::vector<ExecutableMapping>()>;
  UnwindResult Unwind(uint32_t pid, uint64_t layout_version, MappingsFn mappings,
                      const UserStack& stack);
  // The same into `result`, whose frames' memory is reused: no allocation per sample.
  void Unwind(uint32_t pid, uint64_t layout_version, MappingsFn mappings, const UserStack& stack,
              UnwindResult& result);

  // Asks `stepper` (which must outlive the unwinder; null: none) to step frames of code in no
  // file before the frame-pointer rule does.
  void set_runtime_stepper(RuntimeStepper* stepper) { runtime_stepper_ = stepper; }
  // Frames of code in no file that the runtime stepper stepped, since the start.
  uint64_t runtime_steps() const { return runtime_steps_; }

  // Drops the address space of a process that exited (or whose pid was reused): NextGeneration
  // would only after its generations, and a new process of the pid builds its own anyway.
  void ForgetProcess(uint32_t pid);
  // Drops address spaces not used for keep_generations generations, and files no process maps
  // any more. Called once per export interval.
  void NextGeneration(int keep_generations = 2);
  // Drops this process's pages of the mappings of the files it unwinds with (ElfFile).
  void ReleasePages(internal::FileMappingCheck& file_mappings) const {
    files_.ReleasePages(file_mappings);
  }

  size_t processes() const { return spaces_.size(); }
  size_t images() const { return files_.size(); }  // files opened, shared by all processes
  // How frames were stepped, over the files open now (a file's figures go with it).
  ModuleCfi::RowStats row_stats() const { return files_.row_stats(); }
  size_t row_cache_bytes() const { return files_.row_cache_bytes(); }
  uint64_t rows_evicted() const { return files_.rows_evicted(); }

 private:
  struct AddressSpace;
  AddressSpace* SpaceFor(uint32_t pid, uint64_t layout_version, MappingsFn mappings);
  std::unique_ptr<AddressSpace> Build(uint32_t pid, uint64_t layout_version,
                                      const std::vector<ExecutableMapping>& mappings);

  Limits limits_;
  RuntimeStepper* runtime_stepper_ = nullptr;
  uint64_t runtime_steps_ = 0;
  ModuleCfiCache files_;
  uint64_t generation_ = 0;
  // Most recently used first.
  std::list<std::unique_ptr<AddressSpace>> lru_;
  std::unordered_map<uint32_t, std::list<std::unique_ptr<AddressSpace>>::iterator> spaces_;
};

}  // namespace ember
