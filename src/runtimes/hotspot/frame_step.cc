// The HotSpot frame step on x86-64: interpreter frames by their fixed slots below rbp, compiled
// frames by their frame size (HotSpot's own sender_for_compiled_frame), stubs by rbp or frame size,
// and the leaf's prologue and epilogue by the stack's shape and the code bytes at the pc.
#include "runtimes/hotspot/frame_step.h"

#include <cstring>
#include <optional>

#include "runtimes/hotspot/method_namer.h"

namespace ember::hotspot {
namespace {

// Interpreter frame slots in words from rbp (frame_x86.hpp, JDK 9+): the two HotSpot exports are
// checked against the layout, the others are not exported and follow from them.
constexpr int64_t kSenderSpSlot = -1, kLastSpSlot = -2, kMethodSlot = -3, kBcpSlot = -8;
// The call stub's frame and other rbp frames of stubs stay within this of their sp.
constexpr uint64_t kMaxStubFrameBytes = 64 * 1024;
// An interpreted callee's locals lie between its return address and its sender's sp.
constexpr uint64_t kMaxInterpreterLocalsBytes = 65536 * 8;

// How the leaf's frame looks when it is not complete.
enum class LeafShape : uint8_t {
  kComplete,      // the frame size (or rbp, for rbp stubs) holds
  kPcOnly,        // only the return address is pushed: [sp]
  kFpPc,          // rbp then the return address: [sp], [sp + 8]
  kFramePointer,  // about to `leave`: rbp frame
  kRbpNotSaved,   // C2's prologue without a stack bang: frame allocated, rbp not yet stored in it
};

// Reads a stack word from the snapshot; on failure records why.
bool StackWord(const StackMemory& stack, uint64_t address, uint64_t* out, JavaStep& result) {
  std::optional<uint64_t> value = stack.Read(address);
  if (!value) {
    result.outcome = StepOutcome::kStackUnreadable;
    result.read_past_stack = address >= stack.start + stack.bytes.size();
    return false;
  }
  *out = *value;
  return true;
}

void SetCaller(JavaStep& result, uint64_t pc, uint64_t sp, bool fp_known, uint64_t fp) {
  result.caller.Clear();
  result.caller.Set(kRegIp, pc);
  result.caller.Set(kRegSp, sp);
  if (fp_known) result.caller.Set(kRegBp, fp);
  result.outcome = StepOutcome::kStepped;
}

// The leaf's shape from the code bytes at its pc (an instruction's start): in an epilogue after
// `add rsp` the frame is gone but rbp and the return address; after `pop rbp` only the return
// address; before `leave` an rbp frame. The return safepoint poll (`cmp rsp, [r15 + d]; ja slow`)
// sits between `pop rbp` and `ret`, as does the older `test eax, [r10]`.
LeafShape ShapeFromCode(const uint8_t* code, size_t size, uint32_t frame_size) {
  if (size < 1) return LeafShape::kComplete;
  // `mov [rsp + frame size - 16], rbp`: C2 allocates a frame without a stack bang first and
  // stores rbp after.
  if (size >= 5 && code[0] == 0x48 && code[1] == 0x89 && code[2] == 0x6C && code[3] == 0x24 &&
      code[4] + 16u == frame_size) {
    return LeafShape::kRbpNotSaved;
  }
  if (size >= 8 && code[0] == 0x48 && code[1] == 0x89 && code[2] == 0xAC && code[3] == 0x24) {
    uint32_t displacement;
    std::memcpy(&displacement, code + 4, 4);
    if (displacement + 16u == frame_size) return LeafShape::kRbpNotSaved;
  }
  const uint8_t b0 = code[0];
  if (b0 == 0xC3 || b0 == 0xC2) return LeafShape::kPcOnly;  // ret
  if (b0 == 0x5D) return LeafShape::kFpPc;                  // pop rbp
  if (b0 == 0xC9) return LeafShape::kFramePointer;          // leave
  // The first instructions of an rbp frame (`enter`): before them rbp is still the caller's,
  // which often lies in the stack just above and would pass for this frame's.
  if (b0 == 0x55) return LeafShape::kPcOnly;  // push rbp
  if (size >= 3 && b0 == 0x48 && code[1] == 0x89 && code[2] == 0xE5) {
    return LeafShape::kFpPc;  // mov rbp, rsp
  }
  auto jump_then_ret = [&](size_t at) {
    if (at + 6 < size && code[at] == 0x0F && code[at + 1] == 0x87 && code[at + 6] == 0xC3) {
      return true;  // ja rel32; ret
    }
    return at + 2 < size && code[at] == 0x77 && code[at + 2] == 0xC3;  // ja rel8; ret
  };
  if (jump_then_ret(0)) return LeafShape::kPcOnly;
  if (size >= 4 && code[0] == 0x49 && code[1] == 0x3B) {
    if (code[2] == 0x67 && jump_then_ret(4)) return LeafShape::kPcOnly;  // cmp rsp, [r15 + d8]
    if (code[2] == 0xA7 && jump_then_ret(7)) return LeafShape::kPcOnly;  // cmp rsp, [r15 + d32]
  }
  if (size >= 4 && code[0] == 0x41 && code[1] == 0x85 && code[2] == 0x02 && code[3] == 0xC3) {
    return LeafShape::kPcOnly;  // test eax, [r10]; ret
  }
  return LeafShape::kComplete;
}

}  // namespace

const char* JavaFrameKindName(JavaFrameKind kind) {
  switch (kind) {
    case JavaFrameKind::kInterpreted:
      return "interpreted";
    case JavaFrameKind::kCompiled:
      return "compiled";
    case JavaFrameKind::kNativeWrapper:
      return "native_wrapper";
    case JavaFrameKind::kStub:
      return "stub";
    case JavaFrameKind::kVtable:
      return "vtable";
    case JavaFrameKind::kCallStub:
      return "call_stub";
  }
  return "unknown";
}

const char* StepOutcomeName(StepOutcome outcome) {
  switch (outcome) {
    case StepOutcome::kStepped:
      return "stepped";
    case StepOutcome::kNotInCodeCache:
      return "not_in_code_cache";
    case StepOutcome::kNoBlob:
      return "no_blob";
    case StepOutcome::kBadBlob:
      return "bad_blob";
    case StepOutcome::kCodeUnreadable:
      return "code_unreadable";
    case StepOutcome::kNoFramePointer:
      return "no_frame_pointer";
    case StepOutcome::kBadFramePointer:
      return "bad_frame_pointer";
    case StepOutcome::kBadInterpreterFrame:
      return "bad_interpreter_frame";
    case StepOutcome::kBadReturnAddress:
      return "bad_return_address";
    case StepOutcome::kStackUnreadable:
      return "stack_unreadable";
    case StepOutcome::kUnsupportedLayout:
      return "unsupported_layout";
  }
  return "unknown";
}

void FrameStepper::Step(const FrameRegisters& frame, bool leaf, const StackMemory& stack,
                        JavaStep& result) {
  result = JavaStep{};
  if (!frame.Has(kRegIp)) return;  // kNotInCodeCache
  if (!frame.Has(kRegSp)) {
    result.outcome = StepOutcome::kStackUnreadable;
    return;
  }
  const uint64_t pc = frame.value[kRegIp];
  const CodeCacheInfo& info = code_cache_.info();
  if (!info.Contains(pc)) return;
  if (info.InInterpreter(pc)) {
    StepInterpreted(frame, leaf, stack, result);
    return;
  }
  BlobInfo blob;
  result.lookup = code_cache_.FindBlob(pc, memory_, &blob);
  switch (result.lookup) {
    case BlobLookup::kFound:
      break;
    case BlobLookup::kFreeSegment:
      result.outcome = StepOutcome::kNoBlob;
      return;
    case BlobLookup::kSegmapUnreadable:
    case BlobLookup::kBlobUnreadable:
      result.outcome = StepOutcome::kCodeUnreadable;
      return;
    case BlobLookup::kNotInHeap:
    case BlobLookup::kHopLimit:
    case BlobLookup::kBadBlob:
      result.outcome = StepOutcome::kBadBlob;
      return;
  }
  if (blob.kind == BlobKind::kInterpreter) {
    StepInterpreted(frame, leaf, stack, result);
    return;
  }
  StepBlob(blob, frame, leaf, stack, result);
}

StepOutcome FrameStepper::Step(const FrameRegisters& frame, bool leaf, const StackMemory& stack,
                               FrameRegisters& caller, uint64_t& object, uint64_t& position) {
  JavaStep result;
  Step(frame, leaf, stack, result);
  if (result.outcome == StepOutcome::kStepped) {
    caller = result.caller;
    object = result.frame.object;
    position = result.frame.position;
  }
  return result.outcome;
}

void FrameStepper::StepInterpreted(const FrameRegisters& frame, bool leaf, const StackMemory& stack,
                                   JavaStep& result) {
  const HotSpotLayout& layout = code_cache_.layout();
  if (layout.interpreter_frame_sender_sp_offset != kSenderSpSlot ||
      layout.interpreter_frame_last_sp_offset != kLastSpSlot) {
    result.outcome = StepOutcome::kUnsupportedLayout;
    return;
  }
  if (!frame.Has(kRegBp)) {
    result.outcome = StepOutcome::kNoFramePointer;
    return;
  }
  const uint64_t sp = frame.value[kRegSp], fp = frame.value[kRegBp];
  if (fp < sp || fp - sp >= kMaxInterpreterFrameBytes || fp % 8 != 0) {
    result.outcome = StepOutcome::kBadFramePointer;
    return;
  }
  uint64_t link, return_address, sender_sp, method, bcp = 0;
  if (!StackWord(stack, fp, &link, result) || !StackWord(stack, fp + 8, &return_address, result)) {
    return;
  }
  bool bcp_from_r13 = false;
  uint8_t flags = leaf ? kFrameLeaf : 0;
  if (leaf && fp + 8 * kMethodSlot < sp) {
    // The interpreter's method entry is still pushing the fixed slots: Method* is in rbx and,
    // until its slot is pushed, the sender's sp in r13. The bci is not known yet.
    if (!frame.Has(kRegBx)) {
      result.outcome = StepOutcome::kBadInterpreterFrame;
      return;
    }
    method = frame.value[kRegBx];
    if (fp + 8 * kSenderSpSlot >= sp) {
      if (!StackWord(stack, fp + 8 * kSenderSpSlot, &sender_sp, result)) return;
    } else if (frame.Has(kRegR13)) {
      sender_sp = frame.value[kRegR13];
    } else {
      result.outcome = StepOutcome::kBadInterpreterFrame;
      return;
    }
    flags |= kFrameInPrologueOrEpilogue;
  } else {
    if (!StackWord(stack, fp + 8 * kSenderSpSlot, &sender_sp, result) ||
        !StackWord(stack, fp + 8 * kMethodSlot, &method, result)) {
      return;
    }
    bcp_from_r13 = leaf && frame.Has(kRegR13);
    if (bcp_from_r13) {
      bcp = frame.value[kRegR13];
    } else if (!StackWord(stack, fp + 8 * kBcpSlot, &bcp, result)) {
      return;
    }
    if (bcp_from_r13) flags |= kFrameBcpFromR13;
  }
  // A frame being built or torn down (the leaf in the interpreter's entry or return code) fails
  // these: its sender's sp lies above the return address, and Method* is a pointer.
  if (method == 0 || method % 8 != 0 || sender_sp < fp + 16 ||
      sender_sp - fp > kMaxInterpreterLocalsBytes || sender_sp % 8 != 0) {
    result.outcome = StepOutcome::kBadInterpreterFrame;
    return;
  }
  // The Method*'s ConstMethod*, as the check word: a Method* freed with its class and reused, or
  // a redefined method, then names as stale instead of as the method cached for the Method*.
  uint64_t const_method = 0;
  if (layout.method_const_method.present() && layout.method_const_method.width == 8 &&
      memory_.Read(method + layout.method_const_method.offset, &const_method,
                   sizeof(const_method))) {
    result.frame.compile_id = static_cast<int32_t>(ConstMethodCookie(const_method));
  }
  // The frame is known from here on, so it is named even when its caller cannot be stepped to.
  result.frame.kind = JavaFrameKind::kInterpreted;
  result.frame.flags = flags;
  result.frame.object = method;
  result.frame.position = bcp;
  // Whoever calls an interpreted method is Java code or the call stub: in the code cache.
  if (!code_cache_.info().Contains(return_address)) {
    result.outcome = StepOutcome::kBadReturnAddress;
    return;
  }
  SetCaller(result, return_address, sender_sp, true, link);
}

void FrameStepper::StepBlob(const BlobInfo& blob, const FrameRegisters& frame, bool leaf,
                            const StackMemory& stack, JavaStep& result) {
  const CodeCacheInfo& info = code_cache_.info();
  const uint64_t pc = frame.value[kRegIp], sp = frame.value[kRegSp];
  const bool fp_known = frame.Has(kRegBp);
  const uint64_t fp = frame.value[kRegBp];
  SteppedFrame& out = result.frame;
  out.object = blob.address;
  out.position = pc - blob.code_begin;
  out.flags = leaf ? kFrameLeaf : 0;
  const bool is_nmethod = blob.kind == BlobKind::kNmethod || blob.kind == BlobKind::kNativeWrapper;
  switch (blob.kind) {
    case BlobKind::kNmethod:
      out.kind = JavaFrameKind::kCompiled;
      break;
    case BlobKind::kNativeWrapper:
      out.kind = JavaFrameKind::kNativeWrapper;
      break;
    case BlobKind::kVtable:
      out.kind = JavaFrameKind::kVtable;
      break;
    default:
      out.kind =
          pc == info.call_stub_return_address ? JavaFrameKind::kCallStub : JavaFrameKind::kStub;
  }
  if (is_nmethod) out.compile_id = blob.compile_id;

  // Every caller of Java code and of the stubs compiled code calls is in the code cache.
  auto is_code = [&](uint64_t address) { return info.Contains(address); };
  auto step_pc_only = [&](bool need_code) {
    uint64_t return_address;
    if (!StackWord(stack, sp, &return_address, result)) return;
    if (return_address == 0 || (need_code && !is_code(return_address))) {
      result.outcome = StepOutcome::kBadReturnAddress;
      return;
    }
    SetCaller(result, return_address, sp + 8, fp_known, fp);
  };
  auto step_fp_pc = [&](bool need_code) {
    uint64_t saved_fp, return_address;
    if (!StackWord(stack, sp, &saved_fp, result) ||
        !StackWord(stack, sp + 8, &return_address, result)) {
      return;
    }
    if (return_address == 0 || (need_code && !is_code(return_address))) {
      result.outcome = StepOutcome::kBadReturnAddress;
      return;
    }
    SetCaller(result, return_address, sp + 16, true, saved_fp);
  };
  // An rbp frame: [rbp] the caller's rbp, [rbp + 8] the return address.
  auto step_frame_pointer = [&](bool need_code, bool need_native) {
    if (!fp_known) {
      result.outcome = StepOutcome::kNoFramePointer;
      return;
    }
    if (fp < sp || fp - sp >= kMaxStubFrameBytes || fp % 8 != 0) {
      result.outcome = StepOutcome::kBadFramePointer;
      return;
    }
    uint64_t saved_fp, return_address;
    if (!StackWord(stack, fp, &saved_fp, result) ||
        !StackWord(stack, fp + 8, &return_address, result)) {
      return;
    }
    if (return_address == 0 || (need_code && !is_code(return_address)) ||
        (need_native && is_code(return_address))) {
      result.outcome = StepOutcome::kBadReturnAddress;
      return;
    }
    SetCaller(result, return_address, fp + 16, true, saved_fp);
  };
  // HotSpot's sender_for_compiled_frame: the caller's sp is sp + frame size, the return address
  // and the saved rbp are the two words below it.
  auto step_frame_size = [&](bool scan, bool rbp_not_saved) {
    if (blob.frame_size < 16) {
      result.outcome = StepOutcome::kBadBlob;
      return;
    }
    uint64_t caller_sp = sp + blob.frame_size, return_address, saved_fp;
    if (!StackWord(stack, caller_sp - 8, &return_address, result)) return;
    if (scan && !is_code(return_address)) {
      int slot = 1;
      for (; slot <= kReturnAddressScanSlots; ++slot) {
        uint64_t word;
        if (!StackWord(stack, caller_sp - 8 + 8 * slot, &word, result)) return;
        if (is_code(word)) {
          return_address = word;
          caller_sp += 8 * slot;
          out.flags |= kFrameReturnAddressScanned;
          break;
        }
      }
      if (slot > kReturnAddressScanSlots) {
        result.outcome = StepOutcome::kBadReturnAddress;
        return;
      }
    }
    if (return_address == 0) {
      result.outcome = StepOutcome::kBadReturnAddress;
      return;
    }
    if (rbp_not_saved) {
      if (is_nmethod && !is_code(return_address)) {
        result.outcome = StepOutcome::kBadReturnAddress;
        return;
      }
      SetCaller(result, return_address, caller_sp, fp_known, fp);
      return;
    }
    if (!StackWord(stack, caller_sp - 16, &saved_fp, result)) return;
    SetCaller(result, return_address, caller_sp, true, saved_fp);
  };

  if (out.kind == JavaFrameKind::kCallStub) {
    // Returning into the call stub leaves Java: its rbp frame leads to JavaCalls::call_helper.
    step_frame_pointer(false, true);
    return;
  }
  if (blob.kind == BlobKind::kVtable) {
    step_pc_only(true);
    return;
  }

  if (is_nmethod && pc == blob.deopt_handler && blob.orig_pc_offset >= 0) {
    uint64_t original;
    if (!StackWord(stack, sp + static_cast<uint64_t>(blob.orig_pc_offset), &original, result)) {
      return;
    }
    if (blob.Contains(original)) {
      out.position = original - blob.code_begin;
      out.flags |= kFrameDeoptRecovered;
    }
  }

  if (leaf) {
    // The code at the pc tells an epilogue; the stack's shape tells a prologue.
    uint8_t code[16];
    size_t code_size = 0;
    const uint64_t available = blob.code_end - pc;
    code_size = available < sizeof(code) ? available : sizeof(code);
    if (code_size > 0 && !memory_.Read(pc, code, code_size)) code_size = 0;
    const LeafShape epilogue = ShapeFromCode(code, code_size, blob.frame_size);
    const bool need_code = is_nmethod;
    if (epilogue != LeafShape::kComplete) {
      out.flags |= kFrameInPrologueOrEpilogue;
      if (epilogue == LeafShape::kPcOnly) step_pc_only(need_code);
      if (epilogue == LeafShape::kFpPc) step_fp_pc(need_code);
      if (epilogue == LeafShape::kFramePointer) step_frame_pointer(need_code, false);
      if (epilogue == LeafShape::kRbpNotSaved) step_frame_size(false, true);
      return;
    }
    const bool in_prologue =
        blob.frame_complete_offset >= 0 &&
        pc - blob.code_begin < static_cast<uint64_t>(blob.frame_complete_offset);
    if (in_prologue && blob.frame_size >= 16) {
      // Until the prologue has changed rbp, the caller's rbp is both in the register and where
      // the prologue pushed it; that equality rarely holds by chance, unlike a stale return
      // address below sp.
      const std::optional<uint64_t> top_fp = stack.Read(sp + blob.frame_size - 16);
      const std::optional<uint64_t> top_ra = stack.Read(sp + blob.frame_size - 8);
      // With PreserveFramePointer, rbp already points at that pushed copy.
      const bool complete = fp_known && top_ra && is_code(*top_ra) &&
                            (top_fp == fp || fp == sp + blob.frame_size - 16);
      if (!complete) {
        out.flags |= kFrameInPrologueOrEpilogue;
        uint64_t word0, word1;
        if (!StackWord(stack, sp, &word0, result) || !StackWord(stack, sp + 8, &word1, result)) {
          return;
        }
        if (fp_known && (word0 == fp || fp == sp) && is_code(word1)) {
          step_fp_pc(need_code);
        } else if (is_code(word0)) {
          step_pc_only(need_code);
        } else {
          result.outcome = StepOutcome::kBadReturnAddress;
        }
        return;
      }
    }
  }

  if (is_nmethod) {
    step_frame_size(true, false);
    return;
  }
  // Stubs: the frameless ones (StubRoutines, the call stub) keep an rbp frame; the others
  // (runtime stubs) have a frame size.
  if (blob.frame_size == 0) {
    if (leaf && (!fp_known || fp < sp || fp - sp >= kMaxStubFrameBytes)) {
      // A leaf stub before its `enter` (or one that never makes a frame).
      step_pc_only(true);
      return;
    }
    step_frame_pointer(false, false);
    return;
  }
  step_frame_size(false, false);
}

}  // namespace ember::hotspot
