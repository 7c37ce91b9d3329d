// GzipCompress: what it writes is one gzip member that zlib (as pprof, curl and collectors read
// it) inflates back to the input.
#include "common/gzip.h"

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>

#include "support/gunzip.h"

namespace ember {
namespace {

using testing::Gunzip;

TEST(GzipTest, ZlibInflatesItBackToTheInput) {
  std::mt19937 random(7);
  std::string text;
  // Repetitive like a profile's strings, with noise, and over a megabyte (many deflate blocks).
  while (text.size() < (3u << 19)) {
    text += "ember::FrameResolver::User(unsigned long) /usr/lib/libc.so.6 ";
    text += static_cast<char>(random() & 0xff);
  }
  for (const std::string& input : {std::string(), std::string("x"), text}) {
    for (int level : {kGzipFastest, kGzipSmaller}) {
      std::string gz;
      ASSERT_TRUE(GzipCompress(input, &gz, level).ok());
      ASSERT_GE(gz.size(), 18u) << "a gzip member has a 10-byte header and an 8-byte trailer";
      EXPECT_EQ(static_cast<unsigned char>(gz[0]), 0x1f);
      EXPECT_EQ(static_cast<unsigned char>(gz[1]), 0x8b);
      const std::optional<std::string> back = Gunzip(gz);
      ASSERT_TRUE(back.has_value()) << "zlib rejected " << input.size() << " bytes' gzip";
      EXPECT_EQ(*back, input);
    }
  }
  std::string fast;
  std::string small;
  ASSERT_TRUE(GzipCompress(text, &fast, kGzipFastest).ok());
  ASSERT_TRUE(GzipCompress(text, &small, kGzipSmaller).ok());
  EXPECT_LT(fast.size(), text.size() / 4) << "repetitive text barely compressed";
  EXPECT_LT(small.size(), fast.size()) << "the level for the network is not the smaller";
}

TEST(GzipTest, LevelOutOfRangeIsAnErrorNotACrash) {
  std::string gz;
  const absl::Status status = GzipCompress("abc", &gz, 99);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("level 99"), std::string::npos) << status;
}

TEST(GzipTest, OutputReplacesWhatTheStringHeld) {
  std::string gz = "left over from before";
  ASSERT_TRUE(GzipCompress("abc", &gz).ok());
  const std::optional<std::string> back = Gunzip(gz);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, "abc");
}

}  // namespace
}  // namespace ember
