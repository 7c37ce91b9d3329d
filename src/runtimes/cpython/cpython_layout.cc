// The per-version CPython layout table. Every number was read from the DWARF of a real x86-64
// build with gdb (`output (long)&((struct _ts*)0)->thread_id` and `ptype/o`):
//   3.8  pyenv 3.8.18  libpython3.8.so.1.0       3.9  pyenv 3.9.18  libpython3.9.so.1.0
//   3.10 pyenv 3.10.13 libpython3.10.so.1.0      3.11 Debian 3.11.2 /usr/bin/python3.11 (and
//   3.12 pyenv 3.12.1  libpython3.12.so.1.0           python3.11d, identical) via python3.11-dbg
//   3.13 pyenv 3.13.0  libpython3.13.so.1.0
// Only the 3.11 row is re-checked by the unit tests on every machine (Debian's python3.11 is a
// test dependency); the others are checked where those builds exist (docs/cpython.md).
// Offsets inside one minor version are stable across patch releases for everything here except
// 3.13's _PyRuntime/PyInterpreterState offsets, which interpreter_detect.cc re-reads from the
// binary's _Py_DebugOffsets.
#include "runtimes/cpython/cpython_layout.h"

#include <array>

namespace ember::python {
namespace {

// 3.8-3.10 share PyThreadState up to thread_id and the frame object's first fields.
constexpr CPythonLayout Python38() {
  return CPythonLayout{
      .major = 3,
      .minor = 8,
      .verified = true,
      // _PyRuntimeState: 4 ints, _finalizing, then struct pyinterpreters {mutex, head, ...}.
      .runtime_interpreters_head = 32,
      // 3.8 keeps gc and a larger ceval state in the runtime, so gilstate sits late.
      .runtime_tstate_current = 1368,
      .interp_threads_head = 8,  // PyInterpreterState.tstate_head
      .tstate_next = 8,
      .tstate_thread_id = 176,
      .tstate_native_thread_id = kNoOffset,  // added in 3.11
      .tstate_frame = 24,                    // PyThreadState.frame
      .interpreter_frames = false,
      .frame_previous = 24,           // PyFrameObject.f_back (after PyObject_VAR_HEAD)
      .frame_code = 32,               // f_code
      .frame_last_instruction = 104,  // f_lasti (bytes)
      .last_instruction = LastInstruction::kByteOffset,
      .code_filename = 104,
      .code_name = 112,
      .code_firstlineno = 40,
      .code_linetable = 120,  // co_lnotab
      .line_table = LineTableFormat::kLnotab,
      .ascii_data = 48,
      .compact_data = 72,
  };
}

constexpr CPythonLayout Python39() {
  CPythonLayout l = Python38();
  l.minor = 9;
  l.runtime_tstate_current = 568;  // gc moved to the interpreter in 3.9
  return l;
}

constexpr CPythonLayout Python310() {
  CPythonLayout l = Python39();
  l.minor = 10;
  l.frame_last_instruction = 96;  // f_stacktop gone, f_stackdepth added
  l.last_instruction = LastInstruction::kInstructionIndex;
  l.code_linetable = 120;  // co_linetable, where co_lnotab was
  l.line_table = LineTableFormat::kLineTable310;
  return l;
}

constexpr CPythonLayout Python311() {
  return CPythonLayout{
      .major = 3,
      .minor = 11,
      .verified = true,
      .runtime_interpreters_head = 40,  // _initialized added before it
      .runtime_tstate_current = 576,    // gilstate.tstate_current
      .interp_threads_head = 16,        // struct pythreads {next_unique_id, head, ...} at 8
      .tstate_next = 8,
      .tstate_thread_id = 152,
      .tstate_native_thread_id = 160,
      .tstate_frame = 56,         // PyThreadState.cframe
      .cframe_current_frame = 8,  // after uint8_t use_tracing
      .interpreter_frames = true,
      .frame_previous = 48,
      .frame_code = 32,              // f_code, after f_func/f_globals/f_builtins/f_locals
      .frame_last_instruction = 56,  // prev_instr
      .last_instruction = LastInstruction::kPrevInstrPointer,
      .frame_owner = 69,
      .frame_is_entry = 68,
      .owner_cstack = -1,  // 3.11 marks entry frames with is_entry instead of a shim frame
      .code_filename = 112,
      .code_name = 120,
      .code_qualname = 128,
      .code_firstlineno = 72,
      .code_linetable = 136,
      .code_adaptive = 184,
      .line_table = LineTableFormat::kLocationTable,
      .ascii_data = 48,
      .compact_data = 72,
  };
}

constexpr CPythonLayout Python312() {
  return CPythonLayout{
      .major = 3,
      .minor = 12,
      .verified = true,
      .runtime_interpreters_head = 40,
      .runtime_tstate_current = kNoOffset,  // a thread-local (_Py_tss_tstate) from 3.12
      .interp_threads_head = 72,
      .tstate_next = 8,
      .tstate_thread_id = 136,
      .tstate_native_thread_id = 144,
      .tstate_frame = 56,         // cframe
      .cframe_current_frame = 0,  // use_tracing gone
      .interpreter_frames = true,
      .frame_previous = 8,
      .frame_code = 0,               // f_code moved first
      .frame_last_instruction = 56,  // prev_instr
      .last_instruction = LastInstruction::kPrevInstrPointer,
      .frame_owner = 70,
      .frame_is_entry = kNoOffset,
      .owner_cstack = 3,  // FRAME_OWNED_BY_CSTACK
      .code_filename = 112,
      .code_name = 120,
      .code_qualname = 128,
      .code_firstlineno = 68,
      .code_linetable = 136,
      .code_adaptive = 192,
      .line_table = LineTableFormat::kLocationTable,
      .ascii_data = 40,  // wstr gone (PEP 623)
      .compact_data = 56,
  };
}

constexpr CPythonLayout Python313() {
  CPythonLayout l = Python312();
  l.minor = 13;
  // _PyRuntime starts with _Py_DebugOffsets (584 bytes in 3.13.0); these two are 3.13.0's and are
  // replaced by the binary's own _Py_DebugOffsets when it has them.
  l.runtime_interpreters_head = 632;
  l.interp_threads_head = 7344;
  l.tstate_thread_id = 152;
  l.tstate_native_thread_id = 160;
  l.tstate_frame = 72;  // PyThreadState.current_frame: no _PyCFrame any more
  l.cframe_current_frame = kNoOffset;
  l.frame_code = 0;               // f_executable (a code object for Python frames)
  l.frame_last_instruction = 56;  // instr_ptr
  l.last_instruction = LastInstruction::kInstrPointer;
  l.code_adaptive = 200;  // co_executors added
  return l;
}

constexpr std::array<CPythonLayout, 6> kLayouts = {Python38(),  Python39(),  Python310(),
                                                   Python311(), Python312(), Python313()};

}  // namespace

const CPythonLayout* FindLayout(int major, int minor) {
  for (const CPythonLayout& layout : kLayouts) {
    if (layout.major == major && layout.minor == minor) return &layout;
  }
  return nullptr;
}

std::span<const CPythonLayout> AllLayouts() { return kLayouts; }

}  // namespace ember::python
