// Each entry is one byte: 0 ends the table, 0xFF escapes to two signed UNSIGNED5 deltas (bci,
// line), any other byte b adds b >> 3 to the bci and b & 7 to the line.
#include "runtimes/hotspot/line_table.h"

#include "runtimes/hotspot/unsigned5.h"

namespace ember::hotspot {

namespace {

std::optional<uint32_t> PositiveLine(std::optional<int64_t> line) {
  if (!line || *line <= 0 || *line > UINT32_MAX) return std::nullopt;
  return static_cast<uint32_t>(*line);
}

}  // namespace

LineLookup LineForBci(std::span<const uint8_t> table, int32_t bci, uint8_t excluded) {
  Unsigned5Reader reader(table, excluded);
  int64_t entry_bci = 0;
  int64_t entry_line = 0;
  int64_t best_bci = 0;
  std::optional<int64_t> best_line;
  for (uint32_t entries = 0; entries < kMaxLineTableEntries; ++entries) {
    std::optional<uint8_t> next = reader.ReadByte();
    if (!next) return {.line = std::nullopt, .truncated = true};
    if (*next == 0) return {.line = PositiveLine(best_line), .consumed = reader.position()};
    if (*next == 0xFF) {
      std::optional<int32_t> bci_delta = reader.ReadSigned();
      std::optional<int32_t> line_delta = bci_delta ? reader.ReadSigned() : std::nullopt;
      if (!line_delta) return {.line = std::nullopt, .truncated = true};
      entry_bci += *bci_delta;
      entry_line += *line_delta;
    } else {
      entry_bci += *next >> 3;
      entry_line += *next & 7;
    }
    if (entry_bci == bci) return {.line = PositiveLine(entry_line)};
    // Ties keep the later entry, as HotSpot's >= does.
    if (entry_bci < bci && entry_bci >= best_bci) {
      best_bci = entry_bci;
      best_line = entry_line;
    }
  }
  return {};
}

}  // namespace ember::hotspot
