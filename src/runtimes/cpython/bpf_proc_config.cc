// MakeBpfPythonProc: CPythonLayout offsets narrowed to the BPF map entry's 16-bit fields.
#include "runtimes/cpython/bpf_proc_config.h"

#include <algorithm>
#include <cstdint>

namespace ember::python {
namespace {

// An offset as a 16-bit field; false when it does not fit. kNoOffset becomes
// EMBER_PYTHON_NO_OFFSET when `optional`.
bool Narrow(uint32_t offset, bool optional, __u16* out) {
  if (offset == kNoOffset) {
    *out = EMBER_PYTHON_NO_OFFSET;
    return optional;
  }
  if (offset >= EMBER_PYTHON_NO_OFFSET) return false;
  *out = static_cast<__u16>(offset);
  return true;
}

}  // namespace

std::optional<ember_python_proc> MakeBpfPythonProc(const WalkerConfig& config) {
  const CPythonLayout& layout = config.layout;
  ember_python_proc proc{};
  proc.runtime_address = config.runtime_address;
  proc.code_type_address = config.code_type_address;
  proc.tstate_current_address = layout.runtime_tstate_current == kNoOffset
                                    ? 0
                                    : config.runtime_address + layout.runtime_tstate_current;
  bool ok = config.runtime_address != 0 &&
            Narrow(layout.runtime_interpreters_head, false, &proc.interpreters_head) &&
            Narrow(layout.interp_threads_head, false, &proc.interp_threads_head) &&
            Narrow(layout.tstate_next, false, &proc.tstate_next) &&
            Narrow(layout.tstate_thread_id, false, &proc.tstate_thread_id) &&
            Narrow(layout.tstate_frame, false, &proc.tstate_frame) &&
            Narrow(layout.cframe_current_frame, true, &proc.cframe_current_frame) &&
            Narrow(layout.frame_previous, false, &proc.frame_previous) &&
            Narrow(layout.frame_code, false, &proc.frame_code) &&
            Narrow(layout.frame_last_instruction, false, &proc.frame_position) &&
            Narrow(layout.frame_owner, true, &proc.frame_owner) &&
            Narrow(layout.frame_is_entry, true, &proc.frame_is_entry) &&
            Narrow(layout.object_type, false, &proc.code_type_offset);
  if (!ok) return std::nullopt;
  proc.minor = layout.minor;
  proc.position_kind = static_cast<__u8>(layout.last_instruction);
  const bool int_position = layout.last_instruction == LastInstruction::kByteOffset ||
                            layout.last_instruction == LastInstruction::kInstructionIndex;
  proc.owner_cstack = layout.owner_cstack >= 0 ? static_cast<__u8>(layout.owner_cstack)
                                               : static_cast<__u8>(EMBER_PYTHON_NO_OWNER);
  // The header copied per frame must hold every field read from it.
  uint32_t header = std::max({layout.frame_previous + 8, layout.frame_code + 8,
                              layout.frame_last_instruction + (int_position ? 4u : 8u)});
  if (layout.frame_owner != kNoOffset) header = std::max(header, layout.frame_owner + 1);
  if (layout.frame_is_entry != kNoOffset) header = std::max(header, layout.frame_is_entry + 1);
  if (header > EMBER_MAX_PYTHON_FRAME_HEADER) return std::nullopt;
  proc.frame_header_bytes = static_cast<__u8>(header);
  proc.flags = layout.interpreter_frames ? EMBER_PYTHON_PROC_INTERPRETER_FRAMES : 0;
  return proc;
}

RawFrame RawFrameOf(const ember_python_frame& frame) {
  return RawFrame{.code_address = frame.code,
                  .last_instruction = frame.position,
                  .entry = (frame.flags & EMBER_PYTHON_FRAME_ENTRY) != 0};
}

}  // namespace ember::python
