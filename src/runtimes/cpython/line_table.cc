// Line-table decoders, following CPython's own: PyCode_Addr2Line in Objects/codeobject.c of 3.8
// (co_lnotab), 3.10 (co_linetable pairs) and 3.11 (location table, Objects/locations.md).
#include "runtimes/cpython/line_table.h"

#include <algorithm>
#include <climits>
#include <cstdint>

namespace ember::python {
namespace {

// Walks a table range by range. Next() returns false at the end of the table or at a truncated
// entry. Zero-width ranges are skipped, as CPython's PyLineTable_NextAddressRange does.
class RangeIterator {
 public:
  RangeIterator(LineTableFormat format, std::span<const uint8_t> table, int first_line)
      : format_(format), table_(table), computed_line_(first_line) {}

  bool Next(LineRange* range) {
    while (true) {
      bool ok = false;
      switch (format_) {
        case LineTableFormat::kLnotab:
          ok = NextLnotab(range);
          break;
        case LineTableFormat::kLineTable310:
          ok = NextLineTable310(range);
          break;
        case LineTableFormat::kLocationTable:
          ok = NextLocation(range);
          break;
      }
      if (!ok) return false;
      if (range->end > range->start) return true;
    }
  }

 private:
  // co_lnotab: (address increment, signed line increment) pairs; the line applies from the
  // address reached to the next one, and the last line to the end of the code.
  bool NextLnotab(LineRange* range) {
    if (lnotab_done_) return false;
    range->start = address_;
    range->line = computed_line_;
    while (pos_ + 1 < table_.size()) {
      uint8_t address_delta = table_[pos_];
      int8_t line_delta = static_cast<int8_t>(table_[pos_ + 1]);
      pos_ += 2;
      if (address_delta != 0) {
        AddBytes(address_delta);
        range->end = address_;
        AddLines(line_delta);
        return true;
      }
      AddLines(line_delta);
      range->line = computed_line_;
    }
    lnotab_done_ = true;
    range->end = INT_MAX;
    return true;
  }

  // 3.10 co_linetable: (unsigned byte count, signed line delta) pairs, -128 meaning "no line".
  bool NextLineTable310(LineRange* range) {
    if (pos_ + 1 >= table_.size()) return false;
    uint8_t address_delta = table_[pos_];
    int8_t line_delta = static_cast<int8_t>(table_[pos_ + 1]);
    pos_ += 2;
    range->start = address_;
    AddBytes(address_delta);
    range->end = address_;
    if (line_delta == -128) {
      range->line = -1;
    } else {
      AddLines(line_delta);
      range->line = computed_line_;
    }
    return true;
  }

  // Tables come from another process's memory: garbage must saturate, not overflow.
  static int Saturated(int64_t value) {
    return static_cast<int>(std::clamp<int64_t>(value, INT_MIN, INT_MAX));
  }
  void AddLines(int delta) { computed_line_ = Saturated(int64_t{computed_line_} + delta); }
  void AddBytes(int delta) { address_ = Saturated(int64_t{address_} + delta); }

  bool ReadVarint(size_t* pos, uint32_t* value) const {
    if (*pos >= table_.size()) return false;
    uint32_t read = table_[(*pos)++];
    uint32_t result = read & 63;
    uint32_t shift = 0;
    while (read & 64) {
      if (*pos >= table_.size() || shift > 24) return false;
      read = table_[(*pos)++];
      shift += 6;
      result |= (read & 63) << shift;
    }
    *value = result;
    return true;
  }

  // 3.11+ location table: a header byte 1cccclll (code c, length l+1 code units), then the
  // code's operands; only the line delta matters here.
  bool NextLocation(LineRange* range) {
    if (pos_ >= table_.size()) return false;
    uint8_t header = table_[pos_];
    if ((header & 0x80) == 0) return false;
    int code = (header >> 3) & 15;
    int line_delta = 0;
    switch (code) {
      case 13:    // NO_COLUMNS: signed varint line delta
      case 14: {  // LONG: signed varint line delta, then end line and columns
        size_t p = pos_ + 1;
        uint32_t value = 0;
        if (!ReadVarint(&p, &value)) return false;
        line_delta = (value & 1) ? -static_cast<int>(value >> 1) : static_cast<int>(value >> 1);
        break;
      }
      case 10:  // ONE_LINE0..2: the line moves by 0, 1 or 2
      case 11:
      case 12:
        line_delta = code - 10;
        break;
      default:  // SHORT forms (0-9) keep the line; NONE (15) has none
        break;
    }
    AddLines(line_delta);
    range->line = code == 15 ? -1 : computed_line_;
    range->start = address_;
    AddBytes(((header & 7) + 1) * 2);
    range->end = address_;
    // Skip to the next header as CPython does: operand bytes never have the top bit set.
    ++pos_;
    while (pos_ < table_.size() && (table_[pos_] & 0x80) == 0) ++pos_;
    return true;
  }

  LineTableFormat format_;
  std::span<const uint8_t> table_;
  size_t pos_ = 0;
  int address_ = 0;
  int computed_line_;
  bool lnotab_done_ = false;
};

}  // namespace

std::vector<LineRange> DecodeLineTable(LineTableFormat format, std::span<const uint8_t> table,
                                       int first_line) {
  std::vector<LineRange> ranges;
  RangeIterator it(format, table, first_line);
  LineRange range;
  while (it.Next(&range)) ranges.push_back(range);
  return ranges;
}

int LineForOffset(LineTableFormat format, std::span<const uint8_t> table, int first_line,
                  int byte_offset) {
  if (byte_offset < 0) return first_line;
  RangeIterator it(format, table, first_line);
  LineRange range;
  while (it.Next(&range)) {
    if (byte_offset >= range.start && byte_offset < range.end) return range.line;
  }
  return -1;
}

}  // namespace ember::python
