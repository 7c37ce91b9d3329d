// Every value the walker reads from another process is hostile (sizes, counts, kinds, pointers,
// chains): each is checked against a bound before any arithmetic, refused as kImplausible and
// never followed. A consistent fake interpreter per layout, with one value broken at a time; and
// the fuzz target's seeds (fuzz/corpus/python_walk_fuzz), which must walk to the end.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "fake_interpreter.h"
#include "runtimes/cpython/frame_namer.h"
#include "runtimes/cpython/frame_walker.h"

namespace ember::python::fake {
namespace {

using F = FakeInterpreter;

WalkStatus Walk(FakeInterpreter& fake, std::vector<PythonFrame>* frames,
                const WalkLimits& limits = {}) {
  uint64_t tstate = 0;
  WalkStatus found =
      FindThreadState(fake.memory, fake.target.config, fake.target.thread, &tstate, limits);
  if (found != WalkStatus::kOk) return found;
  return WalkFrames(fake.memory, fake.target.config, tstate, frames, limits);
}

class EveryLayout : public ::testing::TestWithParam<uint8_t> {};

TEST_P(EveryLayout, TheFakeInterpreterWalksToTheEnd) {
  FakeInterpreter fake(GetParam());
  std::vector<PythonFrame> frames;
  ASSERT_EQ(Walk(fake, &frames), WalkStatus::kOk);
  ASSERT_EQ(frames.size(), 2u);
  const bool qualnames = fake.layout().code_qualname != kNoOffset;
  EXPECT_EQ(frames[0].name, "inner");
  EXPECT_EQ(frames[0].qualname, qualnames ? "Outer.λ" : "inner");
  EXPECT_EQ(frames[0].file, "/😀.py");
  EXPECT_EQ(frames[0].line, F::kInnerFirstLine + 3);
  EXPECT_EQ(frames[1].name, "<module>");
  EXPECT_EQ(frames[1].line, F::kOuterFirstLine + 1);
}

// The crash this guards: kind 4 and 2^62 + 1 code points make `length * kind` wrap to 4, and a
// loop over `length` characters ran past a 4-byte buffer.
TEST_P(EveryLayout, AKind4StringOfLength2To62Plus1IsRefused) {
  FakeInterpreter fake(GetParam());
  const CPythonLayout& l = fake.layout();
  fake.PutString(F::kInnerName, {0x1f600}, 4, false);
  fake.Set<int64_t>(F::kInnerName + l.unicode_length, (int64_t{1} << 62) + 1);
  std::string out = "stale";
  EXPECT_EQ(ReadPythonString(fake.memory, l, F::kInnerName, 256, &out), WalkStatus::kImplausible);
  EXPECT_EQ(out, "");
  std::vector<PythonFrame> frames;
  EXPECT_EQ(Walk(fake, &frames), WalkStatus::kImplausible);
  EXPECT_TRUE(frames.empty());  // the innermost frame's name: nothing usable before it
}

TEST_P(EveryLayout, NegativeAndHugeLengthsOfEveryKindAreRefused) {
  FakeInterpreter fake(GetParam());
  const CPythonLayout& l = fake.layout();
  struct Kind {
    uint32_t kind;
    bool ascii;
  };
  for (Kind k : {Kind{1, true}, Kind{1, false}, Kind{2, false}, Kind{4, false}}) {
    for (int64_t length :
         {int64_t{-1}, INT64_MIN, int64_t{1} << 62, (int64_t{1} << 62) + 1, int64_t{1} << 61,
          INT64_MAX, static_cast<int64_t>(kMaxUserAddress / k.kind) + 1,
          static_cast<int64_t>(kMaxUserAddress)}) {
      fake.PutString(F::kInnerName, {'a', 'b', 'c', 'd'}, k.kind, k.ascii);
      fake.Set<int64_t>(F::kInnerName + l.unicode_length, length);
      std::string out;
      EXPECT_EQ(ReadPythonString(fake.memory, l, F::kInnerName, 256, &out),
                WalkStatus::kImplausible)
          << "kind " << k.kind << " ascii " << k.ascii << " length " << length;
      EXPECT_EQ(out, "");
    }
    // A long string that could exist is cut to the budget, reading no more than that.
    fake.PutString(F::kInnerName, std::vector<uint32_t>(1000, 'x'), k.kind, k.ascii);
    std::string out;
    ASSERT_EQ(ReadPythonString(fake.memory, l, F::kInnerName, 64, &out), WalkStatus::kOk);
    EXPECT_EQ(out, std::string(64 / k.kind, 'x'));
  }
}

// A str freed and its memory reused while it is read: each read sees another object. The kind of
// one must never meet the length of the other (4 bytes a character and 2^62 + 1 of them).
class Racing : public MemoryReader {
 public:
  Racing(MemoryImage& a, MemoryImage& b) : a_(a), b_(b) {}
  bool Read(uint64_t address, void* out, size_t size) override {
    return (reads_++ % 2 == 0 ? a_ : b_).Read(address, out, size);
  }

 private:
  MemoryImage& a_;
  MemoryImage& b_;
  size_t reads_ = 0;
};

TEST_P(EveryLayout, ARacyReadNeverPairsOneObjectsKindWithAnothersLength) {
  FakeInterpreter before(GetParam()), after(GetParam());
  const CPythonLayout& l = before.layout();
  before.PutString(F::kInnerName, {0x1f600}, 4, false);
  after.PutString(F::kInnerName, std::vector<uint32_t>(300, 'a'), 1, true);
  after.Set<int64_t>(F::kInnerName + l.unicode_length, (int64_t{1} << 62) + 1);
  for (int first = 0; first < 2; ++first) {
    Racing racing(first == 0 ? before.memory : after.memory,
                  first == 0 ? after.memory : before.memory);
    std::string out;
    const WalkStatus status = ReadPythonString(racing, l, F::kInnerName, 256, &out);
    EXPECT_TRUE(status == WalkStatus::kOk || status == WalkStatus::kImplausible);
    EXPECT_LE(out.size(), 256u * 3);
  }
}

TEST_P(EveryLayout, KindsAndStatesNoStrHasAreRefused) {
  FakeInterpreter fake(GetParam());
  const CPythonLayout& l = fake.layout();
  for (uint32_t kind : {0u, 3u, 5u, 6u, 7u}) {
    fake.PutString(F::kInnerName, {'a'}, 1, false);
    fake.Set<uint32_t>(F::kInnerName + l.unicode_state,
                       (kind << kUnicodeKindShift) | kUnicodeCompactBit);
    std::string out;
    EXPECT_EQ(ReadPythonString(fake.memory, l, F::kInnerName, 256, &out), WalkStatus::kImplausible)
        << kind;
  }
  // "ASCII" with 2 or 4 bytes per character.
  for (uint32_t kind : {2u, 4u}) {
    fake.PutString(F::kInnerName, {'a', 'b'}, kind, false);
    fake.Set<uint32_t>(F::kInnerName + l.unicode_state,
                       (kind << kUnicodeKindShift) | kUnicodeCompactBit | kUnicodeAsciiBit);
    std::string out;
    EXPECT_EQ(ReadPythonString(fake.memory, l, F::kInnerName, 256, &out), WalkStatus::kImplausible)
        << kind;
  }
  // An "ASCII" string with high bytes still comes out as valid UTF-8.
  fake.PutString(F::kInnerName, {'a', 0xff}, 1, true);
  std::string out;
  ASSERT_EQ(ReadPythonString(fake.memory, l, F::kInnerName, 256, &out), WalkStatus::kOk);
  EXPECT_EQ(out, "a\xef\xbf\xbd");
}

TEST_P(EveryLayout, HugeLineTableSizesAreRefusedAndTheFrameKeepsItsNames) {
  FakeInterpreter fake(GetParam());
  const CPythonLayout& l = fake.layout();
  for (int64_t size : {int64_t{-1}, INT64_MIN, INT64_MAX, int64_t{1} << 62,
                       static_cast<int64_t>(kMaxUserAddress)}) {
    fake.Set<int64_t>(F::kInnerTable + l.var_size, size);
    std::vector<PythonFrame> frames;
    EXPECT_EQ(Walk(fake, &frames), WalkStatus::kImplausible) << size;
    PythonFrame frame;
    std::vector<RawFrame> raw;
    uint64_t tstate = 0;
    ASSERT_EQ(FindThreadState(fake.memory, fake.target.config, fake.target.thread, &tstate),
              WalkStatus::kOk);
    ASSERT_EQ(WalkRawFrames(fake.memory, fake.target.config, tstate, &raw), WalkStatus::kOk);
    ASSERT_EQ(ResolveFrame(fake.memory, fake.target.config, raw[0], &frame),
              WalkStatus::kImplausible);
    EXPECT_EQ(frame.name, "inner");
    EXPECT_EQ(frame.file, "/😀.py");
    EXPECT_EQ(frame.line, -1);
  }
  // A size a real table could have, over the budget: the line is unknown, nothing is refused.
  fake.Set<int64_t>(F::kInnerTable + l.var_size, 1 << 20);
  std::vector<PythonFrame> frames;
  ASSERT_EQ(Walk(fake, &frames, {.max_line_table_bytes = 1 << 16}), WalkStatus::kOk);
  EXPECT_EQ(frames[0].line, -1);
}

TEST_P(EveryLayout, AFrameChainThatLoopsIsRefused) {
  for (int shape = 0; shape < 3; ++shape) {
    FakeInterpreter fake(GetParam());
    const CPythonLayout& l = fake.layout();
    if (shape == 0) {
      fake.Set<uint64_t>(F::kOuterFrame + l.frame_previous, F::kOuterFrame);  // onto itself
    } else if (shape == 1) {
      fake.Set<uint64_t>(F::kOuterFrame + l.frame_previous, F::kInnerFrame);  // back to the leaf
    } else {
      // A longer loop: four more frames after the outer one, the last back to the outer one.
      uint64_t at = F::kOuterFrame;
      for (uint64_t next = 0x42000; next <= 0x45000; next += 0x1000) {
        fake.memory.Put(next, fake.memory.regions().at(F::kOuterFrame));
        fake.Set<uint64_t>(at + l.frame_previous, next);
        at = next;
      }
      fake.Set<uint64_t>(at + l.frame_previous, F::kOuterFrame);
    }
    std::vector<PythonFrame> frames;
    // A budget far above the loop's length: the loop is what ends the walk, not the budget.
    EXPECT_EQ(Walk(fake, &frames, {.max_frames = 1000}), WalkStatus::kImplausible) << shape;
    EXPECT_LT(frames.size(), 20u);
  }
}

TEST_P(EveryLayout, AThreadListThatLoopsIsRefused) {
  FakeInterpreter fake(GetParam());
  const CPythonLayout& l = fake.layout();
  // Two thread states pointing at each other, neither the sampled thread.
  fake.Set<uint64_t>(F::kTstate + l.tstate_thread_id, 1);
  fake.memory.Put(0x31000, fake.memory.regions().at(F::kTstate));
  fake.Set<uint64_t>(F::kTstate + l.tstate_next, 0x31000);
  fake.Set<uint64_t>(0x31000 + l.tstate_next, F::kTstate);
  uint64_t tstate = 0;
  EXPECT_EQ(FindThreadState(fake.memory, fake.target.config, fake.target.thread, &tstate,
                            {.max_threads = 1000}),
            WalkStatus::kImplausible);
  // The sampled thread behind a loop is not reachable either; one before it is found.
  fake.Set<uint64_t>(0x31000 + l.tstate_thread_id, F::kThreadId);
  EXPECT_EQ(FindThreadState(fake.memory, fake.target.config, fake.target.thread, &tstate),
            WalkStatus::kOk);
  EXPECT_EQ(tstate, 0x31000u);
}

// Each pointer of the walk, in turn: above user space (kernel addresses, and values whose sum with
// an offset wraps around to readable low memory) is refused; user space that is not mapped is a
// read failure; neither is ever followed.
TEST_P(EveryLayout, PointersOutOfUserSpaceAreRefusedAndUnmappedOnesFail) {
  const std::vector<std::pair<std::string, std::function<uint64_t(const CPythonLayout&)>>> fields =
      {
          {"interpreters.head",
           [](const auto& l) { return F::kRuntime + l.runtime_interpreters_head; }},
          {"threads.head", [](const auto& l) { return F::kInterp + l.interp_threads_head; }},
          {"frame", [](const auto& l) { return F::kTstate + l.tstate_frame; }},
          {"previous", [](const auto& l) { return F::kInnerFrame + l.frame_previous; }},
          {"code", [](const auto& l) { return F::kInnerFrame + l.frame_code; }},
          {"name", [](const auto& l) { return F::kInnerCode + l.code_name; }},
          {"filename", [](const auto& l) { return F::kInnerCode + l.code_filename; }},
          {"linetable", [](const auto& l) { return F::kInnerCode + l.code_linetable; }},
      };
  for (const auto& [what, where] : fields) {
    for (uint64_t pointer : {uint64_t{0xffff888000000000}, ~uint64_t{0} - 7, kMaxUserAddress + 1,
                             uint64_t{0x7fff00000000}}) {
      FakeInterpreter fake(GetParam());
      // Readable bytes at the bottom of the address space: a wrapped sum would land there.
      fake.memory.Put(0, std::vector<uint8_t>(0x1000, 0x41));
      fake.Set<uint64_t>(where(fake.layout()), pointer);
      std::vector<PythonFrame> frames;
      const WalkStatus expected =
          pointer <= kMaxUserAddress ? WalkStatus::kReadFailed : WalkStatus::kImplausible;
      WalkStatus status = Walk(fake, &frames);
      if (what == "linetable" && pointer <= kMaxUserAddress) {
        // The line is best effort: an unreadable table leaves it unknown.
        EXPECT_EQ(status, WalkStatus::kOk);
        EXPECT_EQ(frames.at(0).line, -1);
      } else {
        EXPECT_EQ(status, expected) << what << " = " << std::hex << pointer;
      }
    }
  }
  // A code address recorded by BPF: refused before an offset is added to it.
  FakeInterpreter fake(GetParam());
  fake.memory.Put(0, std::vector<uint8_t>(0x1000, 0x41));
  PythonFrame frame;
  EXPECT_EQ(
      ResolveFrame(fake.memory, fake.target.config, {.code_address = ~uint64_t{0} - 15}, &frame),
      WalkStatus::kImplausible);
  EXPECT_EQ(frame.name, "");
}

TEST(HostileMemoryTest, AnInstructionIndexNoCodeReachesIsRefused) {
  FakeInterpreter fake(2);  // 3.10: f_lasti counts 2-byte units
  ASSERT_EQ(fake.layout().last_instruction, LastInstruction::kInstructionIndex);
  fake.Set<int32_t>(F::kInnerFrame + fake.layout().frame_last_instruction, INT32_MAX);
  std::vector<PythonFrame> frames;
  EXPECT_EQ(Walk(fake, &frames), WalkStatus::kImplausible);
}

// The agent's half: a refused name or qualname is counted, the frame keeps what passed.
TEST(HostileMemoryTest, FrameNamerCountsRefusedCodeObjects) {
  FakeInterpreter fake(3);  // 3.11, Debian's
  const CPythonLayout& l = fake.layout();
  PythonProcess process;
  process.outcome = DetectOutcome::kSupported;
  process.interpreter = "/usr/bin/python3.11";
  process.process.config = fake.target.config;
  auto raw_of = [&](uint64_t frame) {
    ember_python_frame raw{};
    std::memcpy(&raw.code, &fake.memory.regions().at(frame)[l.frame_code], 8);
    std::memcpy(&raw.position, &fake.memory.regions().at(frame)[l.frame_last_instruction], 8);
    return raw;
  };
  // The qualname claims 2^62 + 1 four-byte characters: the name stands in.
  fake.PutString(F::kQualname, {0x1f600}, 4, false);
  fake.Set<int64_t>(F::kQualname + l.unicode_length, (int64_t{1} << 62) + 1);
  // <module>'s own name does too: nothing to show but the placeholder.
  fake.PutString(F::kOuterName, {0x1f600}, 4, false);
  fake.Set<int64_t>(F::kOuterName + l.unicode_length, (int64_t{1} << 62) + 1);
  FrameNamer namer;
  const Frame* inner = namer.Name(1, process, raw_of(F::kInnerFrame), fake.memory);
  EXPECT_EQ(inner->function, "inner");
  EXPECT_EQ(inner->source_file, "");
  const Frame* outer = namer.Name(1, process, raw_of(F::kOuterFrame), fake.memory);
  EXPECT_EQ(outer->function, "[python]");
  EXPECT_EQ(namer.stats().implausible, 2u);
  EXPECT_EQ(namer.stats().named, 0u);
  EXPECT_EQ(namer.stats().unreadable, 0u);
  // A code address no process has, straight from a BPF record.
  ember_python_frame wild{.code = ~uint64_t{0} - 100, .position = 0, .flags = 0, .reserved = 0};
  EXPECT_EQ(namer.Name(1, process, wild, fake.memory)->function, "[python]");
  // Refused verdicts hold while the code object's identity does: counted once, not per use.
  namer.NextGeneration();
  namer.Name(1, process, raw_of(F::kOuterFrame), fake.memory);
  EXPECT_EQ(namer.stats().implausible, 2u);
}

INSTANTIATE_TEST_SUITE_P(Layouts, EveryLayout, ::testing::Range<uint8_t>(0, 6),
                         [](const auto& info) {
                           const CPythonLayout& l = AllLayouts()[info.param];
                           return "Python3" + std::to_string(l.minor);
                         });

// The fuzz target starts from its seeds: each must be a fake interpreter that walks to the end,
// so the fuzzer's mutations start deep in the walk; and, for 3.11, the name that crashed the walk
// (refused). EMBER_WRITE_PYTHON_WALK_SEEDS=DIR writes them.
TEST(HostileMemoryTest, FuzzSeedsWalkToTheEnd) {
  if (const char* dir = std::getenv("EMBER_WRITE_PYTHON_WALK_SEEDS")) {
    for (uint8_t i = 0; i < AllLayouts().size(); ++i) {
      FakeInterpreter fake(i);
      for (uint8_t flags : {uint8_t{0}, fuzzing::kMatchNativeTid}) {
        if (flags != 0 && fake.layout().tstate_native_thread_id == kNoOffset) continue;
        fake.target.flags = flags;
        std::ofstream(std::string(dir) + "/3." + std::to_string(fake.layout().minor) +
                      (flags != 0 ? "_native_tid" : "_pthread_id"))
            << fuzzing::WriteImage(fake.target, fake.memory);
      }
      if (fake.layout().minor == 11) {
        fake.PutString(F::kInnerName, {0x1f600}, 4, false);
        fake.Set<int64_t>(F::kInnerName + fake.layout().unicode_length, (int64_t{1} << 62) + 1);
        std::ofstream(std::string(dir) + "/3.11_hostile_name")
            << fuzzing::WriteImage(fake.target, fake.memory);
      }
    }
  }
  const std::filesystem::path seeds = EMBER_PYTHON_WALK_SEEDS;
  size_t count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(seeds)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string bytes = buffer.str();
    fuzzing::ImageTarget target;
    fuzzing::MemoryImage memory;
    ASSERT_TRUE(fuzzing::ParseImage({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()},
                                    &target, &memory))
        << entry.path();
    uint64_t tstate = 0;
    ASSERT_EQ(FindThreadState(memory, target.config, target.thread, &tstate), WalkStatus::kOk)
        << entry.path();
    std::vector<PythonFrame> frames;
    if (entry.path().filename() == "3.11_hostile_name") {
      EXPECT_EQ(WalkFrames(memory, target.config, tstate, &frames), WalkStatus::kImplausible);
      continue;
    }
    ASSERT_EQ(WalkFrames(memory, target.config, tstate, &frames), WalkStatus::kOk) << entry.path();
    ASSERT_EQ(frames.size(), 2u) << entry.path();
    EXPECT_EQ(frames[0].line, F::kInnerFirstLine + 3) << entry.path();
    ++count;
  }
  EXPECT_GE(count, AllLayouts().size());  // with the native-tid variants
}

}  // namespace
}  // namespace ember::python::fake
