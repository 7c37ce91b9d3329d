// DwarfUnwinder: a frame-by-frame walk over shared per-file CFI sessions.
#include "unwind/dwarf_unwinder.h"

#include <algorithm>
#include <utility>

namespace ember {

// Where each file's code lies in one process.
struct DwarfUnwinder::AddressSpace {
  struct Module {
    uint64_t start = 0;  // the executable mapping [start, end)
    uint64_t end = 0;
    uint64_t bias = 0;  // process address minus ELF address
    std::shared_ptr<ModuleCfi> cfi;
  };

  uint32_t pid = 0;
  uint64_t layout_version = 0;
  uint64_t last_generation = 0;
  std::vector<Module> modules;  // ascending, not overlapping

  const Module* Find(uint64_t pc) const {
    auto after = std::upper_bound(modules.begin(), modules.end(), pc,
                                  [](uint64_t value, const Module& m) { return value < m.start; });
    if (after == modules.begin()) return nullptr;
    const Module& m = *std::prev(after);
    return pc < m.end ? &m : nullptr;
  }
};

namespace {

constexpr int kSp = kUnwindRegisterSp;
constexpr int kIp = kUnwindRegisterIp;
constexpr int kBp = 6;

// For code in no file (JIT code, which keeps frame pointers): the frame-pointer rule.
void FramePointerStep(const FrameRegisters& frame, const StackMemory& stack, StepResult& result) {
  result.Reset();
  if (!frame.Has(kBp) || !frame.Has(kSp)) return;
  const uint64_t bp = frame.value[kBp];
  std::optional<uint64_t> saved_bp = stack.Read(bp);
  std::optional<uint64_t> return_address = stack.Read(bp + 8);
  if (bp < frame.value[kSp] || !saved_bp || !return_address) {
    result.read_past_stack = bp >= stack.start + stack.bytes.size();
    return;
  }
  result.caller.Set(kBp, *saved_bp);
  result.caller.Set(kSp, bp + 16);
  result.caller.Set(kIp, *return_address);
  result.end = StepEnd::kStepped;
}

}  // namespace

DwarfUnwinder::DwarfUnwinder(Limits limits)
    : limits_(limits), files_(limits.compact_rows, limits.max_rows_per_file) {}
DwarfUnwinder::~DwarfUnwinder() = default;

std::unique_ptr<DwarfUnwinder::AddressSpace> DwarfUnwinder::Build(
    uint32_t pid, uint64_t layout_version, const std::vector<ExecutableMapping>& mappings) {
  auto space = std::make_unique<AddressSpace>();
  space->pid = pid;
  space->layout_version = layout_version;
  for (const ExecutableMapping& m : mappings) {
    std::shared_ptr<ModuleCfi> cfi;
    if (m.IsVdso()) {
      cfi = files_.Vdso();
    } else if (m.IsFileBacked()) {
      cfi = files_.Get(m.file, m.open_path);
    }
    if (cfi == nullptr) continue;  // anonymous or unreadable: frame pointers only
    std::optional<ModulePlacement> placement = cfi->image().Place(m.start, m.end, m.offset);
    if (!placement || m.end <= m.start) continue;
    space->modules.push_back(
        {.start = m.start, .end = m.end, .bias = placement->bias, .cfi = std::move(cfi)});
  }
  std::sort(space->modules.begin(), space->modules.end(),
            [](const AddressSpace::Module& a, const AddressSpace::Module& b) {
              return a.start < b.start;
            });
  return space;
}

DwarfUnwinder::AddressSpace* DwarfUnwinder::SpaceFor(uint32_t pid, uint64_t layout_version,
                                                     MappingsFn mappings) {
  auto found = spaces_.find(pid);
  if (found != spaces_.end()) {
    lru_.splice(lru_.begin(), lru_, found->second);  // now most recently used
    if ((*found->second)->layout_version == layout_version) return found->second->get();
    *found->second = Build(pid, layout_version, mappings());  // new maps: exec or dlopen
    return found->second->get();
  }
  lru_.push_front(Build(pid, layout_version, mappings()));
  spaces_[pid] = lru_.begin();
  while (lru_.size() > limits_.max_processes) {
    spaces_.erase(lru_.back()->pid);
    lru_.pop_back();
  }
  return lru_.front().get();
}

UnwindResult DwarfUnwinder::Unwind(uint32_t pid, uint64_t layout_version, MappingsFn mappings,
                                   const UserStack& stack) {
  UnwindResult result;
  Unwind(pid, layout_version, mappings, stack, result);
  return result;
}

void DwarfUnwinder::Unwind(uint32_t pid, uint64_t layout_version, MappingsFn mappings,
                           const UserStack& stack, UnwindResult& result) {
  result.frames.clear();
  result.end = UnwindEnd::kError;
  if (stack.registers.size() != kUnwindRegisterCount) return;
  AddressSpace* space = SpaceFor(pid, layout_version, mappings);
  space->last_generation = generation_;

  FrameRegisters frame;
  for (int reg = 0; reg < kUnwindRegisterCount; ++reg) {
    if ((stack.known_registers >> reg) & 1u) frame.Set(reg, stack.registers[reg]);
  }
  const StackMemory memory{.start = stack.registers[kSp], .bytes = stack.stack};
  // A leaf's pc is the interrupted instruction.
  bool is_return_address = stack.first_is_return_address;
  bool read_past_stack = false;
  StepResult step;  // reused from frame to frame
  for (;;) {
    const uint64_t pc = frame.value[kIp];
    if (pc == 0) {  // a zeroed return address: the first frame of code without CFI
      result.end = UnwindEnd::kOutermost;
      break;
    }
    if (result.frames.size() >= limits_.max_frames) {
      result.end = UnwindEnd::kTruncated;
      break;
    }
    result.frames.push_back({.pc = pc, .is_return_address = is_return_address, .runtime = {}});
    const AddressSpace::Module* module = space->Find(is_return_address ? pc - 1 : pc);
    if (module != nullptr) {
      module->cfi->Step(frame, module->bias, is_return_address, memory, step);
    } else if (runtime_stepper_ != nullptr &&
               runtime_stepper_->Step(pid, frame, is_return_address, memory, step,
                                      result.frames.back().runtime)) {
      ++runtime_steps_;
    } else {
      FramePointerStep(frame, memory, step);
    }
    read_past_stack |= step.read_past_stack;
    if (step.end == StepEnd::kStepped) {
      const FrameRegisters& caller = step.caller;
      // A caller at the same place is no progress: stop rather than loop.
      if (caller.value[kIp] == pc && caller.Has(kSp) && caller.value[kSp] == frame.value[kSp]) {
        result.end = UnwindEnd::kError;
        break;
      }
      // A caller that is an interrupted instruction means this frame was the signal trampoline,
      // which the kernel entered at its first byte: an exact pc too.
      if (step.caller_is_activation) result.frames.back().is_return_address = false;
      is_return_address = !step.caller_is_activation;
      frame = caller;
      continue;
    }
    if (read_past_stack) {
      // libdwfl takes a return address it cannot read for an undefined one and reports the
      // outermost frame, so the snapshot's end must be checked first. Past the end of a whole
      // stack there is nothing left to find.
      result.end = stack.clamped ? UnwindEnd::kTruncated : UnwindEnd::kOutermost;
    } else {
      result.end = step.end == StepEnd::kOutermost ? UnwindEnd::kOutermost : UnwindEnd::kError;
    }
    break;
  }
  if (result.frames.empty()) {
    result.frames.push_back({.pc = stack.registers[kIp],
                             .is_return_address = stack.first_is_return_address,
                             .runtime = {}});
  }
}

void DwarfUnwinder::ForgetProcess(uint32_t pid) {
  auto found = spaces_.find(pid);
  if (found == spaces_.end()) return;
  lru_.erase(found->second);
  spaces_.erase(found);
}

void DwarfUnwinder::NextGeneration(int keep_generations) {
  ++generation_;
  for (auto it = lru_.begin(); it != lru_.end();) {
    if (generation_ - (*it)->last_generation > static_cast<uint64_t>(keep_generations)) {
      spaces_.erase((*it)->pid);
      it = lru_.erase(it);
    } else {
      ++it;
    }
  }
  files_.NextGeneration(/*keep_generations=*/3, limits_.max_row_cache_bytes);
}

}  // namespace ember
