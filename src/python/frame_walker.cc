// The user-space CPython frame walker. Each read is one bounded copy, as bpf_probe_read_user
// would do it; nothing trusts a pointer without reading through the reader.
#include "python/frame_walker.h"

#include "python/line_table.h"

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

// The innermost frame of a thread state, 0 when it runs no Python.
bool InnermostFrame(MemoryReader& memory, const CPythonLayout& layout, uint64_t tstate,
                    uint64_t* frame) {
  uint64_t pointer = 0;
  if (!ReadPointer(memory, tstate + layout.tstate_frame, &pointer)) return false;
  if (layout.cframe_current_frame != kNoOffset && pointer != 0) {
    if (!ReadPointer(memory, pointer + layout.cframe_current_frame, &pointer)) return false;
  }
  *frame = pointer;
  return true;
}

// The byte offset into the code of the instruction a raw frame executes (negative: not started).
bool ByteOffset(const CPythonLayout& layout, const RawFrame& raw, int* offset) {
  switch (layout.last_instruction) {
    case LastInstruction::kByteOffset:
      *offset = static_cast<int32_t>(raw.last_instruction);
      return true;
    case LastInstruction::kInstructionIndex: {
      int32_t index = static_cast<int32_t>(raw.last_instruction);
      *offset = index < 0 ? -2 : index * 2;
      return true;
    }
    case LastInstruction::kPrevInstrPointer:
    case LastInstruction::kInstrPointer: {
      int64_t delta =
          static_cast<int64_t>(raw.last_instruction - (raw.code_address + layout.code_adaptive));
      if (delta < -2 || delta > (1 << 28)) return false;
      *offset = static_cast<int>(delta);
      return true;
    }
  }
  return false;
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
  }
  return "unknown";
}

bool ReadPythonString(MemoryReader& memory, const CPythonLayout& layout, uint64_t address,
                      size_t max_bytes, std::string* out) {
  out->clear();
  if (address == 0) return false;
  uint32_t state = 0;
  int64_t length = 0;
  if (!ReadValue(memory, address + layout.unicode_state, &state) ||
      !ReadValue(memory, address + layout.unicode_length, &length) || length < 0) {
    return false;
  }
  if ((state & kUnicodeCompactBit) == 0) return false;  // legacy strings keep data elsewhere
  uint32_t kind = (state >> kUnicodeKindShift) & kUnicodeKindMask;
  if (kind != 1 && kind != 2 && kind != 4) return false;
  bool ascii = (state & kUnicodeAsciiBit) != 0;
  uint64_t data = address + (ascii ? layout.ascii_data : layout.compact_data);
  size_t count = static_cast<size_t>(length);
  if (count * kind > max_bytes) count = max_bytes / kind;
  std::vector<uint8_t> raw(count * kind);
  if (!memory.Read(data, raw.data(), raw.size())) return false;
  if (ascii) {
    out->assign(raw.begin(), raw.end());
    return true;
  }
  for (size_t i = 0; i < count; ++i) {
    uint32_t cp = 0;
    if (kind == 1) {
      cp = raw[i];
    } else if (kind == 2) {
      cp = raw[2 * i] | (uint32_t{raw[2 * i + 1]} << 8);
    } else {
      cp = raw[4 * i] | (uint32_t{raw[4 * i + 1]} << 8) | (uint32_t{raw[4 * i + 2]} << 16) |
           (uint32_t{raw[4 * i + 3]} << 24);
    }
    AppendUtf8(cp, out);
  }
  return true;
}

WalkStatus FindThreadState(MemoryReader& memory, const WalkerConfig& config, ThreadIdentity thread,
                           uint64_t* tstate, const WalkLimits& limits) {
  const CPythonLayout& layout = config.layout;
  bool by_native = thread.pthread_id == 0;
  if (by_native && (thread.native_tid == 0 || layout.tstate_native_thread_id == kNoOffset)) {
    return WalkStatus::kNoThreadState;
  }
  uint64_t interp = 0;
  if (!ReadPointer(memory, config.runtime_address + layout.runtime_interpreters_head, &interp)) {
    return WalkStatus::kReadFailed;
  }
  if (interp == 0) return WalkStatus::kNoThreadState;
  uint64_t candidate = 0;
  if (!ReadPointer(memory, interp + layout.interp_threads_head, &candidate)) {
    return WalkStatus::kReadFailed;
  }
  for (size_t i = 0; i < limits.max_threads && candidate != 0; ++i) {
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
  }
  return WalkStatus::kNoThreadState;
}

WalkStatus GilHolder(MemoryReader& memory, const WalkerConfig& config, uint64_t* tstate) {
  if (config.layout.runtime_tstate_current == kNoOffset) return WalkStatus::kNoThreadState;
  uint64_t current = 0;
  if (!ReadPointer(memory, config.runtime_address + config.layout.runtime_tstate_current,
                   &current)) {
    return WalkStatus::kReadFailed;
  }
  if (current == 0) return WalkStatus::kNoThreadState;
  *tstate = current;
  return WalkStatus::kOk;
}

WalkStatus WalkRawFrames(MemoryReader& memory, const WalkerConfig& config, uint64_t tstate,
                         std::vector<RawFrame>* frames, const WalkLimits& limits) {
  const CPythonLayout& layout = config.layout;
  uint64_t frame = 0;
  if (!InnermostFrame(memory, layout, tstate, &frame)) return WalkStatus::kReadFailed;
  size_t first = frames->size();
  for (size_t visited = 0; frame != 0; ++visited) {
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
        if (!ReadPointer(memory, frame + layout.frame_previous, &frame)) {
          return WalkStatus::kReadFailed;
        }
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
    if (config.code_type_address != 0) {
      uint64_t type = 0;
      if (!ReadPointer(memory, raw.code_address + layout.object_type, &type)) {
        return WalkStatus::kReadFailed;
      }
      if (type != config.code_type_address) return WalkStatus::kNotCode;
    }
    frames->push_back(raw);
    if (!ReadPointer(memory, frame + layout.frame_previous, &frame)) {
      return WalkStatus::kReadFailed;
    }
  }
  return WalkStatus::kOk;
}

WalkStatus ResolveFrame(MemoryReader& memory, const WalkerConfig& config, const RawFrame& raw,
                        PythonFrame* out, const WalkLimits& limits) {
  const CPythonLayout& layout = config.layout;
  const uint64_t code = raw.code_address;
  out->code_address = code;
  out->entry = raw.entry;
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
  if (!ReadPythonString(memory, layout, name, limits.max_string_bytes, &out->name) ||
      !ReadPythonString(memory, layout, file, limits.max_string_bytes, &out->file)) {
    return WalkStatus::kReadFailed;
  }
  if (qualname == 0 ||
      !ReadPythonString(memory, layout, qualname, limits.max_string_bytes, &out->qualname)) {
    out->qualname = out->name;
  }
  // The line is best effort: a frame with a name but no line is still worth showing.
  out->line = -1;
  int offset = 0;
  int64_t table_size = 0;
  if (ByteOffset(layout, raw, &offset) && ReadValue(memory, table + layout.var_size, &table_size) &&
      table_size >= 0 && static_cast<uint64_t>(table_size) <= limits.max_line_table_bytes) {
    std::vector<uint8_t> bytes(static_cast<size_t>(table_size));
    if (memory.Read(table + layout.bytes_data, bytes.data(), bytes.size())) {
      out->line = LineForOffset(layout.line_table, bytes, out->first_line, offset);
    }
  }
  return WalkStatus::kOk;
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
