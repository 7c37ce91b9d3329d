// The recorded memory the HotSpot unit tests replay: coalescing, reads only inside what was
// recorded, and the text form read back.
#include "support/recorded_memory.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace ember::testing {
namespace {

class ByteMap : public MemoryReader {
 public:
  bool Read(uint64_t address, void* out, size_t size) override {
    if (address < 0x1000 || address + size > 0x1000 + sizeof(bytes)) return false;
    std::memcpy(out, bytes + (address - 0x1000), size);
    return true;
  }
  uint8_t bytes[256];
};

TEST(RecordedMemoryTest, ReplaysExactlyTheBytesReadAndFailsOutsideThem) {
  ByteMap live;
  for (int i = 0; i < 256; ++i) live.bytes[i] = static_cast<uint8_t>(i);
  RecordedMemory recorded;
  RecordingMemoryReader reader(live, recorded);
  uint8_t out[16];
  ASSERT_TRUE(reader.Read(0x1010, out, 8));
  ASSERT_TRUE(reader.Read(0x1018, out, 8));  // touches the first: one range
  ASSERT_TRUE(reader.Read(0x1014, out, 2));  // inside it
  ASSERT_TRUE(reader.Read(0x1080, out, 4));
  EXPECT_FALSE(reader.Read(0x2000, out, 4));  // failed reads are not recorded
  EXPECT_EQ(recorded.range_count(), 2u);
  EXPECT_EQ(recorded.byte_count(), 20u);

  uint8_t back[16] = {};
  ASSERT_TRUE(recorded.Read(0x1010, back, 16));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(back[i], 0x10 + i) << i;
  EXPECT_FALSE(recorded.Read(0x100f, back, 2));  // starts before the range
  EXPECT_FALSE(recorded.Read(0x101f, back, 2));  // runs past its end
  EXPECT_FALSE(recorded.Read(0x1084, back, 1));
  EXPECT_TRUE(recorded.Read(0x1083, back, 1));
  EXPECT_EQ(back[0], 0x83);
}

TEST(RecordedMemoryTest, OverlappingReadsMergeAndTheTextFormRoundTrips) {
  RecordedMemory recorded;
  const std::string a = "abcdef";
  const std::string b = "XYZ";
  recorded.Add(100, a.data(), a.size());
  recorded.Add(104, b.data(), b.size());  // overlaps and extends
  recorded.Add(90, "01", 2);
  recorded.Set("regs.rip", "0x7f00");
  recorded.Set("note", "two words");
  recorded.Set("regs.rip", "0x7f01");  // set again: keeps its place
  EXPECT_EQ(recorded.range_count(), 2u);
  char out[7] = {};
  ASSERT_TRUE(recorded.Read(100, out, 7));
  EXPECT_EQ(std::string(out, 7), "abcdXYZ");

  absl::StatusOr<RecordedMemory> parsed = RecordedMemory::Parse(recorded.Serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->Serialize(), recorded.Serialize());
  ASSERT_NE(parsed->Get("note"), nullptr);
  EXPECT_EQ(*parsed->Get("note"), "two words");
  EXPECT_EQ(*parsed->Get("regs.rip"), "0x7f01");
  EXPECT_EQ(parsed->Get("missing"), nullptr);
  ASSERT_TRUE(parsed->Overwrite(101, "Q", 1));
  ASSERT_TRUE(parsed->Read(100, out, 2));
  EXPECT_EQ(std::string(out, 2), "aQ");
  EXPECT_FALSE(parsed->Overwrite(106, "12", 2));  // past the range's end
}

TEST(RecordedMemoryTest, AMalformedLineIsAnErrorNamingIt) {
  for (const std::string text :
       {"range 10 abc\n", "range zz 00\n", "bytes 10 00\n", "value onlyname\n", "range 10 0g\n"}) {
    absl::StatusOr<RecordedMemory> parsed = RecordedMemory::Parse("# header\n" + text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_NE(parsed.status().message().find("line 2"), std::string::npos) << parsed.status();
  }
  EXPECT_FALSE(RecordedMemory::Load("/nonexistent/recorded").ok());
}

}  // namespace
}  // namespace ember::testing
