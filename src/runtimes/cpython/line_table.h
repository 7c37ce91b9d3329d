// Source lines from CPython line tables copied out of a process: co_lnotab (3.8-3.9), the 3.10
// co_linetable and the 3.11+ location table. Pure functions over bytes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtimes/cpython/cpython_layout.h"

namespace ember::python {

// One run of bytecode with the same line: byte offsets [start, end), line -1 when the
// instructions have no line (artificial code).
struct LineRange {
  int start = 0;
  int end = 0;
  int line = -1;
};

// Every range the table describes, in order. Stops quietly at a truncated entry.
std::vector<LineRange> DecodeLineTable(LineTableFormat format, std::span<const uint8_t> table,
                                       int first_line);

// The line of the instruction at `byte_offset` in the code, as CPython's PyCode_Addr2Line
// computes it: `first_line` for a negative offset (a frame that has not started), -1 when the
// instruction has no line or the offset lies past the table. Allocation-free, so the agent can
// call it per frame.
int LineForOffset(LineTableFormat format, std::span<const uint8_t> table, int first_line,
                  int byte_offset);

}  // namespace ember::python
