// The fake interpreter's objects, laid out with the layout's own offsets.
#include "fake_interpreter.h"

#include <algorithm>
#include <cstring>

namespace ember::python::fake {
namespace {

// Bytes enough for every offset a layout reads from an object.
constexpr size_t kObjectBytes = 512;

}  // namespace

FakeInterpreter::FakeInterpreter(uint8_t layout_index) {
  target.layout_index = layout_index;
  target.config.layout = AllLayouts()[layout_index % AllLayouts().size()];
  target.config.runtime_address = kRuntime;
  target.config.code_type_address = kCodeType;
  target.thread = {.pthread_id = kThreadId, .native_tid = kNativeTid};
  const CPythonLayout& l = layout();

  memory.Put(kRuntime,
             std::vector<uint8_t>(std::max<size_t>(kObjectBytes, l.runtime_interpreters_head + 8)));
  Set<uint64_t>(kRuntime + l.runtime_interpreters_head, kInterp);
  if (l.runtime_tstate_current != kNoOffset) {
    memory.Put(kRuntime, std::vector<uint8_t>(l.runtime_tstate_current + 8));
    Set<uint64_t>(kRuntime + l.runtime_interpreters_head, kInterp);
    Set<uint64_t>(kRuntime + l.runtime_tstate_current, kTstate);
  }
  memory.Put(kInterp,
             std::vector<uint8_t>(std::max<size_t>(kObjectBytes, l.interp_threads_head + 8)));
  Set<uint64_t>(kInterp + l.interp_threads_head, kTstate);

  memory.Put(kTstate, std::vector<uint8_t>(kObjectBytes));
  Set<uint64_t>(kTstate + l.tstate_next, 0);
  Set<uint64_t>(kTstate + l.tstate_thread_id, kThreadId);
  if (l.tstate_native_thread_id != kNoOffset) {
    Set<uint64_t>(kTstate + l.tstate_native_thread_id, kNativeTid);
  }
  if (l.cframe_current_frame != kNoOffset) {
    Set<uint64_t>(kTstate + l.tstate_frame, kCframe);
    memory.Put(kCframe, std::vector<uint8_t>(64));
    Set<uint64_t>(kCframe + l.cframe_current_frame, kInnerFrame);
  } else {
    Set<uint64_t>(kTstate + l.tstate_frame, kInnerFrame);
  }

  const bool pointer_position = l.last_instruction == LastInstruction::kPrevInstrPointer ||
                                l.last_instruction == LastInstruction::kInstrPointer;
  auto put_frame = [&](uint64_t frame, uint64_t previous, uint64_t code, int offset, bool entry) {
    memory.Put(frame, std::vector<uint8_t>(kObjectBytes));
    Set<uint64_t>(frame + l.frame_previous, previous);
    Set<uint64_t>(frame + l.frame_code, code);
    if (pointer_position) {
      Set<uint64_t>(frame + l.frame_last_instruction, code + l.code_adaptive + offset);
    } else {
      const int32_t lasti =
          l.last_instruction == LastInstruction::kInstructionIndex ? offset / 2 : offset;
      Set<int32_t>(frame + l.frame_last_instruction, lasti);
    }
    if (l.frame_owner != kNoOffset) Set<uint8_t>(frame + l.frame_owner, 0);  // owned by thread
    if (l.frame_is_entry != kNoOffset) Set<uint8_t>(frame + l.frame_is_entry, entry ? 1 : 0);
  };
  put_frame(kInnerFrame, kOuterFrame, kInnerCode, kInnerOffset, false);
  put_frame(kOuterFrame, 0, kOuterCode, 0, true);

  auto put_code = [&](uint64_t code, uint64_t name, uint64_t qualname, uint64_t table,
                      int32_t first_line) {
    memory.Put(code, std::vector<uint8_t>(kObjectBytes));
    Set<uint64_t>(code + l.object_type, kCodeType);
    Set<uint64_t>(code + l.code_name, name);
    if (l.code_qualname != kNoOffset) Set<uint64_t>(code + l.code_qualname, qualname);
    Set<uint64_t>(code + l.code_filename, kFile);
    Set<uint64_t>(code + l.code_linetable, table);
    Set<int32_t>(code + l.code_firstlineno, first_line);
  };
  put_code(kInnerCode, kInnerName, kQualname, kInnerTable, kInnerFirstLine);
  put_code(kOuterCode, kOuterName, kOuterName, kOuterTable, kOuterFirstLine);
  PutString(kInnerName, {'i', 'n', 'n', 'e', 'r'}, 1, true);
  PutString(kQualname, {'O', 'u', 't', 'e', 'r', '.', 0x3bb}, 2, false);  // "Outer.λ"
  PutString(kOuterName, {'<', 'm', 'o', 'd', 'u', 'l', 'e', '>'}, 1, true);
  PutString(kFile, {'/', 0x1f600, '.', 'p', 'y'}, 4, false);  // "/😀.py"
  PutLineTable(kInnerTable);
  PutLineTable(kOuterTable);
}

void FakeInterpreter::PutString(uint64_t address, const std::vector<uint32_t>& chars, uint32_t kind,
                                bool ascii) {
  const CPythonLayout& l = layout();
  std::vector<uint8_t> object(ascii ? l.ascii_data : l.compact_data);
  const int64_t length = static_cast<int64_t>(chars.size());
  std::memcpy(object.data() + l.unicode_length, &length, 8);
  const uint32_t state =
      (kind << kUnicodeKindShift) | kUnicodeCompactBit | (ascii ? kUnicodeAsciiBit : 0);
  std::memcpy(object.data() + l.unicode_state, &state, 4);
  for (uint32_t c : chars) {
    for (uint32_t b = 0; b < kind; ++b) object.push_back(static_cast<uint8_t>(c >> (8 * b)));
  }
  for (uint32_t b = 0; b < kind; ++b) object.push_back(0);  // the terminating NUL
  memory.Put(address, std::move(object));
}

void FakeInterpreter::PutLineTable(uint64_t address) {
  const CPythonLayout& l = layout();
  // Two ranges of 4 bytes (2 code units): line first + 1, then first + 3.
  std::vector<uint8_t> table;
  switch (l.line_table) {
    case LineTableFormat::kLnotab:  // (address delta, line delta) from first_line
      table = {0, 1, 4, 2};
      break;
    case LineTableFormat::kLineTable310:  // (byte count, line delta)
      table = {4, 1, 4, 2};
      break;
    case LineTableFormat::kLocationTable:  // NO_COLUMNS entries of 2 units: +1, then +2
      table = {0xe9, 0x02, 0xe9, 0x04};
      break;
  }
  std::vector<uint8_t> object(l.bytes_data);
  const int64_t size = static_cast<int64_t>(table.size());
  std::memcpy(object.data() + l.var_size, &size, 8);
  object.insert(object.end(), table.begin(), table.end());
  object.push_back(0);
  memory.Put(address, std::move(object));
}

}  // namespace ember::python::fake
