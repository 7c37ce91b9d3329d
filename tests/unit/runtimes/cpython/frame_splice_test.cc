// SpliceStacks: Python groups replace native eval frames, for each version's entry pattern and
// for the races and truncations a sampler meets.
#include "runtimes/cpython/frame_splice.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ember::python {
namespace {

// "N3" for native frame 3, "P1" for Python frame 1, joined by spaces.
std::string Render(const std::vector<SplicedFrame>& frames) {
  std::string out;
  for (const SplicedFrame& f : frames) {
    if (!out.empty()) out += ' ';
    out += (f.kind == SplicedFrame::Kind::kNative ? "N" : "P") + std::to_string(f.index);
  }
  return out;
}

TEST(FrameSpliceTest, EveryFrameItsOwnEvalCall38) {
  // c_func, eval, PyObject_Call, eval, eval, main
  SpliceStats stats;
  auto out =
      SpliceStacks({false, true, false, true, true, false}, {true, true, true}, false, &stats);
  EXPECT_EQ(Render(out), "N0 P0 N2 P1 P2 N5");
  EXPECT_EQ(stats.eval_frames_left_native, 0u);
  EXPECT_EQ(stats.python_groups_unplaced, 0u);
}

TEST(FrameSpliceTest, InlinedCallsShareOneEvalFrame311) {
  // leaf C function, eval (3 Python frames), sorted (C), eval (2 Python frames), Py_RunMain
  SpliceStats stats;
  auto out = SpliceStacks({false, true, false, true, false}, {false, false, true, false, true},
                          false, &stats);
  EXPECT_EQ(Render(out), "N0 P0 P1 P2 N2 P3 P4 N4");
}

TEST(FrameSpliceTest, CallBeingSetUpAtTheLeaf) {
  // The walk already sees the new Python frame, the native stack has no eval frame for it yet.
  SpliceStats stats;
  auto out = SpliceStacks({false, true, false}, {true, true}, false, &stats);
  EXPECT_EQ(Render(out), "N0 P0 P1 N2");
  EXPECT_EQ(stats.python_groups_unplaced, 1u);
}

TEST(FrameSpliceTest, EvalFrameWithoutPythonFramesStaysNative) {
  SpliceStats stats;
  auto out = SpliceStacks({true, false, true, false}, {true}, false, &stats);
  EXPECT_EQ(Render(out), "N0 N1 P0 N3");
  EXPECT_EQ(stats.eval_frames_left_native, 1u);
}

TEST(FrameSpliceTest, TruncatedNativeStackPairsFromTheLeaf) {
  SpliceStats stats;
  auto out = SpliceStacks({true, false, true, false}, {true, true, true}, true, &stats);
  EXPECT_EQ(Render(out), "P0 N1 P1 N3 P2");
  EXPECT_EQ(stats.python_groups_unplaced, 1u);
}

TEST(FrameSpliceTest, NoPythonOrNoEvalFrames) {
  SpliceStats stats;
  EXPECT_EQ(Render(SpliceStacks({false, true, false}, {}, false, &stats)), "N0 N1 N2");
  EXPECT_EQ(stats.eval_frames_left_native, 1u);
  EXPECT_EQ(Render(SpliceStacks({false, false}, {false, true}, false, nullptr)), "N0 N1 P0 P1");
  EXPECT_EQ(Render(SpliceStacks({}, {}, false, nullptr)), "");
}

TEST(FrameSpliceTest, WalkCutBeforeAnEntryFrameIsOneGroup) {
  // The walk stopped (frame budget) inside the outermost call: its frames still form a group.
  auto out = SpliceStacks({true, false, true}, {true, false, false}, false, nullptr);
  EXPECT_EQ(Render(out), "P0 N1 P1 P2");
}

}  // namespace
}  // namespace ember::python
