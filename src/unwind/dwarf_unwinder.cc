// DwarfUnwinder: libdwfl address spaces per process, fed from sample snapshots by callbacks.
#include "unwind/dwarf_unwinder.h"

#include <elfutils/libdwfl.h>
#include <libelf.h>

#include <cstring>
#include <utility>

#include "spdlog/spdlog.h"

namespace ember {

struct DwarfUnwinder::AddressSpace {
  uint32_t pid = 0;
  uint64_t layout_version = 0;
  uint64_t last_generation = 0;
  Dwfl* dwfl = nullptr;
  bool attached = false;
  std::vector<std::shared_ptr<ElfImage>> images;  // behind the modules reported to dwfl

  // The unwind in progress, read by the callbacks.
  const UserStack* stack = nullptr;
  bool read_past_snapshot = false;

  ~AddressSpace() {
    if (dwfl != nullptr) dwfl_end(dwfl);  // ends its own references to the images' ELF handles
  }
};

namespace {

// Hands libdwfl another reference to the shared image, so no file is opened per process.
int FindElf(Dwfl_Module*, void** userdata, const char*, Dwarf_Addr, char** file_name, Elf** elfp) {
  auto* image = static_cast<ElfImage*>(*userdata);
  *file_name = nullptr;
  *elfp = image != nullptr ? elf_begin(-1, ELF_C_READ_MMAP, image->elf()) : nullptr;
  return -1;
}

// No separate debug files for unwinding: .eh_frame covers nearly all code, and .debug_frame in
// the file itself is still found.
int NoSeparateDebugFile(Dwfl_Module*, void**, const char*, Dwarf_Addr, const char*, const char*,
                        GElf_Word, char**) {
  return -1;
}

const Dwfl_Callbacks kDwflCallbacks = {
    .find_elf = FindElf,
    .find_debuginfo = NoSeparateDebugFile,
    .section_address = nullptr,
    .debuginfo_path = nullptr,
};

// Every unwind is of one thread, whatever its id: the one whose snapshot is being read.
pid_t NoMoreThreads(Dwfl*, void*, void**) { return 0; }

bool TheSampledThread(Dwfl*, pid_t, void* dwfl_arg, void** thread_arg) {
  *thread_arg = dwfl_arg;
  return true;
}

}  // namespace

// Callbacks that need the address space's private members.
struct UnwindCallbacks {
  using Space = DwarfUnwinder::AddressSpace;

  static bool MemoryRead(Dwfl*, Dwarf_Addr addr, Dwarf_Word* result, void* arg) {
    auto* space = static_cast<Space*>(arg);
    const UserStack& s = *space->stack;
    const uint64_t sp = s.registers[kUnwindRegisterSp];
    const uint64_t size = s.stack.size();
    if (addr >= sp && addr - sp <= size && size - (addr - sp) >= sizeof(Dwarf_Word)) {
      std::memcpy(result, s.stack.data() + (addr - sp), sizeof(Dwarf_Word));
      return true;
    }
    // Includes a word that starts inside the snapshot but ends past it (any byte length).
    if (addr >= sp) space->read_past_snapshot = true;
    return false;
  }

  static bool SetInitialRegisters(Dwfl_Thread* thread, void* arg) {
    auto* space = static_cast<Space*>(arg);
    Dwarf_Word regs[kUnwindRegisterCount];
    for (int i = 0; i < kUnwindRegisterCount; ++i) regs[i] = space->stack->registers[i];
    if (!dwfl_thread_state_registers(thread, 0, kUnwindRegisterCount, regs)) return false;
    dwfl_thread_state_register_pc(thread, regs[kUnwindRegisterIp]);
    return true;
  }
};

namespace {

const Dwfl_Thread_Callbacks kThreadCallbacks = {
    .next_thread = NoMoreThreads,
    .get_thread = TheSampledThread,
    .memory_read = UnwindCallbacks::MemoryRead,
    .set_initial_registers = UnwindCallbacks::SetInitialRegisters,
    .detach = nullptr,
    .thread_detach = nullptr,
};

struct Walk {
  std::vector<UnwoundFrame>* frames;
  size_t max_frames;
  bool hit_limit = false;
  bool hit_zero = false;
};

int OnFrame(Dwfl_Frame* frame, void* arg) {
  auto* walk = static_cast<Walk*>(arg);
  Dwarf_Addr pc = 0;
  bool activation = false;
  if (!dwfl_frame_pc(frame, &pc, &activation)) return DWARF_CB_ABORT;
  if (pc == 0) {  // a zeroed return address: the outermost frame of code without CFI
    walk->hit_zero = true;
    return DWARF_CB_ABORT;
  }
  if (walk->frames->size() >= walk->max_frames) {
    walk->hit_limit = true;
    return DWARF_CB_ABORT;
  }
  walk->frames->push_back({.pc = pc, .is_return_address = !activation});
  return DWARF_CB_OK;
}

}  // namespace

DwarfUnwinder::DwarfUnwinder(Limits limits) : limits_(limits) {}
DwarfUnwinder::~DwarfUnwinder() = default;

std::unique_ptr<DwarfUnwinder::AddressSpace> DwarfUnwinder::Build(
    uint32_t pid, uint64_t layout_version, const std::vector<ExecutableMapping>& mappings) {
  auto space = std::make_unique<AddressSpace>();
  space->pid = pid;
  space->layout_version = layout_version;
  space->dwfl = dwfl_begin(&kDwflCallbacks);
  if (space->dwfl == nullptr) return space;
  dwfl_report_begin(space->dwfl);
  uint64_t last_low = 0;
  for (const ExecutableMapping& m : mappings) {
    std::shared_ptr<ElfImage> image;
    if (m.name == "[vdso]") {
      image = images_.Vdso();
    } else if (m.file.inode != 0 && !m.name.empty() && m.name[0] == '/') {
      image = images_.Get(m.file, m.open_path);
    }
    if (image == nullptr) continue;  // anonymous or unreadable: frame pointers only
    std::optional<ModulePlacement> placement = image->Place(m.start, m.offset);
    if (!placement || placement->low == last_low) continue;  // a file's second code mapping
    Dwfl_Module* module =
        dwfl_report_module(space->dwfl, m.name.c_str(), placement->low, placement->high);
    if (module == nullptr) {
      spdlog::debug("pid {}: {} not unwindable: {}", pid, m.name, dwfl_errmsg(-1));
      continue;
    }
    void** userdata = nullptr;
    dwfl_module_info(module, &userdata, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    *userdata = image.get();
    last_low = placement->low;
    space->images.push_back(std::move(image));
  }
  dwfl_report_end(space->dwfl, nullptr, nullptr);
  if (!space->images.empty()) {
    space->attached = dwfl_attach_state(space->dwfl, space->images.front()->elf(),
                                        static_cast<pid_t>(pid), &kThreadCallbacks, space.get());
    if (!space->attached) spdlog::debug("pid {}: cannot unwind: {}", pid, dwfl_errmsg(-1));
  }
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
  if (stack.registers.size() != kUnwindRegisterCount) return result;
  AddressSpace* space = SpaceFor(pid, layout_version, mappings);
  space->last_generation = generation_;
  if (!space->attached) {
    result.frames.push_back({.pc = stack.registers[kUnwindRegisterIp]});
    return result;
  }
  space->stack = &stack;
  space->read_past_snapshot = false;
  Walk walk{.frames = &result.frames, .max_frames = limits_.max_frames};
  int rc = dwfl_getthread_frames(space->dwfl, static_cast<pid_t>(pid), OnFrame, &walk);
  space->stack = nullptr;

  if (walk.hit_limit) {
    result.end = UnwindEnd::kTruncated;
  } else if (walk.hit_zero) {
    result.end = UnwindEnd::kOutermost;
  } else if (space->read_past_snapshot) {
    // libdwfl takes a return address it cannot read for an undefined one and ends the walk with
    // success (rc 0), so the snapshot's end must be checked before rc. Past the end of a whole
    // stack there is nothing left to find.
    result.end = stack.clamped ? UnwindEnd::kTruncated : UnwindEnd::kOutermost;
  } else if (rc == 0) {
    result.end = UnwindEnd::kOutermost;
  } else {
    result.end = UnwindEnd::kError;
  }
  if (result.frames.empty()) result.frames.push_back({.pc = stack.registers[kUnwindRegisterIp]});
  return result;
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
  images_.NextGeneration();
}

}  // namespace ember
