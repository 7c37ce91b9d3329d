// The whole CPython walk over process memory the fuzzer writes (python_memory_image.h): thread
// lookup, the GIL holder, the raw frame walk, every frame's names, file and line table, and the
// agent's FrameNamer on the raw frames. Every value read is hostile: nothing may read out of
// bounds, loop past its budget or allocate by a size it read. The seeds are consistent fake
// interpreters (tests/unit/runtimes/cpython/fake_interpreter.h), one per layout, that walk to the
// end.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "python_memory_image.h"
#include "runtimes/cpython/frame_namer.h"
#include "runtimes/cpython/frame_walker.h"

namespace {

using namespace ember::python;

// Small budgets keep each input fast; the bounds are the same code at any size.
constexpr WalkLimits kLimits = {
    .max_threads = 16, .max_frames = 32, .max_string_bytes = 256, .max_line_table_bytes = 4096};

bool ValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

void CheckName(const std::string& s) {
  // At most max_string_bytes of character data, each byte of it at most 3 bytes of UTF-8 (a
  // high byte of an "ASCII" string becomes U+FFFD).
  if (s.size() > 3 * kLimits.max_string_bytes || !ValidUtf8(s)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzzing::ImageTarget target;
  fuzzing::MemoryImage memory;
  if (!fuzzing::ParseImage({data, size}, &target, &memory)) return 0;
  const bool verbose = std::getenv("EMBER_FUZZ_VERBOSE") != nullptr;

  uint64_t holder = 0;
  GilHolder(memory, target.config, &holder);
  uint64_t tstate = 0;
  WalkStatus found = FindThreadState(memory, target.config, target.thread, &tstate, kLimits);
  if (verbose) std::fprintf(stderr, "thread: %s\n", WalkStatusName(found));
  if (found != WalkStatus::kOk) return 0;

  std::vector<RawFrame> raw;
  WalkStatus walked = WalkRawFrames(memory, target.config, tstate, &raw, kLimits);
  if (raw.size() > kLimits.max_frames) __builtin_trap();
  std::vector<PythonFrame> frames;
  WalkStatus named = WalkFrames(memory, target.config, tstate, &frames, kLimits);
  if (frames.size() > raw.size()) __builtin_trap();
  for (const PythonFrame& frame : frames) {
    CheckName(frame.name);
    CheckName(frame.qualname);
    CheckName(frame.file);
  }
  if (verbose) {
    std::fprintf(stderr, "raw walk: %s, %zu frames; named: %s, %zu frames\n",
                 WalkStatusName(walked), raw.size(), WalkStatusName(named), frames.size());
    for (const PythonFrame& f : frames) {
      std::fprintf(stderr, "  %s (%s) %s:%d\n", f.qualname.c_str(), f.name.c_str(), f.file.c_str(),
                   f.line);
    }
  }

  // The agent's half, as it names the frames BPF recorded.
  PythonProcess process;
  process.outcome = DetectOutcome::kSupported;
  process.process.config = target.config;
  FrameNamer namer;
  for (const RawFrame& r : raw) {
    ember_python_frame recorded{.code = r.code_address,
                                .position = r.last_instruction,
                                .flags = r.entry ? EMBER_PYTHON_FRAME_ENTRY : 0u,
                                .reserved = 0};
    const ember::Frame* frame = namer.Name(1, process, recorded, memory);
    if (frame == nullptr) __builtin_trap();
    CheckName(frame->function);
    CheckName(frame->source_file);
  }
  return 0;
}
