// The user-space CPython frame walker. Each read is one bounded copy, as bpf_probe_read_user
// would do it; nothing trusts a pointer without reading through the reader.
#include "runtimes/cpython/frame_walker.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "runtimes/cpython/line_table.h"

namespace ember::python {
namespace {

template <typename T>
bool ReadValue(MemoryReader& memory, uint64_t address, T* out) {
  return memory.Read(address, out, sizeof(T));
}

bool ReadPointer(MemoryReader& memory, uint64_t address, uint64_t* out) {
  return ReadValue(memory, address, out);
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if ((cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) cp = 0xfffd;  // lone surrogate / invalid
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

// A pointer read from the process that may be followed: 0 ends a chain (or is torn state) and is
// the caller's to handle; anything above user space is garbage.
bool InUserSpace(uint64_t pointer) { return pointer <= kMaxUserAddress; }

// Brent's cycle detection over a chain of pointers in constant memory: a chain that loops is
// found within about twice its length, well inside the walks' budgets for short loops; longer
// ones end at the budget.
class LoopDetector {
 public:
  explicit LoopDetector(uint64_t first) : saved_(first) {}
  // Called with each next element of the chain; true once the chain has come back on itself.
  bool Loops(uint64_t next) {
    if (next == saved_) return true;
    if (++steps_ == power_) {
      saved_ = next;
      power_ *= 2;
      steps_ = 0;
    }
    return false;
  }

 private:
  uint64_t saved_;
  uint64_t power_ = 1;
  uint64_t steps_ = 0;
};

// The innermost frame of a thread state, 0 when it runs no Python.
WalkStatus InnermostFrame(MemoryReader& memory, const CPythonLayout& layout, uint64_t tstate,
                          uint64_t* frame) {
  if (!InUserSpace(tstate)) return WalkStatus::kImplausible;
  uint64_t pointer = 0;
  if (!ReadPointer(memory, tstate + layout.tstate_frame, &pointer)) return WalkStatus::kReadFailed;
  if (layout.cframe_current_frame != kNoOffset && pointer != 0) {
    if (!InUserSpace(pointer)) return WalkStatus::kImplausible;
    if (!ReadPointer(memory, pointer + layout.cframe_current_frame, &pointer)) {
      return WalkStatus::kReadFailed;
    }
  }
  *frame = pointer;
  return WalkStatus::kOk;
}

// The byte offset into the code of the instruction a raw frame executes (negative: not started).
// kReadFailed when the position lies outside the code (a torn read); kImplausible for an
// instruction index no code object can reach.
WalkStatus ByteOffset(const CPythonLayout& layout, const RawFrame& raw, int* offset) {
  switch (layout.last_instruction) {
    case LastInstruction::kByteOffset:
      *offset = static_cast<int32_t>(raw.last_instruction);
      return WalkStatus::kOk;
    case LastInstruction::kInstructionIndex: {
      int32_t index = static_cast<int32_t>(raw.last_instruction);
      if (index > INT32_MAX / 2) return WalkStatus::kImplausible;
      *offset = index < 0 ? -2 : index * 2;
      return WalkStatus::kOk;
    }
    case LastInstruction::kPrevInstrPointer:
    case LastInstruction::kInstrPointer: {
      // Unsigned wrap-around is defined; the difference is bounded before it becomes an int.
      int64_t delta =
          static_cast<int64_t>(raw.last_instruction - (raw.code_address + layout.code_adaptive));
      if (delta < -2 || delta > (1 << 28)) return WalkStatus::kReadFailed;
      *offset = static_cast<int>(delta);
      return WalkStatus::kOk;
    }
  }
  return WalkStatus::kReadFailed;
}

// Reads the frame's position: an int (3.8-3.10) or a pointer (3.11+).
bool ReadLastInstruction(MemoryReader& memory, const CPythonLayout& layout, uint64_t frame,
                         uint64_t* out) {
  uint64_t at = frame + layout.frame_last_instruction;
  if (layout.last_instruction == LastInstruction::kByteOffset ||
      layout.last_instruction == LastInstruction::kInstructionIndex) {
    int32_t lasti = 0;
    if (!ReadValue(memory, at, &lasti)) return false;
    *out = static_cast<uint64_t>(static_cast<int64_t>(lasti));
    return true;
  }
  return ReadPointer(memory, at, out);
}

// The line a frame executes, from the code object's line table at `table`: -1 (kOk) when there
// is none or it is over the budget, kImplausible for a pointer or size no bytes object can have.
WalkStatus ReadLine(MemoryReader& memory, const CPythonLayout& layout, const RawFrame& raw,
                    uint64_t table, int first_line, const WalkLimits& limits, int* line) {
  *line = -1;
  if (table == 0) return WalkStatus::kOk;
  if (!InUserSpace(table)) return WalkStatus::kImplausible;
  int offset = 0;
  WalkStatus position = ByteOffset(layout, raw, &offset);
  if (position == WalkStatus::kImplausible) return position;
  int64_t table_size = 0;
  if (position != WalkStatus::kOk || !ReadValue(memory, table + layout.var_size, &table_size)) {
    return WalkStatus::kOk;  // the line is best effort: a named frame is still worth showing
  }
  // Checked before any use: a negative size, or one past the end of user space, is no bytes
  // object's; a plausible one over the budget just leaves the line unknown.
  const uint64_t data = table + layout.bytes_data;
  if (table_size < 0 || data > kMaxUserAddress ||
      static_cast<uint64_t>(table_size) > kMaxUserAddress - data) {
    return WalkStatus::kImplausible;
  }
  if (static_cast<uint64_t>(table_size) > limits.max_line_table_bytes) return WalkStatus::kOk;
  std::vector<uint8_t> bytes(static_cast<size_t>(table_size));
  if (memory.Read(data, bytes.data(), bytes.size())) {
    *line = LineForOffset(layout.line_table, bytes, first_line, offset);
  }
  return WalkStatus::kOk;
}

}  // namespace

const char* WalkStatusName(WalkStatus status) {
  switch (status) {
    case WalkStatus::kOk:
      return "ok";
    case WalkStatus::kNoThreadState:
      return "no_thread_state";
    case WalkStatus::kReadFailed:
      return "read_failed";
    case WalkStatus::kNotCode:
      return "not_code";
    case WalkStatus::kTruncated:
      return "truncated";
    case WalkStatus::kImplausible:
      return "implausible";
  }
  return "unknown";
}

WalkStatus ReadPythonString(MemoryReader& memory, const CPythonLayout& layout, uint64_t address,
                            size_t max_bytes, std::string* out) {
  out->clear();
  if (address == 0) return WalkStatus::kReadFailed;
  if (!InUserSpace(address)) return WalkStatus::kImplausible;
  // One copy of the header: a string freed and reused between two reads cannot pair one object's
  // length with another's kind. Nothing below trusts a value it has not bounded first.
  uint8_t header[64];
  const size_t header_size = std::max<size_t>(layout.unicode_length + sizeof(int64_t),
                                              layout.unicode_state + sizeof(uint32_t));
  if (header_size > sizeof(header)) return WalkStatus::kImplausible;
  if (!memory.Read(address, header, header_size)) return WalkStatus::kReadFailed;
  uint32_t state = 0;
  int64_t length = 0;
  std::memcpy(&state, header + layout.unicode_state, sizeof(state));
  std::memcpy(&length, header + layout.unicode_length, sizeof(length));
  if ((state & kUnicodeCompactBit) == 0) return WalkStatus::kReadFailed;  // data kept elsewhere
  const uint32_t kind = (state >> kUnicodeKindShift) & kUnicodeKindMask;
  const bool ascii = (state & kUnicodeAsciiBit) != 0;
  if ((kind != 1 && kind != 2 && kind != 4) || (ascii && kind != 1)) {
    return WalkStatus::kImplausible;
  }
  // address <= kMaxUserAddress and the offsets are small: no wrap. The length is compared by
  // division, so `length * kind` is only ever formed for lengths that fit in user space.
  const uint64_t data = address + (ascii ? layout.ascii_data : layout.compact_data);
  if (length < 0 || data > kMaxUserAddress ||
      static_cast<uint64_t>(length) > (kMaxUserAddress - data) / kind) {
    return WalkStatus::kImplausible;
  }
  const size_t count = static_cast<size_t>(std::min<uint64_t>(length, max_bytes / kind));
  std::vector<uint8_t> raw(count * kind);
  if (!memory.Read(data, raw.data(), raw.size())) return WalkStatus::kReadFailed;
  out->reserve(raw.size());
  for (size_t i = 0; i < count; ++i) {
    uint32_t cp = 0;
    if (kind == 1) {
      cp = raw[i];
      // An "ASCII" string with high bytes is not what it claims: keep the output valid UTF-8.
      if (ascii && cp >= 0x80) cp = 0xfffd;
    } else if (kind == 2) {
      cp = raw[2 * i] | (uint32_t{raw[2 * i + 1]} << 8);
    } else {
      cp = raw[4 * i] | (uint32_t{raw[4 * i + 1]} << 8) | (uint32_t{raw[4 * i + 2]} << 16) |
           (uint32_t{raw[4 * i + 3]} << 24);
    }
    AppendUtf8(cp, out);
  }
  return WalkStatus::kOk;
}

WalkStatus FindThreadState(MemoryReader& memory, const WalkerConfig& config, ThreadIdentity thread,
                           uint64_t* tstate, const WalkLimits& limits) {
  const CPythonLayout& layout = config.layout;
  bool by_native = thread.pthread_id == 0;
  if (by_native && (thread.native_tid == 0 || layout.tstate_native_thread_id == kNoOffset)) {
    return WalkStatus::kNoThreadState;
  }
  if (!InUserSpace(config.runtime_address)) return WalkStatus::kImplausible;
  uint64_t interp = 0;
  if (!ReadPointer(memory, config.runtime_address + layout.runtime_interpreters_head, &interp)) {
    return WalkStatus::kReadFailed;
  }
  if (interp == 0) return WalkStatus::kNoThreadState;
  if (!InUserSpace(interp)) return WalkStatus::kImplausible;
  uint64_t candidate = 0;
  if (!ReadPointer(memory, interp + layout.interp_threads_head, &candidate)) {
    return WalkStatus::kReadFailed;
  }
  LoopDetector loop(candidate);
  for (size_t i = 0; i < limits.max_threads && candidate != 0; ++i) {
    if (!InUserSpace(candidate)) return WalkStatus::kImplausible;
    bool match = false;
    if (by_native) {
      uint64_t tid = 0;
      if (!ReadValue(memory, candidate + layout.tstate_native_thread_id, &tid)) {
        return WalkStatus::kReadFailed;
      }
      match = tid == thread.native_tid;
    } else {
      uint64_t id = 0;
      if (!ReadValue(memory, candidate + layout.tstate_thread_id, &id)) {
        return WalkStatus::kReadFailed;
      }
      match = id == thread.pthread_id;
    }
    if (match) {
      *tstate = candidate;
      return WalkStatus::kOk;
    }
    if (!ReadPointer(memory, candidate + layout.tstate_next, &candidate)) {
      return WalkStatus::kReadFailed;
    }
    if (candidate != 0 && loop.Loops(candidate)) return WalkStatus::kImplausible;
  }
  return WalkStatus::kNoThreadState;
}

WalkStatus GilHolder(MemoryReader& memory, const WalkerConfig& config, uint64_t* tstate) {
  if (config.layout.runtime_tstate_current == kNoOffset) return WalkStatus::kNoThreadState;
  if (!InUserSpace(config.runtime_address)) return WalkStatus::kImplausible;
  uint64_t current = 0;
  if (!ReadPointer(memory, config.runtime_address + config.layout.runtime_tstate_current,
                   &current)) {
    return WalkStatus::kReadFailed;
  }
  if (current == 0) return WalkStatus::kNoThreadState;
  if (!InUserSpace(current)) return WalkStatus::kImplausible;
  *tstate = current;
  return WalkStatus::kOk;
}

WalkStatus WalkRawFrames(MemoryReader& memory, const WalkerConfig& config, uint64_t tstate,
                         std::vector<RawFrame>* frames, const WalkLimits& limits) {
  const CPythonLayout& layout = config.layout;
  uint64_t frame = 0;
  if (WalkStatus status = InnermostFrame(memory, layout, tstate, &frame);
      status != WalkStatus::kOk) {
    return status;
  }
  LoopDetector loop(frame);
  // Follows the frame's link to the one it was called from.
  auto previous = [&]() {
    if (!ReadPointer(memory, frame + layout.frame_previous, &frame)) return WalkStatus::kReadFailed;
    if (frame != 0 && loop.Loops(frame)) return WalkStatus::kImplausible;
    return WalkStatus::kOk;
  };
  size_t first = frames->size();
  for (size_t visited = 0; frame != 0; ++visited) {
    if (!InUserSpace(frame)) return WalkStatus::kImplausible;
    if (visited == limits.max_frames) return WalkStatus::kTruncated;
    RawFrame raw;
    raw.entry = !layout.interpreter_frames;
    if (layout.frame_owner != kNoOffset && layout.owner_cstack >= 0) {
      int8_t owner = 0;
      if (!ReadValue(memory, frame + layout.frame_owner, &owner)) return WalkStatus::kReadFailed;
      if (owner == layout.owner_cstack) {
        // The shim frame of one _PyEval_EvalFrameDefault call: the frame before it was that
        // call's first (outermost) Python frame.
        if (frames->size() > first) frames->back().entry = true;
        if (WalkStatus status = previous(); status != WalkStatus::kOk) return status;
        continue;
      }
    }
    if (layout.frame_is_entry != kNoOffset) {
      uint8_t is_entry = 0;
      if (!ReadValue(memory, frame + layout.frame_is_entry, &is_entry)) {
        return WalkStatus::kReadFailed;
      }
      raw.entry = is_entry != 0;
    }
    if (!ReadPointer(memory, frame + layout.frame_code, &raw.code_address) ||
        !ReadLastInstruction(memory, layout, frame, &raw.last_instruction)) {
      return WalkStatus::kReadFailed;
    }
    if (!InUserSpace(raw.code_address)) return WalkStatus::kImplausible;
    if (config.code_type_address != 0) {
      uint64_t type = 0;
      if (!ReadPointer(memory, raw.code_address + layout.object_type, &type)) {
        return WalkStatus::kReadFailed;
      }
      if (type != config.code_type_address) return WalkStatus::kNotCode;
    }
    frames->push_back(raw);
    if (WalkStatus status = previous(); status != WalkStatus::kOk) return status;
  }
  return WalkStatus::kOk;
}

WalkStatus ResolveFrame(MemoryReader& memory, const WalkerConfig& config, const RawFrame& raw,
                        PythonFrame* out, const WalkLimits& limits) {
  const CPythonLayout& layout = config.layout;
  const uint64_t code = raw.code_address;
  out->code_address = code;
  out->entry = raw.entry;
  out->name.clear();
  out->qualname.clear();
  out->file.clear();
  out->first_line = -1;
  out->line = -1;
  if (code == 0) return WalkStatus::kReadFailed;
  if (!InUserSpace(code)) return WalkStatus::kImplausible;
  uint64_t name = 0, qualname = 0, file = 0, table = 0;
  if (!ReadPointer(memory, code + layout.code_name, &name) ||
      !ReadPointer(memory, code + layout.code_filename, &file) ||
      !ReadPointer(memory, code + layout.code_linetable, &table) ||
      !ReadValue(memory, code + layout.code_firstlineno, &out->first_line)) {
    return WalkStatus::kReadFailed;
  }
  if (layout.code_qualname != kNoOffset &&
      !ReadPointer(memory, code + layout.code_qualname, &qualname)) {
    return WalkStatus::kReadFailed;
  }
  if (WalkStatus status =
          ReadPythonString(memory, layout, name, limits.max_string_bytes, &out->name);
      status != WalkStatus::kOk) {
    return status;
  }
  WalkStatus qualified = qualname == 0 ? WalkStatus::kReadFailed
                                       : ReadPythonString(memory, layout, qualname,
                                                          limits.max_string_bytes, &out->qualname);
  if (qualified != WalkStatus::kOk) out->qualname = out->name;
  if (qualified == WalkStatus::kImplausible) return qualified;
  if (WalkStatus status =
          ReadPythonString(memory, layout, file, limits.max_string_bytes, &out->file);
      status != WalkStatus::kOk) {
    return status;
  }
  return ReadLine(memory, layout, raw, table, out->first_line, limits, &out->line);
}

WalkStatus WalkFrames(MemoryReader& memory, const WalkerConfig& config, uint64_t tstate,
                      std::vector<PythonFrame>* frames, const WalkLimits& limits) {
  std::vector<RawFrame> raw;
  WalkStatus walked = WalkRawFrames(memory, config, tstate, &raw, limits);
  for (const RawFrame& r : raw) {
    PythonFrame frame;
    WalkStatus status = ResolveFrame(memory, config, r, &frame, limits);
    if (status != WalkStatus::kOk) return status;
    frames->push_back(std::move(frame));
  }
  return walked;
}

}  // namespace ember::python
