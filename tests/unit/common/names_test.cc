// Tests of the name cap (common/names.h) and of log line safety (common/log_safe.h).
#include "common/names.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "common/log_safe.h"
#include "common/profile.h"
#include "common/utf8.h"

namespace ember {
namespace {

TEST(CapNameTest, LeavesNamesThatFitAlone) {
  std::string name(kMaxNameBytes, 'a');
  const uint64_t before = NamesTruncated(NameKind::kFunction);
  EXPECT_FALSE(CapName(name, NameKind::kFunction));
  EXPECT_EQ(name, std::string(kMaxNameBytes, 'a'));
  EXPECT_EQ(NamesTruncated(NameKind::kFunction), before);
}

TEST(CapNameTest, CutsToTheLimitWithTheMarkerAndCounts) {
  std::string name(kMaxNameBytes + 1, 'a');
  const uint64_t before = NamesTruncated(NameKind::kThread);
  EXPECT_TRUE(CapName(name, NameKind::kThread));
  EXPECT_EQ(name.size(), kMaxNameBytes);
  EXPECT_EQ(name, std::string(kMaxNameBytes - 3, 'a') + "\xE2\x80\xA6");
  EXPECT_EQ(NamesTruncated(NameKind::kThread), before + 1);
  // Capping again cuts nothing more and counts nothing.
  EXPECT_FALSE(CapName(name, NameKind::kThread));
  EXPECT_EQ(NamesTruncated(NameKind::kThread), before + 1);
}

TEST(CapNameTest, CutsOnAUtf8Boundary) {
  // A 4-byte sequence (U+1F600) and a 3-byte one (U+20AC) placed across the cut at each offset:
  // the result stays valid UTF-8 and never longer than the limit.
  for (const std::string glyph : {"\xF0\x9F\x98\x80", "\xE2\x82\xAC", "\xC3\xA9"}) {
    for (size_t shift = 0; shift < 4; ++shift) {
      std::string name(kMaxNameBytes - 3 - shift, 'a');
      while (name.size() < 2 * kMaxNameBytes) name += glyph;
      ASSERT_TRUE(IsValidUtf8(name));
      CutName(name);
      EXPECT_LE(name.size(), kMaxNameBytes);
      EXPECT_GE(name.size(), kMaxNameBytes - 3);
      EXPECT_TRUE(IsValidUtf8(name)) << "glyph of " << glyph.size() << ", shift " << shift;
      EXPECT_TRUE(name.ends_with(kNameCutMarker));
    }
  }
}

TEST(CapNameTest, KeepsBytesThatAreNotUtf8) {
  std::string name(2 * kMaxNameBytes, '\xFF');
  CutName(name);
  EXPECT_EQ(name, std::string(kMaxNameBytes - 3, '\xFF') + std::string(kNameCutMarker));
}

TEST(CapNameTest, SmallLimit) {
  std::string name = "abcdef";
  EXPECT_TRUE(CutName(name, 5));
  EXPECT_EQ(name, "ab\xE2\x80\xA6");
}

TEST(CapNameTest, FramesAndSamplesAreCapped) {
  Frame frame;
  frame.function = std::string(3 * kMaxNameBytes, 'f');
  frame.source_file = "a.cc";
  frame.inlined.push_back({.function = std::string(kMaxNameBytes + 10, 'g')});
  const uint64_t before = NamesTruncated(NameKind::kFunction);
  CapFrameNames(frame);
  EXPECT_EQ(frame.function.size(), kMaxNameBytes);
  EXPECT_EQ(frame.inlined[0].function.size(), kMaxNameBytes);
  EXPECT_EQ(frame.source_file, "a.cc");
  EXPECT_EQ(NamesTruncated(NameKind::kFunction), before + 2);

  IntervalProfile profile;
  const std::string long_name(kMaxNameBytes * 2, 'p');
  StackSample& sample = profile.AddSample(1, long_name, "t", {}, 1);
  EXPECT_EQ(sample.process.size(), kMaxNameBytes);
  EXPECT_TRUE(sample.process.ends_with(kNameCutMarker));
  EXPECT_EQ(sample.thread, "t");
}

TEST(LogSafeTest, EscapesControlBytesAndBytesThatAreNotUtf8) {
  EXPECT_EQ(LogSafe("plain /usr/lib/libc.so.6"), "plain /usr/lib/libc.so.6");
  EXPECT_EQ(LogSafe("a\x1b[31m\n"), "a\\x1b[31m\\x0a");
  EXPECT_EQ(LogSafe(std::string("nul\0byte", 8)), "nul\\x00byte");
  EXPECT_EQ(LogSafe("del\x7f"), "del\\x7f");
  EXPECT_EQ(LogSafe("back\\slash"), "back\\\\slash");
  EXPECT_EQ(LogSafe("caf\xC3\xA9"), "caf\xC3\xA9");      // valid UTF-8 stays
  EXPECT_EQ(LogSafe("c1 \xC2\x9B"), "c1 \\xc2\\x9b");    // U+009B, the C1 CSI
  EXPECT_EQ(LogSafe("bad \xFF\xC3"), "bad \\xff\\xc3");  // not UTF-8
  EXPECT_EQ(LogSafe("\xE2\x82"), "\\xe2\\x82");          // a cut sequence
  for (char c = 0; c < 0x20; ++c) {
    EXPECT_EQ(LogSafe(std::string(1, c)).find_first_of(std::string(1, c)), std::string::npos);
  }
}

TEST(LogSafeTest, CutsLongTextAndTellsItsLength) {
  const std::string text(10000, 'x');
  const std::string safe = LogSafe(text);
  EXPECT_EQ(safe, std::string(kLogSafeMaxBytes, 'x') + "...(10000 bytes)");
  EXPECT_EQ(LogSafe(std::string(kLogSafeMaxBytes, 'y')), std::string(kLogSafeMaxBytes, 'y'));
}

TEST(LogRateLimiterTest, LetsThroughAtMostMaxLinesPerWindowAndCountsTheRest) {
  using std::chrono::seconds;
  LogRateLimiter limiter(3, seconds(60));
  const auto t0 = LogRateLimiter::Clock::time_point() + seconds(1000);
  uint64_t suppressed = 99;
  EXPECT_TRUE(limiter.Allow(&suppressed, t0));
  EXPECT_EQ(suppressed, 0u);
  EXPECT_TRUE(limiter.Allow(&suppressed, t0 + seconds(1)));
  EXPECT_TRUE(limiter.Allow(&suppressed, t0 + seconds(2)));
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(limiter.Allow(&suppressed, t0 + seconds(3 + i)));
  EXPECT_FALSE(limiter.Allow(&suppressed, t0 + seconds(59)));
  // A new window: the first line learns of the six held back, the next of none.
  EXPECT_TRUE(limiter.Allow(&suppressed, t0 + seconds(60)));
  EXPECT_EQ(suppressed, 6u);
  EXPECT_TRUE(limiter.Allow(&suppressed, t0 + seconds(61)));
  EXPECT_EQ(suppressed, 0u);
}

}  // namespace
}  // namespace ember
