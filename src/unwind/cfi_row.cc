// CfiRow: a call-frame row read once from libdw and applied to a snapshot without it.
#include "unwind/cfi_row.h"

#include <dwarf.h>
#include <elfutils/libdw.h>

#include <limits>
#include <optional>

namespace ember {
namespace {

constexpr int kRbp = 6;
constexpr int kRsp = 7;
constexpr int kReturnAddress = 16;

bool FitsInt32(int64_t value) {
  return value >= std::numeric_limits<int32_t>::min() &&
         value <= std::numeric_limits<int32_t>::max();
}

// The rule of one register from libdw's location description of it; nullopt when it is not one
// of the compact forms.
std::optional<CfiRule> RuleOf(Dwarf_Frame* frame, int reg) {
  Dwarf_Op ops_mem[3];
  Dwarf_Op* ops = nullptr;
  size_t nops = 0;
  if (dwarf_frame_register(frame, reg, ops_mem, &ops, &nops) != 0) return std::nullopt;
  if (nops == 0) {
    // libdw: ops_mem for "undefined", a null pointer for "same value".
    return CfiRule{.kind = ops == nullptr ? CfiRule::Kind::kSame : CfiRule::Kind::kUndefined};
  }
  // DW_OP_call_frame_cfa [DW_OP_plus_uconst N] [DW_OP_stack_value]
  if (ops[0].atom != DW_OP_call_frame_cfa) return std::nullopt;
  size_t next = 1;
  int64_t offset = 0;
  if (next < nops && ops[next].atom == DW_OP_plus_uconst) {
    offset = static_cast<int64_t>(ops[next].number);  // a negative offset wraps around
    ++next;
  }
  bool value = false;
  if (next < nops && ops[next].atom == DW_OP_stack_value) {
    value = true;
    ++next;
  }
  if (next != nops || !FitsInt32(offset)) return std::nullopt;
  return CfiRule{.kind = value ? CfiRule::Kind::kCfaPlus : CfiRule::Kind::kSavedAt,
                 .offset = static_cast<int32_t>(offset)};
}

bool IsTracked(int reg) {
  for (int tracked : CfiRow::kTracked) {
    if (tracked == reg) return true;
  }
  return false;
}

}  // namespace

CfiRow CompactRowOf(Dwarf_Frame* frame, RowRegisters registers) {
  CfiRow row;
  Dwarf_Addr start = 0;
  Dwarf_Addr end = 0;
  bool signal_frame = false;
  if (dwarf_frame_info(frame, &start, &end, &signal_frame) != kReturnAddress) return row;
  row.signal_frame = signal_frame;
  if (signal_frame) return row;  // libdwfl tells the interrupted caller apart

  Dwarf_Op* cfa = nullptr;
  size_t cfa_ops = 0;
  if (dwarf_frame_cfa(frame, &cfa, &cfa_ops) != 0 || cfa_ops != 1 || cfa[0].atom != DW_OP_bregx ||
      cfa[0].number >= kCfiRegisterCount || cfa[0].number == kReturnAddress) {
    return row;
  }
  const int64_t cfa_offset = static_cast<int64_t>(cfa[0].number2);
  if (!FitsInt32(cfa_offset)) return row;
  row.cfa_register = static_cast<uint8_t>(cfa[0].number);
  row.cfa_offset = static_cast<int32_t>(cfa_offset);

  for (int i = 0; i < CfiRow::kTrackedCount; ++i) {
    const int reg = CfiRow::kTracked[i];
    if (registers == RowRegisters::kWalk && reg != kRbp && reg != kRsp && reg != kReturnAddress) {
      continue;
    }
    std::optional<CfiRule> rule = RuleOf(frame, reg);
    if (!rule) return row;
    row.rules[i] = *rule;
  }
  if (registers == RowRegisters::kWalk) {
    row.compact = true;
    return row;
  }
  // A register outside the tracked set must be lost in the caller or unchanged; anything else
  // needs libdwfl.
  for (int reg = 0; reg < kCfiRegisterCount; ++reg) {
    if (IsTracked(reg)) continue;
    std::optional<CfiRule> rule = RuleOf(frame, reg);
    if (!rule) return row;
    if (rule->kind == CfiRule::Kind::kSame) {
      row.same_mask |= 1u << reg;
    } else if (rule->kind != CfiRule::Kind::kUndefined) {
      return row;
    }
  }
  row.compact = true;
  return row;
}

RowStep StepByRow(const CfiRow& row, const FrameRegisters& frame, const StackMemory& stack,
                  FrameRegisters& caller, bool* read_past_stack) {
  if (!frame.Has(row.cfa_register)) return RowStep::kCannot;
  const uint64_t cfa = frame.value[row.cfa_register] + static_cast<int64_t>(row.cfa_offset);
  caller.Clear();
  for (uint32_t same = row.same_mask & frame.known; same != 0; same &= same - 1) {
    const int reg = __builtin_ctz(same);
    caller.Set(reg, frame.value[reg]);
  }
  for (int i = 0; i < CfiRow::kTrackedCount; ++i) {
    const int reg = CfiRow::kTracked[i];
    const CfiRule& rule = row.rules[i];
    switch (rule.kind) {
      case CfiRule::Kind::kUndefined:
        if (reg == kReturnAddress) return RowStep::kOutermost;
        break;
      case CfiRule::Kind::kSame:
        if (frame.Has(reg)) caller.Set(reg, frame.value[reg]);
        break;
      case CfiRule::Kind::kSavedAt: {
        const uint64_t address = cfa + static_cast<int64_t>(rule.offset);
        if (std::optional<uint64_t> saved = stack.Read(address)) {
          caller.Set(reg, *saved);
        } else if (address >= stack.start) {
          *read_past_stack = true;  // includes a word that starts inside and ends past the end
        }
        break;
      }
      case CfiRule::Kind::kCfaPlus:
        caller.Set(reg, cfa + static_cast<int64_t>(rule.offset));
        break;
    }
  }
  return caller.Has(kReturnAddress) ? RowStep::kStepped : RowStep::kCannot;
}

}  // namespace ember
