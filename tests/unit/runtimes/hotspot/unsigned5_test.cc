// UNSIGNED5 against an encoder written from the JDK's definition, and bytes checked by hand.
#include "runtimes/hotspot/unsigned5.h"

#include <gtest/gtest.h>

#include <vector>

#include "namer_memory_image.h"

namespace ember::hotspot {
namespace {

using testing::WriteSigned5;
using testing::WriteUnsigned5;

std::optional<uint32_t> DecodeOne(std::vector<uint8_t> bytes, uint8_t excluded,
                                  size_t* consumed = nullptr) {
  Unsigned5Reader reader(bytes, excluded);
  std::optional<uint32_t> value = reader.ReadUnsigned();
  if (consumed != nullptr) *consumed = reader.position();
  return value;
}

class Unsigned5RoundTrip : public ::testing::TestWithParam<uint8_t> {};

TEST_P(Unsigned5RoundTrip, EveryLengthAndBoundary) {
  const uint8_t x = GetParam();
  const uint32_t low = 256 - 64 - x;
  // The largest values of each length (JDK max_encoded_in_length) and their neighbours.
  std::vector<uint32_t> values = {0,          1,          low - 1,   low,      low + 1,
                                  0x3000,     0xFFFF,     0x10000,   0x0C2000, 0x3082000,
                                  0x7FFFFFFF, 0x80000000, 0xFFFFFFFF};
  uint32_t all = 0;
  uint32_t combinations = low;
  for (int length = 1; length <= 4; ++length) {
    all += combinations;
    combinations <<= 6;
    values.push_back(all - 1);
    values.push_back(all);
  }
  for (uint32_t v = 0; v < 100000; v += 7) values.push_back(v * 2654435761u);
  std::vector<uint8_t> stream;
  for (uint32_t value : values) WriteUnsigned5(value, x, &stream);
  Unsigned5Reader reader(stream, x);
  for (uint32_t value : values) {
    std::optional<uint32_t> decoded = reader.ReadUnsigned();
    ASSERT_TRUE(decoded.has_value()) << value;
    ASSERT_EQ(*decoded, value);
  }
  EXPECT_TRUE(reader.AtEnd());
}

TEST_P(Unsigned5RoundTrip, SignedForm) {
  const uint8_t x = GetParam();
  std::vector<int32_t> values = {0, 1, -1, 2, -2, 63, -64, 1000, -1000, INT32_MAX, INT32_MIN};
  std::vector<uint8_t> stream;
  for (int32_t value : values) WriteSigned5(value, x, &stream);
  Unsigned5Reader reader(stream, x);
  for (int32_t value : values) EXPECT_EQ(reader.ReadSigned(), value);
  // The zigzag mapping itself: 0, -1, 1, -2 take 0, 1, 2, 3.
  EXPECT_EQ(DecodeUnsigned5Sign(0), 0);
  EXPECT_EQ(DecodeUnsigned5Sign(1), -1);
  EXPECT_EQ(DecodeUnsigned5Sign(2), 1);
  EXPECT_EQ(DecodeUnsigned5Sign(3), -2);
}

TEST_P(Unsigned5RoundTrip, TruncatedInputFailsAndKeepsPosition) {
  const uint8_t x = GetParam();
  for (uint32_t value : {200u, 0x3000u, 0x100000u, 0xFFFFFFFFu}) {
    std::vector<uint8_t> bytes;
    WriteUnsigned5(value, x, &bytes);
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      std::vector<uint8_t> part(bytes.begin(), bytes.begin() + cut);
      size_t consumed = 99;
      EXPECT_FALSE(DecodeOne(part, x, &consumed).has_value()) << value << " cut " << cut;
      EXPECT_EQ(consumed, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Excluded, Unsigned5RoundTrip, ::testing::Values(0, 1));

TEST(Unsigned5Test, HandCheckedBytesBeforeJdk20) {
  // X = 0: L = 192, bytes below 192 end a number.
  size_t consumed = 0;
  EXPECT_EQ(DecodeOne({0x00}, 0, &consumed), 0u);
  EXPECT_EQ(consumed, 1u);
  EXPECT_EQ(DecodeOne({191}, 0), 191u);
  // 192 + 1*64 = 256: the first byte's digit is 192 (0 + L), the second adds 1 << 6.
  EXPECT_EQ(DecodeOne({192, 1}, 0, &consumed), 256u);
  EXPECT_EQ(consumed, 2u);
  // 200 + 3*64 = 392.
  EXPECT_EQ(DecodeOne({200, 3, 0x55}, 0, &consumed), 392u);
  EXPECT_EQ(consumed, 2u);
  // Five high bytes: the fifth ends the number whatever it is.
  EXPECT_EQ(DecodeOne({255, 255, 255, 255, 255, 7}, 0, &consumed),
            255u + (255u << 6) + (255u << 12) + (255u << 18) + (255u << 24));
  EXPECT_EQ(consumed, 5u);
}

TEST(Unsigned5Test, HandCheckedBytesFromJdk20) {
  // X = 1: L = 191; byte 0 never appears, byte b stands for b - 1.
  size_t consumed = 0;
  EXPECT_EQ(DecodeOne({0x01}, 1), 0u);
  EXPECT_EQ(DecodeOne({191}, 1), 190u);
  EXPECT_EQ(DecodeOne({192, 1}, 1, &consumed), 191u);
  EXPECT_EQ(consumed, 2u);
  EXPECT_EQ(DecodeOne({200, 4}, 1), 199u + (3u << 6));
  // The excluded byte is refused, first or later.
  EXPECT_FALSE(DecodeOne({0x00}, 1).has_value());
  EXPECT_FALSE(DecodeOne({200, 0x00}, 1).has_value());
}

TEST(Unsigned5Test, NeverReadsMoreThanFiveBytes) {
  std::vector<uint8_t> bytes(64, 0xFF);
  Unsigned5Reader reader(bytes, 1);
  int count = 0;
  while (reader.ReadUnsigned()) ++count;
  EXPECT_EQ(count, 64 / 5);
  EXPECT_EQ(reader.position(), 60u);
}

}  // namespace
}  // namespace ember::hotspot
