// Frames of code that lies in no file, stepped the way the runtime that generated the code lays
// its frames out. A JIT that keeps no frame pointer (HotSpot's compiled code, its interpreter's
// frames) cannot be stepped by the frame-pointer rule the unwinder applies to such code
// otherwise; the runtime that knows the code (runtimes/, above this layer) implements
// RuntimeStepper, and the unwinder asks it first.
#pragma once

#include <cstdint>

#include "unwind/frame_registers.h"
#include "unwind/module_cfi.h"

namespace ember {

// What a runtime's step kept of a frame for naming it later: which of its objects the frame runs
// (e.g. HotSpot's Method* or nmethod*) and where in it (a bytecode pointer, a code offset). All
// zero for a frame no runtime stepped.
struct RuntimeFrame {
  uint64_t object = 0;
  uint64_t position = 0;
  uint32_t kind = 0;   // the runtime's own frame kind; 0: no runtime frame
  uint32_t check = 0;  // what tells the object from a later one at its address (a compile id)
  bool operator==(const RuntimeFrame&) const = default;
};

class RuntimeStepper {
 public:
  // Steps the frame `frame` of process `pid`, whose pc lies in no file, to its caller: false
  // when no runtime knows the pc (the unwinder then follows the frame pointer). When true,
  // `result` holds the step (kStepped with the caller's registers, or where the walk ends) and
  // `runtime_frame` what the runtime kept of the frame. `is_return_address`: the pc is a
  // return address (the frame is a caller), not the interrupted instruction. Per-frame code:
  // counts, never logs, allocates nothing once warm.
  virtual bool Step(uint32_t pid, const FrameRegisters& frame, bool is_return_address,
                    const StackMemory& stack, StepResult& result, RuntimeFrame& runtime_frame) = 0;

 protected:
  ~RuntimeStepper() = default;
};

}  // namespace ember
