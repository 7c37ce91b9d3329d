// One row of a file's call-frame table in the compact form most x86-64 code needs: the CFA is a
// register plus an offset, and each register the caller keeps is unchanged, saved at CFA+N, or
// CFA+N itself. Such a row is stepped with a few reads of the snapshot, without libdwfl; rows
// with DWARF expressions, register-to-register rules or signal frames are left to libdwfl.
#pragma once

#include <cstdint>

#include "unwind/frame_registers.h"

typedef struct Dwarf_Frame_s Dwarf_Frame;

namespace ember {

// How the caller's value of one register is found.
struct CfiRule {
  enum class Kind : uint8_t {
    kUndefined,  // not recoverable (call-clobbered): unknown in the caller
    kSame,       // this frame did not change it
    kSavedAt,    // saved in memory at CFA + offset
    kCfaPlus,    // the value CFA + offset (the stack pointer: CFA + 0)
  };
  Kind kind = Kind::kUndefined;
  int32_t offset = 0;
};

struct CfiRow {
  // The registers whose rules a compact row keeps: the x86-64 callee-saved rbx, rbp, r12 to r15,
  // the stack pointer and the return address. Every other register is either undefined in the
  // caller or unchanged (`same_mask`: libdw's x86-64 defaults keep rax, for one).
  static constexpr int kTracked[] = {3, 6, 7, 12, 13, 14, 15, 16};
  static constexpr int kTrackedCount = sizeof(kTracked) / sizeof(kTracked[0]);

  bool compact = false;       // false: step this row with libdwfl
  bool signal_frame = false;  // the frame of a signal trampoline (its caller was interrupted)
  uint8_t cfa_register = 0;
  int32_t cfa_offset = 0;
  uint32_t same_mask = 0;  // untracked registers the caller has unchanged, by bit
  CfiRule rules[kTrackedCount];
};

// Which registers' rules a row is read with: every one (the agent's unwinder, which keeps them
// all from frame to frame), or only those of rsp, rbp and the return address (the BPF walk, which
// keeps no other register). The walk's rows leave the other rules undefined, and take 3 of the 17
// calls to libdw a row takes.
enum class RowRegisters { kAll, kWalk };

// The row of `frame` (from dwarf_cfi_addrframe), or a row with `compact` false when it needs more
// than the compact form.
CfiRow CompactRowOf(Dwarf_Frame* frame, RowRegisters registers = RowRegisters::kAll);

// How StepByRow ended.
enum class RowStep {
  kStepped,    // the caller's registers are in `caller`
  kOutermost,  // the return address is undefined: this frame has no caller
  kCannot,     // the row cannot be applied here (its CFA register or the return address is
               // unknown or unreadable): libdwfl may still step the frame another way
};

// The caller's registers from `frame`'s by `row` (compact), into `caller` (what it held before is
// dropped). Sets *read_past_stack when a read needed memory at or above the end of `stack` (as
// the libdwfl step reports it).
RowStep StepByRow(const CfiRow& row, const FrameRegisters& frame, const StackMemory& stack,
                  FrameRegisters& caller, bool* read_past_stack);

}  // namespace ember
