// The HotSpot frame step over hand-built stacks in synthetic JDK 17 and JDK 25 code caches:
// interpreted -> compiled -> call stub -> native chains, leaves in stubs, prologues and
// epilogues, deoptimized frames, and every refusal.
#include "runtimes/hotspot/frame_step.h"

#include <gtest/gtest.h>

#include <iterator>
#include <random>

#include "runtimes/hotspot/method_namer.h"
#include "step_fake_jvm.h"

namespace ember::hotspot {
namespace {

using step_test::FakeJvm;
using step_test::Jdk;
using step_test::Regs;

constexpr uint64_t kMethod = 0x800001000, kStaleBcp = 0x800002000, kLiveBcp = 0x800002010;
constexpr uint64_t kNativeReturn = 0x7f1000123456, kNativeFp = FakeJvm::kStack + 0x3f00;

class FrameStepTest : public ::testing::TestWithParam<Jdk> {
 protected:
  FrameStepTest()
      : jvm(GetParam()), cache(jvm.layout, jvm.ReadInfo()), stepper(cache, jvm.memory) {}

  JavaStep Step(const FrameRegisters& regs, bool leaf) {
    JavaStep result;
    StackMemory stack = jvm.Stack();
    stepper.Step(regs, leaf, stack, result);
    return result;
  }

  // The call stub's rbp frame, a compiled frame returning into it and an interpreted frame
  // called by the compiled one; returns the interpreted frame's rbp.
  struct Chain {
    uint64_t call_stub_fp, compiled_sp, compiled_pc, interpreted_fp, interpreted_sp;
  };
  Chain BuildChain() {
    Chain c;
    c.call_stub_fp = FakeJvm::kStack + 0x3000;
    jvm.PutStack(c.call_stub_fp, kNativeFp);
    jvm.PutStack(c.call_stub_fp + 8, kNativeReturn);
    c.compiled_sp = c.call_stub_fp - 0x100;
    c.compiled_pc = jvm.nmethod.code_begin + 0x100;
    const uint64_t frame = FakeJvm::kNmethodFrameWords * 8;
    jvm.PutStack(c.compiled_sp + frame - 8, jvm.call_stub_return);
    jvm.PutStack(c.compiled_sp + frame - 16, c.call_stub_fp);
    c.interpreted_fp = c.compiled_sp - 0x40;
    c.interpreted_sp = c.interpreted_fp - 0x60;
    jvm.PutStack(c.interpreted_fp, 0x1234);  // rbp as compiled code left it: any value
    jvm.PutStack(c.interpreted_fp + 8, c.compiled_pc);
    jvm.PutStack(c.interpreted_fp - 8, c.compiled_sp);  // sender sp
    jvm.PutStack(c.interpreted_fp - 24, kMethod);
    jvm.PutStack(c.interpreted_fp - 64, kStaleBcp);
    return c;
  }

  FakeJvm jvm;
  CodeCache cache;
  FrameStepper stepper;
};

TEST_P(FrameStepTest, InterpretedCompiledCallStubNative) {
  const Chain c = BuildChain();
  const uint64_t interp_pc = jvm.interpreter.code_begin + 0x200;

  JavaStep r = Step(Regs(interp_pc, c.interpreted_sp, c.interpreted_fp, kLiveBcp), true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.frame.kind, JavaFrameKind::kInterpreted);
  EXPECT_EQ(r.frame.object, kMethod);
  EXPECT_EQ(r.frame.position, kLiveBcp);
  EXPECT_EQ(r.frame.flags, kFrameLeaf | kFrameBcpFromR13);
  EXPECT_EQ(r.caller.value[kRegIp], c.compiled_pc);
  EXPECT_EQ(r.caller.value[kRegSp], c.compiled_sp);
  EXPECT_EQ(r.caller.value[kRegBp], 0x1234u);

  r = Step(r.caller, false);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.frame.kind, JavaFrameKind::kCompiled);
  EXPECT_EQ(r.frame.object, jvm.nmethod.address);
  EXPECT_EQ(r.frame.position, 0x100u);
  EXPECT_EQ(r.frame.compile_id, FakeJvm::kCompileId);
  EXPECT_EQ(r.caller.value[kRegIp], jvm.call_stub_return);
  EXPECT_EQ(r.caller.value[kRegSp], c.compiled_sp + FakeJvm::kNmethodFrameWords * 8);
  EXPECT_EQ(r.caller.value[kRegBp], c.call_stub_fp);

  r = Step(r.caller, false);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.frame.kind, JavaFrameKind::kCallStub);
  EXPECT_EQ(r.frame.object, jvm.call_stub.address);
  EXPECT_EQ(r.frame.position, FakeJvm::kCallStubReturn);
  EXPECT_EQ(r.caller.value[kRegIp], kNativeReturn);
  EXPECT_EQ(r.caller.value[kRegSp], c.call_stub_fp + 16);
  EXPECT_EQ(r.caller.value[kRegBp], kNativeFp);

  // Native code again: the native unwinder's business.
  EXPECT_EQ(Step(r.caller, false).outcome, StepOutcome::kNotInCodeCache);
}

TEST_P(FrameStepTest, NonLeafInterpretedFrameTakesTheBcpSlot) {
  const Chain c = BuildChain();
  JavaStep r =
      Step(Regs(jvm.interpreter.code_begin + 0x200, c.interpreted_sp, c.interpreted_fp, kLiveBcp),
           false);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped);
  EXPECT_EQ(r.frame.position, kStaleBcp);
  EXPECT_EQ(r.frame.flags, 0);
  // A leaf without r13 too.
  r = Step(Regs(jvm.interpreter.code_begin + 0x200, c.interpreted_sp, c.interpreted_fp), true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped);
  EXPECT_EQ(r.frame.position, kStaleBcp);
}

TEST_P(FrameStepTest, LeafInTheInterpretersMethodEntry) {
  const Chain c = BuildChain();
  const uint64_t pc = jvm.interpreter.code_begin + 0x300;
  // Sender sp and last sp pushed, Method* not yet: it is in rbx.
  FrameRegisters regs = Regs(pc, c.interpreted_fp - 16, c.interpreted_fp, 0x99);
  regs.Set(kRegBx, kMethod + 0x40);
  JavaStep r = Step(regs, true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.frame.kind, JavaFrameKind::kInterpreted);
  EXPECT_EQ(r.frame.object, kMethod + 0x40);
  EXPECT_EQ(r.frame.position, 0u);
  EXPECT_EQ(r.frame.flags, kFrameLeaf | kFrameInPrologueOrEpilogue);
  EXPECT_EQ(r.caller.value[kRegIp], c.compiled_pc);
  EXPECT_EQ(r.caller.value[kRegSp], c.compiled_sp);
  // Right after `enter`: the sender's sp is still in r13.
  regs = Regs(pc, c.interpreted_fp, c.interpreted_fp, c.compiled_sp + 8);
  regs.Set(kRegBx, kMethod);
  r = Step(regs, true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.caller.value[kRegSp], c.compiled_sp + 8);
  // Without rbx the method is unknown.
  EXPECT_EQ(Step(Regs(pc, c.interpreted_fp - 16, c.interpreted_fp, 0x99), true).outcome,
            StepOutcome::kBadInterpreterFrame);
  // Not the leaf: the slots below sp were pushed before the call.
  EXPECT_EQ(Step(Regs(pc, c.interpreted_fp - 16, c.interpreted_fp), false).frame.object, kMethod);
}

TEST_P(FrameStepTest, HookShapeGivesCallerAndTwoWords) {
  const Chain c = BuildChain();
  FrameRegisters caller;
  uint64_t object = 0, position = 0;
  StackMemory stack = jvm.Stack();
  ASSERT_EQ(
      stepper.Step(Regs(c.compiled_pc, c.compiled_sp, 0), false, stack, caller, object, position),
      StepOutcome::kStepped);
  EXPECT_EQ(object, jvm.nmethod.address);
  EXPECT_EQ(position, 0x100u);
  EXPECT_EQ(caller.value[kRegIp], jvm.call_stub_return);
  EXPECT_TRUE(caller.Has(kRegBp));
}

TEST_P(FrameStepTest, LeafInVtableStubAndRuntimeStub) {
  const Chain c = BuildChain();
  const uint64_t sp = c.interpreted_sp - 0x100;
  jvm.PutStack(sp, c.compiled_pc);
  JavaStep r = Step(Regs(jvm.vtable.code_begin + 5, sp, 77), true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.frame.kind, JavaFrameKind::kVtable);
  EXPECT_EQ(r.caller.value[kRegIp], c.compiled_pc);
  EXPECT_EQ(r.caller.value[kRegSp], sp + 8);
  EXPECT_EQ(r.caller.value[kRegBp], 77u);

  // A runtime stub with a frame size, called from compiled code.
  const uint64_t frame = FakeJvm::kRuntimeStubFrameWords * 8;
  jvm.PutStack(sp + frame - 8, c.compiled_pc);
  jvm.PutStack(sp + frame - 16, 0x4242);
  r = Step(Regs(jvm.runtime_stub.code_begin + 0x30, sp), true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.frame.kind, JavaFrameKind::kStub);
  EXPECT_EQ(r.frame.position, 0x30u);
  EXPECT_EQ(r.caller.value[kRegIp], c.compiled_pc);
  EXPECT_EQ(r.caller.value[kRegSp], sp + frame);
  EXPECT_EQ(r.caller.value[kRegBp], 0x4242u);
}

TEST_P(FrameStepTest, NativeWrapperKind) {
  const Chain c = BuildChain();
  const uint64_t sp = c.interpreted_sp - 0x100;
  jvm.PutStack(sp + 32 - 8, c.compiled_pc);
  JavaStep r = Step(Regs(jvm.wrapper.code_begin + 0x40, sp), false);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped);
  EXPECT_EQ(r.frame.kind, JavaFrameKind::kNativeWrapper);
  EXPECT_EQ(r.frame.compile_id, FakeJvm::kCompileId + 1);
}

TEST_P(FrameStepTest, DeoptimizedFrameNamesTheOriginalPc) {
  const Chain c = BuildChain();
  const uint64_t deopt = jvm.nmethod.code_begin + FakeJvm::kDeoptHandler;
  jvm.PutStack(c.compiled_sp + FakeJvm::kOrigPcOffset, jvm.nmethod.code_begin + 0x180);
  JavaStep r = Step(Regs(deopt, c.compiled_sp, 0), false);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped);
  EXPECT_EQ(r.frame.position, 0x180u);
  EXPECT_EQ(r.frame.flags, kFrameDeoptRecovered);
  EXPECT_EQ(r.caller.value[kRegIp], jvm.call_stub_return);
  // An original pc outside the code is not taken.
  jvm.PutStack(c.compiled_sp + FakeJvm::kOrigPcOffset, 0x1000);
  r = Step(Regs(deopt, c.compiled_sp, 0), false);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped);
  EXPECT_EQ(r.frame.position, FakeJvm::kDeoptHandler);
  EXPECT_EQ(r.frame.flags, 0);
}

TEST_P(FrameStepTest, LeafInPrologue) {
  const Chain c = BuildChain();
  const uint64_t sp = c.interpreted_sp - 0x100;
  const uint64_t pc = jvm.nmethod.code_begin + 4;  // before frame_complete
  // Nothing pushed yet: [sp] is the return address; stale code addresses lie above it, one
  // where the complete frame would have its return address.
  const uint64_t frame = FakeJvm::kNmethodFrameWords * 8;
  jvm.PutStack(sp, c.compiled_pc);
  jvm.PutStack(sp + 8, 0x5555);
  jvm.PutStack(sp + frame - 8, jvm.runtime_stub.code_begin);
  JavaStep r = Step(Regs(pc, sp, kNativeFp), true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.caller.value[kRegIp], c.compiled_pc);
  EXPECT_EQ(r.caller.value[kRegSp], sp + 8);
  EXPECT_EQ(r.caller.value[kRegBp], kNativeFp);
  EXPECT_TRUE(r.frame.flags & kFrameInPrologueOrEpilogue);

  // After push rbp: [sp] is the caller's rbp, still in the register.
  jvm.PutStack(sp, kNativeFp);
  jvm.PutStack(sp + 8, c.compiled_pc);
  r = Step(Regs(pc, sp, kNativeFp), true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.caller.value[kRegIp], c.compiled_pc);
  EXPECT_EQ(r.caller.value[kRegSp], sp + 16);
  EXPECT_EQ(r.caller.value[kRegBp], kNativeFp);

  // After sub rsp: the whole frame, though [sp] holds a stale code address.
  jvm.PutStack(sp, jvm.runtime_stub.code_begin + 8);
  jvm.PutStack(sp + 8, 0);
  jvm.PutStack(sp + frame - 16, kNativeFp);
  jvm.PutStack(sp + frame - 8, c.compiled_pc);
  r = Step(Regs(pc, sp, kNativeFp), true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.caller.value[kRegSp], sp + frame);
  EXPECT_FALSE(r.frame.flags & kFrameInPrologueOrEpilogue);

  // C2 without a stack bang: `sub rsp` done, at `mov [rsp + frame - 16], rbp`; the slot still
  // holds an old value and rbp is the caller's.
  const uint64_t store_pc = jvm.nmethod.code_begin + 0x10;
  jvm.memory.PutBytes(store_pc, "\x48\x89\x6c\x24\x20", 5);  // frame 48: disp 0x20
  jvm.PutStack(sp + frame - 16, 0xbad);
  r = Step(Regs(store_pc, sp, kNativeFp), true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.caller.value[kRegIp], c.compiled_pc);
  EXPECT_EQ(r.caller.value[kRegSp], sp + frame);
  EXPECT_EQ(r.caller.value[kRegBp], kNativeFp);
  EXPECT_TRUE(r.frame.flags & kFrameInPrologueOrEpilogue);
  // The same store with a 32-bit displacement.
  jvm.memory.PutBytes(store_pc, "\x48\x89\xac\x24\x20\x00\x00\x00", 8);
  r = Step(Regs(store_pc, sp, kNativeFp), true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.caller.value[kRegSp], sp + frame);
  EXPECT_EQ(r.caller.value[kRegBp], kNativeFp);

  // Past the prologue the frame size holds even when [sp] looks like a return address.
  jvm.PutStack(sp + frame - 16, 0x999);
  r = Step(Regs(jvm.nmethod.code_begin + 0x40, sp, kNativeFp), true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped);
  EXPECT_EQ(r.caller.value[kRegSp], sp + frame);
  EXPECT_EQ(r.caller.value[kRegBp], 0x999u);
}

TEST_P(FrameStepTest, LeafInEpilogue) {
  const Chain c = BuildChain();
  const uint64_t sp = c.interpreted_sp - 0x100;
  const uint64_t pc = jvm.nmethod.code_begin + 0x300;
  jvm.PutStack(sp, 0x3333);
  jvm.PutStack(sp + 8, c.compiled_pc);
  // pop rbp; ret
  jvm.memory.PutBytes(pc, "\x5d\xc3", 2);
  JavaStep r = Step(Regs(pc, sp, 1), true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.caller.value[kRegIp], c.compiled_pc);
  EXPECT_EQ(r.caller.value[kRegSp], sp + 16);
  EXPECT_EQ(r.caller.value[kRegBp], 0x3333u);

  // cmp rsp, [r15 + 0x448]; ja slow; ret: rbp already popped.
  jvm.PutStack(sp, c.compiled_pc);
  jvm.memory.PutBytes(pc, "\x49\x3b\xa7\x48\x04\x00\x00\x0f\x87\x10\x00\x00\x00\xc3", 14);
  r = Step(Regs(pc, sp, 1), true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.caller.value[kRegIp], c.compiled_pc);
  EXPECT_EQ(r.caller.value[kRegSp], sp + 8);
  EXPECT_EQ(r.caller.value[kRegBp], 1u);
  // The same poll with an 8-bit displacement, then at the jump.
  jvm.memory.PutBytes(pc, "\x49\x3b\x67\x48\x0f\x87\x10\x00\x00\x00\xc3", 11);
  EXPECT_EQ(Step(Regs(pc, sp, 1), true).caller.value[kRegSp], sp + 8);
  EXPECT_EQ(Step(Regs(pc + 4, sp, 1), true).caller.value[kRegSp], sp + 8);

  // The same code in a non-leaf frame is a call site: the frame size holds.
  const uint64_t frame = FakeJvm::kNmethodFrameWords * 8;
  jvm.PutStack(sp + frame - 8, c.compiled_pc);
  r = Step(Regs(pc, sp, 1), false);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped);
  EXPECT_EQ(r.caller.value[kRegSp], sp + frame);
}

TEST_P(FrameStepTest, ReturnAddressScan) {
  const Chain c = BuildChain();
  const uint64_t sp = c.interpreted_sp - 0x100;
  const uint64_t frame = FakeJvm::kNmethodFrameWords * 8;
  jvm.PutStack(sp + frame - 8, 0x77);  // not code
  jvm.PutStack(sp + frame + 8, c.compiled_pc);
  jvm.PutStack(sp + frame, 0x6666);
  JavaStep r = Step(Regs(jvm.nmethod.code_begin + 0x100, sp), false);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.caller.value[kRegIp], c.compiled_pc);
  EXPECT_EQ(r.caller.value[kRegSp], sp + frame + 16);
  EXPECT_EQ(r.caller.value[kRegBp], 0x6666u);
  EXPECT_TRUE(r.frame.flags & kFrameReturnAddressScanned);
  // Nothing within the scan: refused.
  jvm.PutStack(sp + frame + 8, 0x88);
  EXPECT_EQ(Step(Regs(jvm.nmethod.code_begin + 0x100, sp), false).outcome,
            StepOutcome::kBadReturnAddress);
}

TEST_P(FrameStepTest, FrameKnownWhenItsCallerIsNot) {
  const Chain c = BuildChain();
  const uint64_t interp_pc = jvm.interpreter.code_begin + 0x200;
  // An interpreted frame whose return address leaves the code cache: its Method* was read.
  jvm.PutStack(c.interpreted_fp + 8, kNativeReturn);
  JavaStep r = Step(Regs(interp_pc, c.interpreted_sp, c.interpreted_fp), false);
  EXPECT_EQ(r.outcome, StepOutcome::kBadReturnAddress);
  EXPECT_EQ(r.frame.kind, JavaFrameKind::kInterpreted);
  EXPECT_EQ(r.frame.object, kMethod);
  EXPECT_EQ(r.frame.position, kStaleBcp);
  // A compiled frame whose return address lies past the snapshot.
  r = Step(Regs(c.compiled_pc, FakeJvm::kStack + FakeJvm::kStackBytes - 8), false);
  EXPECT_EQ(r.outcome, StepOutcome::kStackUnreadable);
  EXPECT_EQ(r.frame.kind, JavaFrameKind::kCompiled);
  EXPECT_EQ(r.frame.object, jvm.nmethod.address);
  // Before the Method* is read, nothing is known.
  r = Step(Regs(interp_pc, FakeJvm::kStack + FakeJvm::kStackBytes - 16,
                FakeJvm::kStack + FakeJvm::kStackBytes),
           false);
  EXPECT_EQ(r.outcome, StepOutcome::kStackUnreadable);
  EXPECT_EQ(r.frame.object, 0u);
}

TEST_P(FrameStepTest, InterpretedFrameChecksItsConstMethod) {
  const Chain c = BuildChain();
  const uint64_t interp_pc = jvm.interpreter.code_begin + 0x200;
  // Method*'s memory unreadable: no check word.
  JavaStep r = Step(Regs(interp_pc, c.interpreted_sp, c.interpreted_fp), false);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped);
  EXPECT_EQ(r.frame.compile_id, 0);
  // Readable: the cookie of its ConstMethod*, which changes with it.
  jvm.layout.method_const_method = Field{8, 8};
  constexpr uint64_t kConstMethod = 0x800003000;
  jvm.memory.Map(kMethod, 0x100);
  jvm.memory.Put<uint64_t>(kMethod + 8, kConstMethod);
  r = Step(Regs(interp_pc, c.interpreted_sp, c.interpreted_fp), false);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped);
  EXPECT_EQ(static_cast<uint32_t>(r.frame.compile_id), ConstMethodCookie(kConstMethod));
  jvm.memory.Put<uint64_t>(kMethod + 8, kConstMethod + 0x1000);
  r = Step(Regs(interp_pc, c.interpreted_sp, c.interpreted_fp), false);
  EXPECT_EQ(static_cast<uint32_t>(r.frame.compile_id), ConstMethodCookie(kConstMethod + 0x1000));
}

TEST_P(FrameStepTest, Refusals) {
  const Chain c = BuildChain();
  const uint64_t interp_pc = jvm.interpreter.code_begin + 0x200;
  // No rbp for an interpreted frame.
  EXPECT_EQ(Step(Regs(interp_pc, c.interpreted_sp), false).outcome, StepOutcome::kNoFramePointer);
  // rbp below sp, or far above it.
  EXPECT_EQ(Step(Regs(interp_pc, c.interpreted_sp, c.interpreted_sp - 8), false).outcome,
            StepOutcome::kBadFramePointer);
  EXPECT_EQ(Step(Regs(interp_pc, c.interpreted_sp, c.interpreted_sp + (1 << 20)), false).outcome,
            StepOutcome::kBadFramePointer);
  // rbp whose slots lie past the snapshot.
  JavaStep r = Step(Regs(interp_pc, FakeJvm::kStack + FakeJvm::kStackBytes - 16,
                         FakeJvm::kStack + FakeJvm::kStackBytes),
                    false);
  EXPECT_EQ(r.outcome, StepOutcome::kStackUnreadable);
  EXPECT_TRUE(r.read_past_stack);
  // A null Method*, a sender sp below the frame, a return address outside the code cache.
  jvm.PutStack(c.interpreted_fp - 24, 0);
  EXPECT_EQ(Step(Regs(interp_pc, c.interpreted_sp, c.interpreted_fp), false).outcome,
            StepOutcome::kBadInterpreterFrame);
  jvm.PutStack(c.interpreted_fp - 24, kMethod);
  jvm.PutStack(c.interpreted_fp - 8, c.interpreted_fp);
  EXPECT_EQ(Step(Regs(interp_pc, c.interpreted_sp, c.interpreted_fp), false).outcome,
            StepOutcome::kBadInterpreterFrame);
  jvm.PutStack(c.interpreted_fp - 8, c.compiled_sp);
  jvm.PutStack(c.interpreted_fp + 8, kNativeReturn);
  EXPECT_EQ(Step(Regs(interp_pc, c.interpreted_sp, c.interpreted_fp), false).outcome,
            StepOutcome::kBadReturnAddress);
  jvm.PutStack(c.interpreted_fp + 8, c.compiled_pc);
  ASSERT_EQ(Step(Regs(interp_pc, c.interpreted_sp, c.interpreted_fp), false).outcome,
            StepOutcome::kStepped);

  // The call stub's return must leave the code cache.
  jvm.PutStack(c.call_stub_fp + 8, c.compiled_pc);
  EXPECT_EQ(Step(Regs(jvm.call_stub_return, c.call_stub_fp - 0x40, c.call_stub_fp), false).outcome,
            StepOutcome::kBadReturnAddress);
  EXPECT_EQ(Step(Regs(jvm.call_stub_return, c.call_stub_fp - 0x40), false).outcome,
            StepOutcome::kNoFramePointer);

  // A free segment and an unreadable segment map.
  const uint64_t free_pc = FakeJvm::kHeapLow + ((FakeJvm::kEndSeg + 1) << FakeJvm::kLog2Segment);
  EXPECT_EQ(Step(Regs(free_pc, c.compiled_sp), false).outcome, StepOutcome::kNoBlob);
  // A blob whose frame is too small to hold a return address.
  jvm.SetField(jvm.wrapper.address, jvm.layout.blob_frame_size, 1);
  EXPECT_EQ(Step(Regs(jvm.wrapper.code_begin, c.compiled_sp), false).outcome,
            StepOutcome::kBadBlob);
  jvm.SetField(jvm.nmethod.address, jvm.layout.blob_frame_size, 1 << 24);
  EXPECT_EQ(Step(Regs(jvm.nmethod.code_begin + 0x100, c.compiled_sp), false).outcome,
            StepOutcome::kBadBlob);
  jvm.memory.Unmap(FakeJvm::kSegmap);
  EXPECT_EQ(Step(Regs(jvm.runtime_stub.code_begin, c.compiled_sp), false).outcome,
            StepOutcome::kCodeUnreadable);
  // Registers the step cannot do without.
  EXPECT_EQ(Step(FrameRegisters{}, false).outcome, StepOutcome::kNotInCodeCache);

  // Frame constants of another architecture.
  jvm.layout.interpreter_frame_sender_sp_offset = 1;
  EXPECT_EQ(Step(Regs(interp_pc, c.interpreted_sp, c.interpreted_fp), false).outcome,
            StepOutcome::kUnsupportedLayout);
}

TEST_P(FrameStepTest, StubWithFramePointerAndFramelessLeaf) {
  const Chain c = BuildChain();
  // A StubRoutines stub (frame size 0) in the middle of a stack keeps an rbp frame.
  const uint64_t fp = c.interpreted_sp - 0x80, sp = fp - 0x20;
  jvm.PutStack(fp, c.interpreted_fp);
  jvm.PutStack(fp + 8, c.compiled_pc);
  JavaStep r = Step(Regs(jvm.call_stub.code_begin + 0x100, sp, fp), false);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.frame.kind, JavaFrameKind::kStub);
  EXPECT_EQ(r.caller.value[kRegSp], fp + 16);
  EXPECT_EQ(r.caller.value[kRegBp], c.interpreted_fp);
  // As the leaf at its `push rbp`, rbp still the caller's: only the return address.
  jvm.PutStack(sp, c.compiled_pc);
  jvm.memory.PutBytes(jvm.call_stub.code_begin + 0x100, "\x55\x48\x89\xe5", 4);
  r = Step(Regs(jvm.call_stub.code_begin + 0x100, sp, fp), true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.caller.value[kRegIp], c.compiled_pc);
  EXPECT_EQ(r.caller.value[kRegSp], sp + 8);
  EXPECT_EQ(r.caller.value[kRegBp], fp);
  // At its `mov rbp, rsp`: rbp pushed, not yet moved.
  jvm.PutStack(sp, fp);
  jvm.PutStack(sp + 8, c.compiled_pc);
  r = Step(Regs(jvm.call_stub.code_begin + 0x101, sp, fp), true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.caller.value[kRegIp], c.compiled_pc);
  EXPECT_EQ(r.caller.value[kRegSp], sp + 16);
  // As the leaf with rbp still the caller's (far above): only the return address.
  jvm.memory.PutBytes(jvm.call_stub.code_begin + 0x100, "\x90\x90\x90\x90", 4);
  jvm.PutStack(sp, c.compiled_pc);
  r = Step(Regs(jvm.call_stub.code_begin + 0x100, sp, sp + (1 << 20)), true);
  ASSERT_EQ(r.outcome, StepOutcome::kStepped) << StepOutcomeName(r.outcome);
  EXPECT_EQ(r.caller.value[kRegSp], sp + 8);
}

INSTANTIATE_TEST_SUITE_P(Jdks, FrameStepTest, ::testing::Values(Jdk::k17, Jdk::k25),
                         [](const auto& info) {
                           return info.param == Jdk::k17 ? "Jdk17" : "Jdk25";
                         });

}  // namespace
}  // namespace ember::hotspot

namespace ember::hotspot {
namespace {

using step_test::FakeJvm;
using step_test::Jdk;
using step_test::Regs;

// Random stacks of words that look like code, stack addresses, or nothing: every step that
// succeeds moves sp up, so a walk ends by itself, and no step reads outside its inputs.
TEST(FrameStepRandomTest, EveryStepMovesSpUp) {
  for (Jdk jdk : {Jdk::k17, Jdk::k25}) {
    FakeJvm jvm(jdk);
    CodeCache cache(jvm.layout, jvm.ReadInfo());
    FrameStepper stepper(cache, jvm.memory);
    std::mt19937_64 random(jdk == Jdk::k17 ? 17 : 25);
    const uint64_t code[] = {jvm.interpreter.code_begin + 0x40,
                             jvm.nmethod.code_begin + 0x100,
                             jvm.nmethod.code_begin + 2,
                             jvm.wrapper.code_begin + 0x10,
                             jvm.vtable.code_begin,
                             jvm.runtime_stub.code_begin + 0x20,
                             jvm.call_stub_return,
                             jvm.call_stub.code_begin + 0x80,
                             jvm.nmethod.code_begin + FakeJvm::kDeoptHandler};
    auto pick = [&]() -> uint64_t {
      switch (random() % 5) {
        case 0:
          return code[random() % std::size(code)];
        case 1:
          return FakeJvm::kStack + (random() % (FakeJvm::kStackBytes + 64)) / 8 * 8;
        case 2:
          return 0;
        case 3:
          return random() % 256;
        default:
          return random();
      }
    };
    int stepped = 0;
    for (int sample = 0; sample < 500; ++sample) {
      for (uint64_t a = FakeJvm::kStack; a < FakeJvm::kStack + FakeJvm::kStackBytes; a += 8) {
        jvm.PutStack(a, pick());
      }
      FrameRegisters regs =
          Regs(code[random() % std::size(code)],
               FakeJvm::kStack + (random() % FakeJvm::kStackBytes) / 8 * 8, pick(), pick());
      StackMemory stack = jvm.Stack();
      bool leaf = true;
      for (int depth = 0; depth < 64; ++depth) {
        JavaStep result;
        stepper.Step(regs, leaf, stack, result);
        ASSERT_STRNE(StepOutcomeName(result.outcome), "unknown");
        if (result.outcome != StepOutcome::kStepped) break;
        ++stepped;
        ASSERT_TRUE(result.caller.Has(kRegIp) && result.caller.Has(kRegSp));
        ASSERT_GT(result.caller.value[kRegSp], regs.value[kRegSp]);
        regs = result.caller;
        leaf = false;
      }
    }
    // The random stacks are not all refused: the property is checked on real steps.
    EXPECT_GT(stepped, 100);
  }
}

}  // namespace
}  // namespace ember::hotspot
