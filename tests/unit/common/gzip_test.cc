// GzipCompress: what it writes is one gzip member that zlib (as pprof, curl and collectors read
// it) inflates back to the input.
#include "common/gzip.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <optional>
#include <random>
#include <string>

namespace ember {
namespace {

std::optional<std::string> Gunzip(const std::string& gz) {
  z_stream stream{};
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) return std::nullopt;
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  stream.avail_in = static_cast<uInt>(gz.size());
  std::string out;
  char buffer[1 << 14];
  int result = Z_OK;
  while (result == Z_OK) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof(buffer);
    result = inflate(&stream, Z_NO_FLUSH);
    out.append(buffer, sizeof(buffer) - stream.avail_out);
  }
  const bool whole = result == Z_STREAM_END && stream.avail_in == 0;
  inflateEnd(&stream);
  if (!whole) return std::nullopt;
  return out;
}

TEST(GzipTest, ZlibInflatesItBackToTheInput) {
  std::mt19937 random(7);
  std::string text;
  // Repetitive like a profile's strings, with noise, and over a megabyte (many deflate blocks).
  while (text.size() < (3u << 19)) {
    text += "ember::FrameResolver::User(unsigned long) /usr/lib/libc.so.6 ";
    text += static_cast<char>(random() & 0xff);
  }
  for (const std::string& input : {std::string(), std::string("x"), text}) {
    std::string gz;
    ASSERT_TRUE(GzipCompress(input, &gz).ok());
    ASSERT_GE(gz.size(), 18u) << "a gzip member has a 10-byte header and an 8-byte trailer";
    EXPECT_EQ(static_cast<unsigned char>(gz[0]), 0x1f);
    EXPECT_EQ(static_cast<unsigned char>(gz[1]), 0x8b);
    const std::optional<std::string> back = Gunzip(gz);
    ASSERT_TRUE(back.has_value()) << "zlib rejected " << input.size() << " bytes' gzip";
    EXPECT_EQ(*back, input);
  }
  std::string gz;
  ASSERT_TRUE(GzipCompress(text, &gz).ok());
  EXPECT_LT(gz.size(), text.size() / 4) << "repetitive text barely compressed";
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
