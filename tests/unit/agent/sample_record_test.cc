// Decoding ring-buffer records never trusts the sizes a record claims.
#include <cstring>
#include <vector>

#include "agent/sample_record_layout.h"
#include "gtest/gtest.h"

namespace ember {
namespace {

std::vector<uint8_t> Record(uint16_t kernel, uint16_t user, size_t extra_bytes = 0) {
  std::vector<uint8_t> bytes(sizeof(ember_sample) + (kernel + user) * 8 + extra_bytes);
  ember_sample header{};
  header.version = EMBER_RECORD_VERSION;
  header.kind = EMBER_RECORD_SAMPLE;
  header.kernel_depth = kernel;
  header.user_depth = user;
  std::memcpy(bytes.data(), &header, sizeof(header));
  for (size_t i = 0; i < kernel + user; ++i) {
    uint64_t ip = 0x1000 + i;
    std::memcpy(bytes.data() + sizeof(header) + i * 8, &ip, 8);
  }
  return bytes;
}

TEST(SampleRecordTest, SplitsKernelAndUserAddresses) {
  std::vector<uint8_t> bytes = Record(2, 3);
  SampleView view;
  ASSERT_EQ(DecodeSample(bytes.data(), bytes.size(), &view), DecodeResult::kOk);
  ASSERT_EQ(view.kernel_ips.size(), 2u);
  ASSERT_EQ(view.user_ips.size(), 3u);
  EXPECT_EQ(view.kernel_ips[1], 0x1001u);
  EXPECT_EQ(view.user_ips[0], 0x1002u);
}

TEST(SampleRecordTest, RejectsShortWrongVersionAndOverlongRecords) {
  SampleView view;
  std::vector<uint8_t> bytes = Record(2, 3);
  EXPECT_EQ(DecodeSample(bytes.data(), 10, &view), DecodeResult::kTooShort);
  EXPECT_EQ(DecodeSample(bytes.data(), bytes.size() - 1, &view), DecodeResult::kBadLength);
  bytes[0] = 99;
  EXPECT_EQ(DecodeSample(bytes.data(), bytes.size(), &view), DecodeResult::kBadVersion);
  bytes = Record(200, 0);
  EXPECT_EQ(DecodeSample(bytes.data(), bytes.size(), &view), DecodeResult::kBadLength);
  bytes = Record(0, 0);
  bytes[2] = 7;  // kind
  EXPECT_EQ(DecodeSample(bytes.data(), bytes.size(), &view), DecodeResult::kBadKind);
}

}  // namespace
}  // namespace ember
