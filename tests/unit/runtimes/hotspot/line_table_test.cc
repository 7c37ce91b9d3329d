// Compressed line number tables: written as the JDK writes them, then looked up per bci.
#include "runtimes/hotspot/line_table.h"

#include <gtest/gtest.h>

#include <vector>

#include "namer_memory_image.h"

namespace ember::hotspot {
namespace {

using testing::EncodeLineTable;

class LineTableTest : public ::testing::TestWithParam<uint8_t> {};

TEST_P(LineTableTest, LargestStartAtOrBelowTheBci) {
  const uint8_t x = GetParam();
  // Single-byte entries, escapes (a bci step over 31, a line step over 7, lines going back), and
  // two entries at one bci.
  const std::vector<uint8_t> table =
      EncodeLineTable({{0, 10}, {4, 12}, {9, 12}, {60, 40}, {70, 30}, {70, 31}, {300, 1000}}, x);
  EXPECT_EQ(LineForBci(table, 0, x).line, 10u);
  EXPECT_EQ(LineForBci(table, 3, x).line, 10u);
  EXPECT_EQ(LineForBci(table, 4, x).line, 12u);
  EXPECT_EQ(LineForBci(table, 59, x).line, 12u);
  EXPECT_EQ(LineForBci(table, 60, x).line, 40u);
  // An exact match: the first entry at that bci, as HotSpot returns at it.
  EXPECT_EQ(LineForBci(table, 70, x).line, 30u);
  // Below: the later of two entries at the same start.
  EXPECT_EQ(LineForBci(table, 71, x).line, 31u);
  EXPECT_EQ(LineForBci(table, 5000, x).line, 1000u);
  EXPECT_FALSE(LineForBci(table, 5000, x).truncated);
}

TEST_P(LineTableTest, NoEntryAtOrBelowGivesNoLine) {
  const uint8_t x = GetParam();
  const std::vector<uint8_t> table = EncodeLineTable({{8, 3}, {20, 5}}, x);
  EXPECT_FALSE(LineForBci(table, 7, x).line.has_value());
  EXPECT_EQ(LineForBci(table, 8, x).line, 3u);
  const std::vector<uint8_t> empty = {0};
  EXPECT_FALSE(LineForBci(empty, 0, x).line.has_value());
}

TEST_P(LineTableTest, TruncatedTableGivesNoLine) {
  const uint8_t x = GetParam();
  const std::vector<uint8_t> table = EncodeLineTable({{0, 10}, {100, 2000}, {200, 2100}}, x);
  for (size_t cut = 0; cut < table.size(); ++cut) {
    std::span<const uint8_t> part(table.data(), cut);
    LineLookup lookup = LineForBci(part, 150, x);
    EXPECT_TRUE(lookup.truncated) << cut;
    EXPECT_FALSE(lookup.line.has_value()) << cut;
  }
}

TEST_P(LineTableTest, GarbageEndsWithinTheBudget) {
  const uint8_t x = GetParam();
  // No terminator anywhere: single-byte entries forever.
  std::vector<uint8_t> garbage(200000, 0x09);
  LineLookup lookup = LineForBci(garbage, 1 << 30, x);
  EXPECT_FALSE(lookup.line.has_value());
  EXPECT_FALSE(lookup.truncated);
}

INSTANTIATE_TEST_SUITE_P(Excluded, LineTableTest, ::testing::Values(0, 1));

TEST(LineTableTest, HandCheckedBytes) {
  // 0x0A: bci += 1, line += 2; 0x1B: bci += 3, line += 3; 0xFF then zigzag 40 (bci += 20) and
  // zigzag 3 (line -= 2) with X = 0.
  const std::vector<uint8_t> table = {0x0A, 0x1B, 0xFF, 40, 3, 0x00};
  EXPECT_EQ(LineForBci(table, 1, 0).line, 2u);
  EXPECT_EQ(LineForBci(table, 4, 0).line, 5u);
  EXPECT_EQ(LineForBci(table, 23, 0).line, 5u);
  EXPECT_EQ(LineForBci(table, 24, 0).line, 3u);
  // With X = 1 the same deltas are one more each.
  const std::vector<uint8_t> table_x1 = {0x0A, 0x1B, 0xFF, 41, 4, 0x00};
  EXPECT_EQ(LineForBci(table_x1, 24, 1).line, 3u);
}

}  // namespace
}  // namespace ember::hotspot
