// The Java part of one recorded stack, walked and named the same way live (by record_jvm, over a
// stopped JVM) and in replay (recorded_jvm_test, over RecordedMemory): from the registers where
// the native walk entered the code cache, frame by frame, up to and including the call stub.
// A fixture file keeps what was read and the lines this walk wrote; replay must write them again.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtimes/hotspot/code_cache.h"
#include "runtimes/hotspot/frame_step.h"
#include "runtimes/hotspot/hotspot_layout.h"
#include "runtimes/hotspot/jvm_detect.h"
#include "runtimes/hotspot/method_namer.h"
#include "runtimes/process_memory.h"
#include "support/recorded_memory.h"
#include "unwind/frame_registers.h"

namespace ember::hotspot::testing {

using ember::testing::RecordedMemory;

// At most this many frames are stepped: a fixture's stack is a few dozen deep.
inline constexpr int kMaxRecordedJavaFrames = 64;

struct WalkedFrame {
  SteppedFrame stepped;
  FrameRegisters registers;  // the frame's own, as the step was given them
  bool leaf = false;
  // One line per Java frame it names (inlined methods first) or one for a stub or a failure:
  // "KIND FUNCTION FILE:LINE bci=N" (KIND "inlined" for the methods a compiled frame inlined),
  // "KIND [jvm] BLOB NAME", "KIND unnamed STATUS".
  std::vector<std::string> lines;
  NameStatus status = NameStatus::kOk;
};

struct JavaWalk {
  std::vector<WalkedFrame> frames;
  StepOutcome end = StepOutcome::kStepped;  // kStepped: the call stub was reached
  std::vector<std::string> Lines() const;   // every frame's lines, then "end OUTCOME"
};

// Steps from `entry` (`leaf`: its pc is the interrupted instruction) until the call stub, a step
// that fails, or kMaxRecordedJavaFrames; names each frame with `namer` through `memory`.
JavaWalk WalkJava(FrameStepper& stepper, MethodNamer& namer, const HotSpotLayout& layout,
                  MemoryReader& memory, const FrameRegisters& entry, bool leaf,
                  const StackMemory& stack);

// The values a fixture keeps besides memory and the capture.
void StoreSymbols(const VMStructsSymbols& symbols, uint64_t bias, RecordedMemory& memory);
absl::StatusOr<JvmProcess> LoadJvmProcess(const RecordedMemory& memory);
void StoreEntry(const FrameRegisters& entry, bool leaf, RecordedMemory& memory);
absl::Status LoadEntry(const RecordedMemory& memory, FrameRegisters* entry, bool* leaf);
void StoreExpected(const std::vector<std::string>& lines, RecordedMemory& memory);
absl::StatusOr<std::vector<std::string>> LoadExpected(const RecordedMemory& memory);

}  // namespace ember::hotspot::testing
