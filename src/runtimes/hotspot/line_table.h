// A method's compressed line number table (the bytes after its bytecodes, JDK
// oops/method.cpp CompressedLineNumberReadStream) -> the source line of a bytecode index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace ember::hotspot {

// At most this many entries are read from one table: a method of 64 KiB of bytecodes has fewer,
// and garbage that never ends in a zero stops here.
inline constexpr uint32_t kMaxLineTableEntries = 65536;

struct LineLookup {
  std::optional<uint32_t> line;  // nullopt: no line
  // The span ended before the table did (inside an entry or before its terminating zero): with
  // more bytes the answer may differ. `line` is then set only for an exact match.
  bool truncated = false;
  // Bytes read up to and including the terminating zero when the table ended in the span.
  size_t consumed = 0;
};

// The line of `bci` as HotSpot's Method::line_number_from_bci gives it: the first entry whose
// start equals `bci` (returned as soon as it is seen, as HotSpot does), else the last of those
// with the largest start below it. No line when no entry starts at or before `bci`, when the
// table is cut short, when it runs past kMaxLineTableEntries entries, or for a line <= 0.
// `excluded` is HotSpotLayout::unsigned5_excluded.
LineLookup LineForBci(std::span<const uint8_t> table, int32_t bci, uint8_t excluded);

}  // namespace ember::hotspot
