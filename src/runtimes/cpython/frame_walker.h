// The CPython frame walk in user space, over a MemoryReader: thread state -> innermost frame ->
// code objects -> names, file and line. It is the model of the BPF walker (docs/cpython.md):
// same reads, same order, same bounds, so the offsets are proven here against live processes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtimes/cpython/cpython_layout.h"
#include "runtimes/process_memory.h"

namespace ember::python {

// Per-frame and per-walk results: small enums, no strings, as on the sample path.
enum class WalkStatus : uint8_t {
  kOk = 0,
  kNoThreadState = 1,  // the thread runs no Python (or is not in the interpreter's list)
  kReadFailed = 2,     // an address could not be read (process gone, or inconsistent state)
  kNotCode = 3,        // a frame's code is not a code object: wrong layout or torn state
  kTruncated = 4,      // more frames than the walk may visit
  // A size, count, kind or pointer read from the process is out of its bounds, or a chain loops:
  // corrupt or hostile memory, refused before any arithmetic with it. Only the user-space half
  // returns it (the BPF walk reads no sizes and is bounded by its loop).
  kImplausible = 5,
};
const char* WalkStatusName(WalkStatus status);

// What the BPF program gets per process: the layout and two process addresses.
struct WalkerConfig {
  CPythonLayout layout;
  uint64_t runtime_address = 0;    // &_PyRuntime in the process
  uint64_t code_type_address = 0;  // &PyCode_Type in the process; 0: do not check
};

// How a sampled thread is matched to its PyThreadState.
struct ThreadIdentity {
  uint64_t pthread_id = 0;  // pthread_self(), which on x86-64 is the thread's fs base; 0: unused
  uint32_t native_tid = 0;  // tid in the process's pid namespace (3.11+ only); 0: unused
};

struct PythonFrame {
  uint64_t code_address = 0;
  std::string name;      // co_name
  std::string qualname;  // co_qualname (3.11+), else co_name
  std::string file;      // co_filename
  int first_line = -1;   // co_firstlineno
  int line = -1;         // the line being executed, -1 when unknown
  // This frame is the outermost Python frame run by one native _PyEval_EvalFrameDefault call:
  // native eval frames and Python frames pair up at these boundaries (docs/cpython.md). Every
  // frame in 3.8-3.10; in 3.11 the frames with is_entry; in 3.12+ the frames below a shim frame.
  bool entry = false;
};

// The highest user-space address on x86-64 (five-level paging; four-level ends at 2^47). Every
// pointer read from the process is checked against it, so adding a layout offset (< 2^32) to one
// never wraps.
inline constexpr uint64_t kMaxUserAddress = (uint64_t{1} << 56) - 1;

struct WalkLimits {
  size_t max_threads = 64;  // thread states visited per interpreter when matching a thread
  size_t max_frames = 128;  // frame records visited (shim frames count)
  size_t max_string_bytes = 256;
  size_t max_line_table_bytes = 64 * 1024;
};

// Finds the thread state of `thread` among the main interpreter's threads, matching thread_id
// to pthread_id, or native_thread_id to native_tid. kNoThreadState when none matches;
// kImplausible for a pointer out of bounds or a thread list that loops.
WalkStatus FindThreadState(MemoryReader& memory, const WalkerConfig& config, ThreadIdentity thread,
                           uint64_t* tstate, const WalkLimits& limits = {});

// The thread state holding the GIL (gilstate.tstate_current, 3.8-3.11; kNoThreadState from 3.12,
// and when no thread holds it).
WalkStatus GilHolder(MemoryReader& memory, const WalkerConfig& config, uint64_t* tstate);

// What the BPF program records per Python frame: no strings, two reads per frame (docs/cpython.md).
struct RawFrame {
  uint64_t code_address = 0;
  // f_lasti (3.8-3.10, sign-extended) or the prev_instr/instr_ptr pointer (3.11+), as read.
  uint64_t last_instruction = 0;
  bool entry = false;  // as PythonFrame::entry
};

// The BPF half: walks from the innermost frame of `tstate` outwards, appending code object
// addresses and positions to `frames` (leaf first). Shim frames are skipped. A chain that loops
// is kImplausible (frames so far kept).
WalkStatus WalkRawFrames(MemoryReader& memory, const WalkerConfig& config, uint64_t tstate,
                         std::vector<RawFrame>* frames, const WalkLimits& limits = {});

// The agent half: the names, file and line of one raw frame, read from the code object. kOk when
// all of them were read; kReadFailed (nothing usable) when the code object or its name or file
// could not be read; kImplausible when a value read failed its bounds check: the fields read
// before it are filled (`name` empty when the name itself was refused) and nothing was read
// beyond it. A line table over limits.max_line_table_bytes only leaves the line unknown.
WalkStatus ResolveFrame(MemoryReader& memory, const WalkerConfig& config, const RawFrame& raw,
                        PythonFrame* frame, const WalkLimits& limits = {});

// Both halves: walks from the innermost frame of `tstate` outwards, appending to `frames` (leaf
// first). On an error the frames read so far stay in `frames`.
WalkStatus WalkFrames(MemoryReader& memory, const WalkerConfig& config, uint64_t tstate,
                      std::vector<PythonFrame>* frames, const WalkLimits& limits = {});

// Reads a compact str object (every identifier and file name is one) as UTF-8, at most
// `max_bytes` of character data (a longer string is cut there). kReadFailed for unreadable
// memory, a null pointer and non-compact (legacy) strings; kImplausible for a pointer, kind,
// state or length no live str can have (a negative length, or one whose data would not fit in
// user space).
WalkStatus ReadPythonString(MemoryReader& memory, const CPythonLayout& layout, uint64_t address,
                            size_t max_bytes, std::string* out);

}  // namespace ember::python
