// Replays the walk of a real JVM's main thread from recorded memory (tests/data/hotspot/*.fixture,
// made by record_jvm from ember.fixture.Phases under JDK 11 and 21 (scripts/setup.sh), Debian's
// JDK 17 and Temurin 25, no JVM flags): the VM structure tables resolved, the code cache read, the
// Java frames stepped from where the native walk entered the code cache to the call stub and named,
// and compared with the frames recorded live. Then the same memory with one thing changed: a
// compiled method's compile id, a segment map byte, a line table, a Method*'s ConstMethod. No JVM
// and no ELF file is needed: a read outside what was recorded fails, as it would in a process that
// lacks the memory.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "recorded_jvm_walk.h"
#include "runtimes/hotspot/code_cache.h"
#include "runtimes/hotspot/frame_step.h"
#include "runtimes/hotspot/method_namer.h"
#include "runtimes/hotspot/vm_structs.h"
#include "support/recorded_memory.h"
#include "support/thread_capture.h"

namespace ember::hotspot::testing {
namespace {

using ember::testing::RecordedMemory;

struct FixtureCase {
  const char* file;
  uint32_t major;
};

void PrintTo(const FixtureCase& fixture, std::ostream* out) { *out << fixture.file; }

class RecordedJvmTest : public ::testing::TestWithParam<FixtureCase> {
 protected:
  void SetUp() override {
    const std::string path = absl::StrCat(EMBER_HOTSPOT_DATA_DIR, "/", GetParam().file);
    absl::StatusOr<RecordedMemory> loaded = RecordedMemory::Load(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    memory_ = *std::move(loaded);
    absl::StatusOr<JvmProcess> jvm = LoadJvmProcess(memory_);
    ASSERT_TRUE(jvm.ok()) << jvm.status();
    jvm_ = *jvm;
    absl::StatusOr<ember::testing::ThreadCapture> capture = ember::testing::LoadCapture(memory_);
    ASSERT_TRUE(capture.ok()) << capture.status();
    ASSERT_EQ(capture->threads.size(), 1u);
    thread_ = capture->threads[0];
    ASSERT_TRUE(LoadEntry(memory_, &entry_, &entry_leaf_).ok());
    absl::StatusOr<std::vector<std::string>> expected = LoadExpected(memory_);
    ASSERT_TRUE(expected.ok()) << expected.status();
    expected_ = *expected;

    absl::StatusOr<VMTables> tables = ReadVMTables(memory_, jvm_);
    ASSERT_TRUE(tables.ok()) << tables.status();
    absl::StatusOr<HotSpotLayout> layout = ResolveLayout(*tables, jvm_.bias, memory_);
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = *layout;
    ASSERT_EQ(ReadCodeCacheInfo(layout_, jvm_.bias, memory_, &info_), CodeCacheStatus::kReady);
  }

  // The walk over the fixture's memory as it is now, with a cold cache and namer.
  JavaWalk Walk() {
    CodeCache cache(layout_, info_);
    FrameStepper stepper(cache, memory_);
    MethodNamer namer(layout_);
    return WalkJava(stepper, namer, layout_, memory_, entry_, entry_leaf_, Stack());
  }
  StackMemory Stack() const { return thread_.stack_memory(); }

  const WalkedFrame* FirstOf(const JavaWalk& walk, JavaFrameKind kind) const {
    for (const WalkedFrame& frame : walk.frames) {
      if (frame.stepped.kind == kind) return &frame;
    }
    return nullptr;
  }
  uint64_t Word(uint64_t address) {
    uint64_t word = 0;
    EXPECT_TRUE(memory_.Read(address, &word, sizeof(word))) << std::hex << address;
    return word;
  }

  RecordedMemory memory_;
  JvmProcess jvm_;
  ember::testing::CapturedThread thread_;
  FrameRegisters entry_;
  bool entry_leaf_ = false;
  std::vector<std::string> expected_;
  HotSpotLayout layout_;
  CodeCacheInfo info_;
};

TEST_P(RecordedJvmTest, TheRecordedFixtureHoldsTheFixturesNesting) {
  // What record_jvm wrote, checked against jcmd once, in the shape Phases.java guarantees: a
  // phase's methods, runPhase, runPhases, main, then the call stub back into the VM.
  const std::string all = absl::StrJoin(expected_, "\n");
  EXPECT_EQ(layout_.major, GetParam().major);
  EXPECT_TRUE(absl::StrContains(all, "ember.fixture.Phases.runPhase Phases.java:")) << all;
  EXPECT_TRUE(absl::StrContains(all, "ember.fixture.Phases.runPhases Phases.java:")) << all;
  EXPECT_TRUE(absl::StrContains(all, "interpreted ember.fixture.Phases.main Phases.java:")) << all;
  ASSERT_GE(expected_.size(), 2u);
  EXPECT_TRUE(absl::StartsWith(expected_[expected_.size() - 2], "call_stub [jvm] ")) << all;
  EXPECT_EQ(expected_.back(), "end stepped");
  const std::string* jcmd = memory_.Get("jcmd");
  ASSERT_NE(jcmd, nullptr);
  EXPECT_TRUE(absl::StrContains(*jcmd, "ember.fixture.Phases.main(Phases.java:"));
}

TEST_P(RecordedJvmTest, ReplayStepsAndNamesTheRecordedFrames) {
  const JavaWalk walk = Walk();
  EXPECT_EQ(walk.Lines(), expected_);
  EXPECT_EQ(walk.end, StepOutcome::kStepped);
  // Every frame between the entry and the call stub is Java code or a stub, each named.
  for (const WalkedFrame& frame : walk.frames) EXPECT_EQ(frame.status, NameStatus::kOk);
  EXPECT_NE(FirstOf(walk, JavaFrameKind::kCompiled), nullptr);
  EXPECT_NE(FirstOf(walk, JavaFrameKind::kInterpreted), nullptr);
}

TEST_P(RecordedJvmTest, AnotherCompileIdAtTheNmethodIsStale) {
  const JavaWalk walk = Walk();
  const WalkedFrame* compiled = FirstOf(walk, JavaFrameKind::kCompiled);
  ASSERT_NE(compiled, nullptr);
  ASSERT_TRUE(layout_.nmethod_compile_id.present());
  const uint64_t at = compiled->stepped.object + layout_.nmethod_compile_id.offset;
  int32_t id = 0;
  ASSERT_TRUE(memory_.Read(at, &id, sizeof(id)));
  ASSERT_EQ(id, compiled->stepped.compile_id);
  const int32_t other = id + 1;  // the blob freed and another method compiled there
  ASSERT_TRUE(memory_.Overwrite(at, &other, sizeof(other)));
  MethodNamer namer(layout_);
  std::vector<JavaFrame> frames;
  EXPECT_EQ(namer.NameCompiled(memory_, compiled->stepped.object, compiled->stepped.compile_id,
                               static_cast<int32_t>(compiled->stepped.position),
                               compiled->leaf ? PcMatch::kAtOrAfter : PcMatch::kExact, &frames),
            NameStatus::kStale);
  EXPECT_EQ(namer.stats().nmethods_stale, 1u);
}

TEST_P(RecordedJvmTest, AFreeSegmentHoldsNoBlob) {
  const JavaWalk walk = Walk();
  const WalkedFrame* compiled = FirstOf(walk, JavaFrameKind::kCompiled);
  ASSERT_NE(compiled, nullptr);
  const uint64_t pc = compiled->registers.value[kRegIp];
  const CodeHeapRange* heap = info_.HeapOf(pc);
  ASSERT_NE(heap, nullptr);
  const uint64_t segment = heap->segmap_low + ((pc - heap->low) >> heap->log2_segment_size);
  const uint8_t free_segment = 0xFF;
  ASSERT_TRUE(memory_.Overwrite(segment, &free_segment, 1));
  CodeCache cache(layout_, info_);
  FrameStepper stepper(cache, memory_);
  JavaStep step;
  stepper.Step(compiled->registers, compiled->leaf, Stack(), step);
  EXPECT_EQ(step.outcome, StepOutcome::kNoBlob);
  EXPECT_EQ(step.lookup, BlobLookup::kFreeSegment);
}

// main is interpreted in every fixture (called once, it never loops).
TEST_P(RecordedJvmTest, AnEmptiedLineTableStillNamesTheMethod) {
  const JavaWalk walk = Walk();
  const WalkedFrame* interpreted = FirstOf(walk, JavaFrameKind::kInterpreted);
  ASSERT_NE(interpreted, nullptr);
  const uint64_t method = interpreted->stepped.object;
  MethodNamer namer(layout_);
  const MethodInfo* info = namer.NameMethod(memory_, method);
  ASSERT_NE(info, nullptr);
  ASSERT_FALSE(info->line_table.empty());
  const uint64_t const_method = Word(method + layout_.method_const_method.offset);
  ASSERT_EQ(const_method, info->const_method);
  const uint64_t table = const_method + layout_.const_method_size + info->code_size;
  const uint8_t end_of_table = 0;
  ASSERT_TRUE(memory_.Overwrite(table, &end_of_table, 1));

  MethodNamer cold(layout_);
  JavaFrame frame;
  ASSERT_EQ(cold.NameInterpreted(memory_, method, interpreted->stepped.position, &frame),
            NameStatus::kOk);
  EXPECT_EQ(frame.method->function, info->function);
  EXPECT_EQ(frame.method->source_file, "Phases.java");
  EXPECT_GE(frame.bci, 0);
  EXPECT_EQ(frame.line, 0u);
}

TEST_P(RecordedJvmTest, AMethodWhoseConstMethodChangedIsRenamedAndSampledCookiesGoStale) {
  const JavaWalk walk = Walk();
  // Two Method*s: the interpreted frame's and the first compiled frame's own.
  const WalkedFrame* interpreted = FirstOf(walk, JavaFrameKind::kInterpreted);
  const WalkedFrame* compiled = FirstOf(walk, JavaFrameKind::kCompiled);
  ASSERT_NE(interpreted, nullptr);
  ASSERT_NE(compiled, nullptr);
  const uint64_t method = interpreted->stepped.object;
  const uint64_t other = Word(compiled->stepped.object + layout_.nmethod_method.offset);
  ASSERT_NE(method, other);
  MethodNamer namer(layout_);
  const MethodInfo* before = namer.NameMethod(memory_, method);
  ASSERT_NE(before, nullptr);
  const std::string old_name = before->function;
  const uint32_t cookie = ConstMethodCookie(before->const_method);
  const MethodInfo* other_info = namer.NameMethod(memory_, other);
  ASSERT_NE(other_info, nullptr);
  const std::string other_name = other_info->function;
  ASSERT_NE(old_name, other_name);
  // The class redefined (or unloaded and the Method* reused): the slot names another ConstMethod.
  const uint64_t other_const_method = other_info->const_method;
  ASSERT_TRUE(memory_.Overwrite(method + layout_.method_const_method.offset, &other_const_method,
                                sizeof(other_const_method)));
  namer.NextGeneration();
  NameStatus status = NameStatus::kOk;
  const MethodInfo* after = namer.NameMethod(memory_, method, &status);
  ASSERT_NE(after, nullptr) << static_cast<int>(status);
  EXPECT_EQ(after->function, other_name);
  EXPECT_EQ(namer.stats().methods_renamed, 1u);
  // A sample that saw the old ConstMethod is not named after the new one.
  EXPECT_EQ(namer.NameMethod(memory_, method, &status, cookie), nullptr);
  EXPECT_EQ(status, NameStatus::kStale);
}

INSTANTIATE_TEST_SUITE_P(Jdks, RecordedJvmTest,
                         ::testing::Values(FixtureCase{"jdk11.fixture", 11},
                                           FixtureCase{"jdk17.fixture", 17},
                                           FixtureCase{"jdk21.fixture", 21},
                                           FixtureCase{"jdk25.fixture", 25}));

}  // namespace
}  // namespace ember::hotspot::testing
