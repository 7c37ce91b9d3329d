// ModuleCfi: one file's libdwfl session, stepped one frame at a time from a sample's snapshot.
#include "unwind/module_cfi.h"

#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <libelf.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "common/log_safe.h"
#include "elf/sigbus_guard.h"
#include "spdlog/spdlog.h"
#include "symbolize/go_pclntab.h"

namespace ember {

struct ModuleCfi::StepState {
  const FrameRegisters* frame = nullptr;
  uint64_t lookup_pc = 0;  // the ELF address whose CFI row applies
  const StackMemory* stack = nullptr;
  StepResult* result = nullptr;
  int frames_seen = 0;
  // While dwfl_frame_pc looks one frame further to tell an activation, reads fail quietly:
  // that frame is another module's business.
  bool probing = false;
};

// libdwfl's callbacks, which see the step in progress through the ModuleCfi.
struct CfiCallbacks {
  // Hands libdwfl another reference to the shared image, so no file is opened twice.
  static int FindElf(Dwfl_Module*, void** userdata, const char*, Dwarf_Addr, char** file_name,
                     Elf** elfp) {
    auto* image = static_cast<const ElfImage*>(*userdata);
    *file_name = nullptr;
    *elfp = image != nullptr ? elf_begin(-1, ELF_C_READ_MMAP, image->elf()) : nullptr;
    return -1;
  }

  // .eh_frame, or .debug_frame in the file itself; no separate debug files for unwinding.
  static int NoSeparateDebugFile(Dwfl_Module*, void**, const char*, Dwarf_Addr, const char*,
                                 const char*, GElf_Word, char**) {
    return -1;
  }

  // Every step is of one thread: the one whose snapshot is being read.
  static pid_t NoMoreThreads(Dwfl*, void*, void**) { return 0; }

  static bool TheSampledThread(Dwfl*, pid_t, void* dwfl_arg, void** thread_arg) {
    *thread_arg = dwfl_arg;
    return true;
  }

  static bool MemoryRead(Dwfl*, Dwarf_Addr addr, Dwarf_Word* result, void* arg) {
    ModuleCfi::StepState* step = static_cast<ModuleCfi*>(arg)->step_;
    if (step == nullptr || step->probing) return false;
    if (std::optional<uint64_t> value = step->stack->Read(addr)) {
      *result = *value;
      return true;
    }
    // Includes a word that starts inside the snapshot and ends past it.
    if (addr >= step->stack->start) step->result->read_past_stack = true;
    return false;
  }

  // Only the registers known in this frame: an unknown one stays undefined for libdwfl too.
  static bool SetInitialRegisters(Dwfl_Thread* thread, void* arg) {
    ModuleCfi::StepState* step = static_cast<ModuleCfi*>(arg)->step_;
    for (int reg = 0; reg < kCfiRegisterCount - 1; ++reg) {
      if (!step->frame->Has(reg)) continue;
      Dwarf_Word value = step->frame->value[reg];
      if (!dwfl_thread_state_registers(thread, reg, 1, &value)) return false;
    }
    Dwarf_Word pc = step->lookup_pc;
    if (!dwfl_thread_state_registers(thread, kCfiRegisterCount - 1, 1, &pc)) return false;
    dwfl_thread_state_register_pc(thread, pc);
    return true;
  }

  // The first frame is the one being stepped from; the second is its caller: keep its
  // registers and stop.
  static int OnFrame(Dwfl_Frame* frame, void* arg) {
    auto* step = static_cast<ModuleCfi::StepState*>(arg);
    if (step->frames_seen++ == 0) return DWARF_CB_OK;
    Dwarf_Addr pc = 0;
    bool activation = false;
    step->probing = true;
    bool ok = dwfl_frame_pc(frame, &pc, &activation);
    step->probing = false;
    if (!ok) return DWARF_CB_ABORT;
    StepResult& result = *step->result;
    for (int reg = 0; reg < kCfiRegisterCount - 1; ++reg) {
      Dwarf_Word value = 0;
      if (dwfl_frame_reg(frame, reg, &value) == 0) result.caller.Set(reg, value);
    }
    result.caller.Set(kCfiRegisterCount - 1, pc);
    result.caller_is_activation = activation;
    result.end = StepEnd::kStepped;
    return DWARF_CB_ABORT;
  }
};

namespace {

const Dwfl_Callbacks kDwflCallbacks = {
    .find_elf = CfiCallbacks::FindElf,
    .find_debuginfo = CfiCallbacks::NoSeparateDebugFile,
    .section_address = nullptr,
    .debuginfo_path = nullptr,
};

const Dwfl_Thread_Callbacks kThreadCallbacks = {
    .next_thread = CfiCallbacks::NoMoreThreads,
    .get_thread = CfiCallbacks::TheSampledThread,
    .memory_read = CfiCallbacks::MemoryRead,
    .set_initial_registers = CfiCallbacks::SetInitialRegisters,
    .detach = nullptr,
    .thread_detach = nullptr,
};

constexpr pid_t kAnyThread = 1;  // libdwfl wants an id; the callbacks ignore it

// The row of `cfi` at `address`; nullopt when no FDE covers it.
std::optional<CfiRow> RowIn(Dwarf_CFI* cfi, Dwarf_Addr address) {
  Dwarf_Frame* frame = nullptr;
  if (dwarf_cfi_addrframe(cfi, address, &frame) != 0) return std::nullopt;
  CfiRow row = CompactRowOf(frame);
  free(frame);
  return row;
}

}  // namespace

ModuleCfi::ModuleCfi(std::shared_ptr<ElfImage> image, bool compact_rows, size_t max_rows)
    : image_(std::move(image)), compact_rows_(compact_rows), max_rows_(max_rows) {}

ModuleCfi::~ModuleCfi() {
  if (file_changed_) internal::KeepAbandoned(go_.release());
  if (dwfl_ == nullptr) return;
  if (file_changed_) {
    // After a fault libdwfl's state cannot be trusted even to be freed: it stays allocated.
    internal::KeepAbandoned(dwfl_);
    return;
  }
  dwfl_end(dwfl_);  // ends its own reference to the image's ELF handle
}

bool ModuleCfi::Open() {
  if (opened_) return dwfl_ != nullptr;
  opened_ = true;
  // Held at once, so that what a faulted read below leaves is still reachable.
  dwfl_ = dwfl_begin(&kDwflCallbacks);
  if (dwfl_ == nullptr) return false;
  Dwfl* dwfl = dwfl_;
  // The file alone, at its own ELF addresses: every process that maps it can share it.
  ModulePlacement at = image_->AtElfAddresses();
  dwfl_report_begin(dwfl);
  Dwfl_Module* module = dwfl_report_module(dwfl, "module", at.low, at.high);
  if (module != nullptr) {
    void** userdata = nullptr;
    dwfl_module_info(module, &userdata, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    *userdata = image_.get();
  }
  dwfl_report_end(dwfl, nullptr, nullptr);
  if (module == nullptr ||
      !dwfl_attach_state(dwfl, image_->elf(), kAnyThread, &kThreadCallbacks, this)) {
    spdlog::debug("no CFI session: {}", dwfl_errmsg(-1));
    dwfl_end(dwfl);
    dwfl_ = nullptr;
    return false;
  }
  module_ = module;
  elf_low_ = at.low;
  elf_high_ = at.high;
  return true;
}

void ModuleCfi::Step(const FrameRegisters& frame, uint64_t bias, bool is_return_address,
                     const StackMemory& stack, StepResult& result) {
  result.Reset();
  if (file_changed_ || !frame.Has(kCfiRegisterCount - 1)) return;
  const uint64_t lookup_pc =
      frame.value[kCfiRegisterCount - 1] - bias - (is_return_address ? 1 : 0);
  // Rows already cached are the agent's own memory: stepping by them reads nothing of the file,
  // so it needs no guard (a sigsetjmp per frame). Every other step goes the guarded way.
  if (compact_rows_ && dwfl_ != nullptr) {
    if (CompactStep(lookup_pc, frame, bias, stack, result, /*read_missing=*/false)) {
      ++row_stats_.compact_steps;
      return;
    }
    result.Reset();
  }
  // The file's CFI is read through its mapping, which faults (SIGBUS) where the file was
  // truncated since it was opened: such a module steps nothing any more.
  if (!internal::RunCatchingSigbus([&] { StepInFile(lookup_pc, frame, bias, stack, result); })) {
    file_changed_ = true;
    result.Reset();
    static LogRateLimiter warnings(kLogLinesPerMinute, std::chrono::minutes(1));
    LogLimited(warnings, spdlog::level::warn,
               "{}: the file changed under the agent; frames in it no longer unwind",
               LogSafe(image_->path()));
  }
}

void ModuleCfi::StepInFile(uint64_t lookup_pc, const FrameRegisters& frame, uint64_t bias,
                           const StackMemory& stack, StepResult& result) {
  if (!Open()) return;
  if (compact_rows_) {
    if (CompactStep(lookup_pc, frame, bias, stack, result, /*read_missing=*/true)) {
      ++row_stats_.compact_steps;
      return;
    }
    result.Reset();
  }
  ++row_stats_.libdwfl_steps;
  LibdwflStep(lookup_pc, frame, stack, result);
}

void ModuleCfi::LibdwflStep(uint64_t lookup_pc, const FrameRegisters& frame,
                            const StackMemory& stack, StepResult& result) {
  StepState state{.frame = &frame, .lookup_pc = lookup_pc, .stack = &stack, .result = &result};
  step_ = &state;
  int rc = dwfl_getthread_frames(dwfl_, kAnyThread, CfiCallbacks::OnFrame, &state);
  step_ = nullptr;
  if (result.end != StepEnd::kStepped)
    result.end = rc == 0 ? StepEnd::kOutermost : StepEnd::kFailed;
}

bool ModuleCfi::CompactStep(uint64_t lookup_pc, const FrameRegisters& frame, uint64_t bias,
                            const StackMemory& stack, StepResult& result, bool read_missing) {
  // Valid until the caller's row is looked up below.
  const CfiRow* row = FindRow(lookup_pc, read_missing);
  if (row == nullptr || !row->compact) return false;
  switch (StepByRow(*row, frame, stack, result.caller, &result.read_past_stack)) {
    case RowStep::kCannot:
      return false;
    case RowStep::kOutermost:
      result.end = StepEnd::kOutermost;
      return true;
    case RowStep::kStepped:
      break;
  }
  // libdwfl takes a caller in this file whose own row is a signal frame's (a signal trampoline)
  // for an interrupted instruction: leave that rare case to it.
  const uint64_t caller_lookup = result.caller.value[kCfiRegisterCount - 1] - bias - 1;
  if (caller_lookup >= elf_low_ && caller_lookup < elf_high_) {
    const CfiRow* caller_row = FindRow(caller_lookup, read_missing);
    if (caller_row == nullptr || caller_row->signal_frame) return false;
  }
  result.end = StepEnd::kStepped;
  return true;
}

const CfiRow* ModuleCfi::FindRow(uint64_t elf_pc, bool read_missing) {
  if (last_row_ != nullptr && last_pc_ == elf_pc) return last_row_;
  auto found = rows_.find(elf_pc);
  if (found == rows_.end()) {
    if (!read_missing) return nullptr;
    if (rows_.size() >= max_rows_) rows_.clear();  // bounded: start over rather than grow
    found = rows_.emplace(elf_pc, ReadRow(elf_pc)).first;
    ++row_stats_.rows_read;
    row_stats_.rows_cached = rows_.size();
  }
  last_pc_ = elf_pc;
  last_row_ = &found->second;
  return last_row_;
}

// As libdwfl looks a frame up: .eh_frame first, then .debug_frame in the file itself.
CfiRow ModuleCfi::ReadRow(uint64_t elf_pc) {
  Dwarf_Addr bias = 0;
  if (Dwarf_CFI* eh_frame = dwfl_module_eh_cfi(module_, &bias)) {
    if (std::optional<CfiRow> row = RowIn(eh_frame, elf_pc - bias)) return *row;
  }
  if (Dwarf_CFI* debug_frame = dwfl_module_dwarf_cfi(module_, &bias)) {
    if (std::optional<CfiRow> row = RowIn(debug_frame, elf_pc - bias)) return *row;
  }
  return GoRow(elf_pc);
}

CfiRow ModuleCfi::GoRow(uint64_t elf_pc) {
  if (!go_opened_) {
    go_opened_ = true;
    absl::StatusOr<std::unique_ptr<internal::GoPclntab>> go =
        internal::GoPclntab::Open(internal::GoImageOfElf(image_->elf()));
    if (go.ok()) go_ = std::move(*go);
  }
  CfiRow row;
  if (go_ == nullptr) return row;
  std::optional<int32_t> delta = go_->SpDelta(elf_pc);
  if (!delta.has_value()) return row;
  // On amd64 the return address is pushed by the call, right above what the function reserved.
  // The caller's frame pointer is unchanged at a delta of 0, and below the return address when
  // the function pushed it first thing; otherwise the table cannot tell whether it is stored yet
  // (older prologues store it after reserving the frame, assembly may keep none), so it is
  // unknown rather than a guess. Go saves no other register for its caller.
  const bool bp_pushed = *delta >= 8 && go_->PushesFramePointer(elf_pc);
  row.compact = true;
  row.cfa_register = 7;
  row.cfa_offset = *delta + 8;
  for (int i = 0; i < CfiRow::kTrackedCount; ++i) {
    switch (CfiRow::kTracked[i]) {
      case 6:
        row.rules[i] = *delta == 0 ? CfiRule{CfiRule::Kind::kSame, 0}
                       : bp_pushed ? CfiRule{CfiRule::Kind::kSavedAt, -16}
                                   : CfiRule{CfiRule::Kind::kUndefined, 0};
        break;
      case 7:
        row.rules[i] = {CfiRule::Kind::kCfaPlus, 0};
        break;
      case 16:
        row.rules[i] = {CfiRule::Kind::kSavedAt, -8};
        break;
      default:
        break;
    }
  }
  return row;
}

size_t ModuleCfi::ClearRows() {
  const size_t rows = rows_.size();
  rows_ = decltype(rows_)();  // clear() may keep the table's memory
  last_row_ = nullptr;
  row_stats_.rows_cached = 0;
  return rows;
}

size_t ModuleCfi::row_cache_bytes() const {
  return rows_.capacity() * (sizeof(std::pair<uint64_t, CfiRow>) + 1);
}

std::shared_ptr<ModuleCfi> ModuleCfiCache::Get(const FileIdentity& file,
                                               const FileLocation& open_path) {
  if (open_path.empty()) {  // cannot be reached now (its process is gone): nothing to remember
    auto found = entries_.find(file);
    if (found == entries_.end()) return nullptr;
    found->second.last_generation = generation_;
    return found->second.cfi;
  }
  auto [it, inserted] = entries_.try_emplace(file);
  it->second.last_generation = generation_;
  if (inserted) {
    absl::StatusOr<std::shared_ptr<ElfImage>> image =
        absl::DataLossError("the file changed while its headers were read");
    internal::RunCatchingSigbus([&] { image = ElfImage::Open(open_path); });
    if (image.ok()) {
      it->second.cfi =
          std::make_shared<ModuleCfi>(std::move(image).value(), compact_rows_, max_rows_);
    } else {
      spdlog::debug("no CFI from {}: {}", LogSafe(open_path.Display()),
                    LogSafe(image.status().message()));
    }
  }
  return it->second.cfi;
}

std::shared_ptr<ModuleCfi> ModuleCfiCache::Vdso() {
  if (!vdso_) {
    auto image = ElfImage::OpenOwnVdso();
    if (!image.ok()) {
      spdlog::warn("vDSO frames will not unwind: {}", std::string(image.status().message()));
    }
    vdso_ = image.ok()
                ? std::make_shared<ModuleCfi>(std::move(image).value(), compact_rows_, max_rows_)
                : nullptr;
  }
  return *vdso_;
}

namespace {
void AddRowStats(const ModuleCfi::RowStats& from, ModuleCfi::RowStats& to) {
  to.compact_steps += from.compact_steps;
  to.libdwfl_steps += from.libdwfl_steps;
  to.rows_read += from.rows_read;
}
}  // namespace

void ModuleCfiCache::NextGeneration(int keep_generations, size_t max_row_bytes) {
  ++generation_;
  for (auto it = entries_.begin(); it != entries_.end();) {
    bool stale = generation_ - it->second.last_generation > static_cast<uint64_t>(keep_generations);
    if (stale && it->second.cfi.use_count() <= 1) {
      if (it->second.cfi != nullptr) AddRowStats(it->second.cfi->row_stats(), retired_);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  size_t bytes = row_cache_bytes();
  if (bytes <= max_row_bytes) return;
  std::vector<std::pair<size_t, ModuleCfi*>> by_size;
  for (auto& [file, entry] : entries_) {
    if (entry.cfi != nullptr) by_size.emplace_back(entry.cfi->row_cache_bytes(), entry.cfi.get());
  }
  if (vdso_ && *vdso_ != nullptr) by_size.emplace_back((*vdso_)->row_cache_bytes(), vdso_->get());
  std::sort(by_size.begin(), by_size.end(), std::greater<>());
  for (auto& [module_bytes, module] : by_size) {
    if (bytes <= max_row_bytes) break;
    rows_evicted_ += module->ClearRows();
    bytes -= std::min(bytes, module_bytes);
  }
}

template <typename F>
void ModuleCfiCache::ForEachModule(F f) const {
  for (const auto& [file, entry] : entries_) {
    if (entry.cfi != nullptr) f(*entry.cfi);
  }
  if (vdso_ && *vdso_ != nullptr) f(**vdso_);
}

void ModuleCfiCache::ReleasePages(internal::FileMappingCheck& file_mappings) const {
  ForEachModule([&](const ModuleCfi& module) { module.ReleasePages(file_mappings); });
}

ModuleCfi::RowStats ModuleCfiCache::row_stats() const {
  ModuleCfi::RowStats sum = retired_;
  ForEachModule([&sum](const ModuleCfi& module) {
    AddRowStats(module.row_stats(), sum);
    sum.rows_cached += module.row_stats().rows_cached;
  });
  return sum;
}

size_t ModuleCfiCache::row_cache_bytes() const {
  size_t bytes = 0;
  ForEachModule([&bytes](const ModuleCfi& module) { bytes += module.row_cache_bytes(); });
  return bytes;
}

}  // namespace ember
