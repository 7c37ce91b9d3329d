// CPython line tables are copied out of the profiled process's memory: any bytes. Decoding and the
// per-offset lookup the agent uses must stay inside the table and give ordered ranges.
#include <cstddef>
#include <cstdint>
#include <span>

#include "runtimes/cpython/line_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  using ember::python::LineTableFormat;
  const LineTableFormat formats[] = {LineTableFormat::kLnotab, LineTableFormat::kLineTable310,
                                     LineTableFormat::kLocationTable};
  const LineTableFormat format = formats[data[0] % 3];
  const int first_line = data[1] * 10;
  const std::span<const uint8_t> table(data + 2, size - 2);
  for (const ember::python::LineRange& range :
       ember::python::DecodeLineTable(format, table, first_line)) {
    if (range.start > range.end) __builtin_trap();
    ember::python::LineForOffset(format, table, first_line, range.start);
  }
  ember::python::LineForOffset(format, table, first_line, data[size - 1] * 2);
  return 0;
}
