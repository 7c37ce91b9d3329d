// One step of a stack walk through a frame whose pc lies in a HotSpot code cache (x86-64): what
// the frame is (interpreted method, nmethod, stub, ...) and its caller's registers. The model of
// the BPF walk, and what the native unwinder calls for code outside every file.
//
// Stack words come from the sample's StackMemory only, never from the live process: the stack has
// moved on since the sample, so a word read now would be silently wrong. A word outside the
// snapshot ends the step with kStackUnreadable (and `read_past_stack` set when it lies above it).
// Code cache memory (segment map, blob headers, names, code bytes at a leaf pc) is read through
// the MemoryReader.
#pragma once

#include <cstdint>

#include "runtimes/hotspot/code_cache.h"
#include "runtimes/process_memory.h"
#include "unwind/frame_registers.h"

namespace ember::hotspot {

// x86-64 DWARF register numbers.
inline constexpr int kRegBx = 3, kRegBp = 6, kRegSp = 7, kRegR13 = 13, kRegIp = 16;

// An interpreted frame is at most this far above its sp (locals, monitors, expression stack).
inline constexpr uint64_t kMaxInterpreterFrameBytes = 64 * 1024;
// How many words above the expected slot a compiled frame's return address is searched for:
// compiled code sometimes leaves extra words on the stack.
inline constexpr int kReturnAddressScanSlots = 6;

enum class JavaFrameKind : uint8_t {
  kInterpreted,    // object = Method*, position = bcp (0 while the method's entry builds its frame)
  kCompiled,       // object = nmethod, position = pc offset from the code's start
  kNativeWrapper,  // object = nmethod of a JNI wrapper, position = pc offset
  kStub,           // object = CodeBlob, position = pc offset
  kVtable,         // object = CodeBlob, position = pc offset
  kCallStub,       // the call stub: its caller is native code (JavaCalls::call_helper)
};
const char* JavaFrameKindName(JavaFrameKind kind);

enum JavaFrameFlag : uint8_t {
  kFrameLeaf = 1,                   // the pc is the interrupted instruction
  kFrameDeoptRecovered = 2,         // the pc was the deopt handler; position is the original pc
  kFrameBcpFromR13 = 4,             // the leaf's live bcp came from r13
  kFrameReturnAddressScanned = 8,   // the caller's pc was found above the expected slot
  kFrameInPrologueOrEpilogue = 16,  // stepped by the leaf's prologue/epilogue rules
};

struct SteppedFrame {
  JavaFrameKind kind = JavaFrameKind::kStub;
  uint8_t flags = 0;
  // nmethods: to tell a reused blob; interpreted frames: ConstMethodCookie of the Method*'s
  // ConstMethod* (0 when unread), to tell a reused or redefined Method*.
  int32_t compile_id = 0;
  uint64_t object = 0;
  uint64_t position = 0;
};

// Every way a step can end; all but kStepped stop the walk. Counted per outcome.
enum class StepOutcome : uint8_t {
  kStepped,
  kNotInCodeCache,       // the pc is in no code heap and not in the interpreter
  kNoBlob,               // no blob holds the pc (free segment)
  kBadBlob,              // segment map walk or blob fields fail their checks
  kCodeUnreadable,       // reading the segment map, a blob or code bytes failed
  kNoFramePointer,       // the frame needs rbp and it is unknown
  kBadFramePointer,      // rbp is outside the range the frame allows
  kBadInterpreterFrame,  // an interpreter frame's slots fail their checks
  kBadReturnAddress,     // the caller's pc is not where code can be
  kStackUnreadable,      // a stack word outside the snapshot
  kUnsupportedLayout,    // the frame constants differ from the x86-64 slots this models
};
inline constexpr int kStepOutcomeCount = 11;
const char* StepOutcomeName(StepOutcome outcome);

struct JavaStep {
  StepOutcome outcome = StepOutcome::kNotInCodeCache;
  FrameRegisters caller;  // valid when kStepped: rip, rsp and (when known) rbp
  // Set once the frame is known (object != 0), also when its caller could not be stepped to.
  SteppedFrame frame;
  BlobLookup lookup = BlobLookup::kFound;  // the blob lookup's own outcome, for finer counts
  bool read_past_stack = false;            // a stack word above the snapshot's end was needed
};

// One process's step: its code cache and the reader of its memory. No allocation per step.
class FrameStepper {
 public:
  // Both must outlive this.
  FrameStepper(CodeCache& code_cache, MemoryReader& memory)
      : code_cache_(code_cache), memory_(memory) {}

  bool InCodeCache(uint64_t pc) const { return code_cache_.info().Contains(pc); }

  // Steps the frame with registers `frame` (rip and rsp needed; rbp, and for the leaf r13 and
  // rbx, used when known).
  // `leaf`: rip is the interrupted instruction, not a return address.
  void Step(const FrameRegisters& frame, bool leaf, const StackMemory& stack, JavaStep& result);

  // The same, in the shape of the native unwinder's hook: the caller's registers and two words,
  // `object` (Method* or CodeBlob/nmethod) and `position` (bcp or pc offset).
  StepOutcome Step(const FrameRegisters& frame, bool leaf, const StackMemory& stack,
                   FrameRegisters& caller, uint64_t& object, uint64_t& position);

 private:
  void StepInterpreted(const FrameRegisters& frame, bool leaf, const StackMemory& stack,
                       JavaStep& result);
  void StepBlob(const BlobInfo& blob, const FrameRegisters& frame, bool leaf,
                const StackMemory& stack, JavaStep& result);

  CodeCache& code_cache_;
  MemoryReader& memory_;
};

}  // namespace ember::hotspot
