// Where CPython 3.8-3.13 (x86-64, default GIL build) keeps the state a sampling profiler reads:
// the thread states, the frame chain, code objects and their name strings. Plain data, so the
// agent can copy it into a BPF map and the user-space walker (frame_walker.h) can follow it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace ember::python {

// Offsets that do not exist in a version.
inline constexpr uint32_t kNoOffset = 0xffffffff;

// How a frame records its position in the bytecode.
enum class LastInstruction : uint8_t {
  kByteOffset = 1,        // 3.8-3.9: int f_lasti, a byte offset into co_code (-1 before start)
  kInstructionIndex = 2,  // 3.10: int f_lasti, an index of 2-byte code units (-1 before start)
  kPrevInstrPointer = 3,  // 3.11-3.12: _Py_CODEUNIT* prev_instr, the unit being executed
  kInstrPointer = 4,      // 3.13: _Py_CODEUNIT* instr_ptr, the unit being executed
};

// Encoding of the code object's line table (see line_table.h).
enum class LineTableFormat : uint8_t {
  kLnotab = 1,         // 3.8-3.9 co_lnotab
  kLineTable310 = 2,   // 3.10 co_linetable
  kLocationTable = 3,  // 3.11+ co_linetable (PEP 657 location table)
};

// One CPython minor version's layout. Every offset is in bytes from the start of the struct named
// in the field's comment; kNoOffset where the version has no such field.
struct CPythonLayout {
  uint8_t major = 0;
  uint8_t minor = 0;
  // True when every offset below was checked against the DWARF of a real build (see
  // cpython_layout.cc for which build).
  bool verified = false;

  // _PyRuntimeState (the `_PyRuntime` global).
  uint32_t runtime_interpreters_head = kNoOffset;  // interpreters.head
  uint32_t runtime_tstate_current = kNoOffset;     // gilstate.tstate_current (3.8-3.11 only)
  // PyInterpreterState.
  uint32_t interp_threads_head = kNoOffset;  // tstate_head (3.8-3.10), threads.head (3.11+)
  // PyThreadState.
  uint32_t tstate_next = kNoOffset;
  uint32_t tstate_thread_id = kNoOffset;         // pthread_self() of the thread (== fs base)
  uint32_t tstate_native_thread_id = kNoOffset;  // gettid() in the process's pid ns (3.11+)
  // Leads to the innermost frame: frame (3.8-3.10, PyFrameObject*), cframe (3.11-3.12,
  // _PyCFrame*, then cframe_current_frame), current_frame (3.13, _PyInterpreterFrame*).
  uint32_t tstate_frame = kNoOffset;
  uint32_t cframe_current_frame = kNoOffset;  // _PyCFrame.current_frame (3.11-3.12)

  // The frame: PyFrameObject (3.8-3.10) or _PyInterpreterFrame (3.11+).
  bool interpreter_frames = false;              // 3.11+: _PyInterpreterFrame chain
  uint32_t frame_previous = kNoOffset;          // f_back / previous
  uint32_t frame_code = kNoOffset;              // f_code / f_executable (3.13)
  uint32_t frame_last_instruction = kNoOffset;  // f_lasti / prev_instr / instr_ptr
  LastInstruction last_instruction = LastInstruction::kByteOffset;
  uint32_t frame_owner = kNoOffset;     // char owner (3.11+)
  uint32_t frame_is_entry = kNoOffset;  // bool is_entry (3.11 only)
  // owner value of the shim frame each _PyEval_EvalFrameDefault call pushes (3.12+), or -1.
  int8_t owner_cstack = -1;

  // PyCodeObject.
  uint32_t code_filename = kNoOffset;
  uint32_t code_name = kNoOffset;
  uint32_t code_qualname = kNoOffset;     // 3.11+
  uint32_t code_firstlineno = kNoOffset;  // int
  uint32_t code_linetable = kNoOffset;    // co_lnotab (3.8-3.9) or co_linetable (PyBytesObject*)
  uint32_t code_adaptive = kNoOffset;     // co_code_adaptive: the instructions (3.11+)
  LineTableFormat line_table = LineTableFormat::kLnotab;

  // PyObject / PyVarObject / PyBytesObject.
  uint32_t object_type = 8;  // ob_type
  uint32_t var_size = 16;    // ob_size
  uint32_t bytes_data = 32;  // ob_sval
  // PyASCIIObject / PyCompactUnicodeObject.
  uint32_t unicode_length = 16;  // length, in code points
  uint32_t unicode_state = 32;   // the state bit field (4 bytes)
  uint32_t ascii_data = 0;       // sizeof(PyASCIIObject): where compact ASCII data starts
  uint32_t compact_data = 0;     // sizeof(PyCompactUnicodeObject): where other compact data starts
};

// State bits of PyASCIIObject.state, the same in 3.8-3.13: interned:2, kind:3, compact:1,
// ascii:1 (then ready:1 up to 3.11, statically_allocated:1 from 3.12).
inline constexpr uint32_t kUnicodeKindShift = 2;
inline constexpr uint32_t kUnicodeKindMask = 7;
inline constexpr uint32_t kUnicodeCompactBit = 1u << 5;
inline constexpr uint32_t kUnicodeAsciiBit = 1u << 6;

// The layout of CPython `major.minor`, or nullptr when it is not supported.
const CPythonLayout* FindLayout(int major, int minor);
// Every supported layout, oldest first.
std::span<const CPythonLayout> AllLayouts();

}  // namespace ember::python
