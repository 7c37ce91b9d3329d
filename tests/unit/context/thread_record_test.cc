// Thread-context records as a sample carries them: the header's fields, the attribute entries
// named by the key map, and every way a record can lie about its own size.
#include "context/thread_record.h"

#include <cstring>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ember::context {
namespace {

using ::testing::ElementsAre;
using Result = RecordOutcome::Result;

// A record as a writer lays it out: trace id 0x01.., span id 0xa0.., then the entries.
class Record {
 public:
  explicit Record(uint8_t trace_byte = 0x01) {
    bytes_.resize(kRecordHeaderBytes);
    for (int i = 0; i < 16; ++i) bytes_[i] = static_cast<uint8_t>(trace_byte * (i + 1));
    for (int i = 0; i < 8; ++i) bytes_[16 + i] = static_cast<uint8_t>(0xa0 + i);
    bytes_[kRecordValidAt] = 1;
    bytes_[25] = 1;  // sampled
  }
  Record& Attribute(uint8_t key, const std::string& value) {
    bytes_.push_back(key);
    bytes_.push_back(static_cast<uint8_t>(value.size()));
    bytes_.insert(bytes_.end(), value.begin(), value.end());
    return *this;
  }
  Record& Raw(std::vector<uint8_t> raw) {
    bytes_.insert(bytes_.end(), raw.begin(), raw.end());
    return *this;
  }
  // attrs_data_size: what the entries take, unless set.
  std::vector<uint8_t> Bytes(int attrs_size = -1) const {
    std::vector<uint8_t> out = bytes_;
    const uint16_t size = attrs_size >= 0 ? static_cast<uint16_t>(attrs_size)
                                          : static_cast<uint16_t>(out.size() - kRecordHeaderBytes);
    std::memcpy(out.data() + kRecordAttrsSizeAt, &size, sizeof(size));
    return out;
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

const std::vector<std::string> kKeyMap = {"http.route", "http.method", "", "request.kind"};

// The decoder's views are of the record's bytes: each decoded record is kept for the test.
class ThreadRecordTest : public ::testing::Test {
 protected:
  SampleContext Decode(std::vector<uint8_t> bytes, std::span<const std::string> key_map) {
    const std::vector<uint8_t>& kept = records_.emplace_back(std::move(bytes));
    return decoder_.Decode(kept, key_map, &outcome);
  }
  RecordOutcome outcome;

 private:
  ThreadRecordDecoder decoder_;
  std::deque<std::vector<uint8_t>> records_;
};

TEST_F(ThreadRecordTest, LinkAndAttributesNamedByTheKeyMap) {
  const std::vector<uint8_t> bytes =
      Record().Attribute(0, "/checkout").Attribute(1, "POST").Bytes();
  SampleContext context = Decode(bytes, kKeyMap);
  EXPECT_EQ(outcome.result, Result::kOk);
  EXPECT_FALSE(outcome.attribute_truncated);
  EXPECT_EQ(outcome.keys_out_of_range, 0u);
  EXPECT_EQ(context.link.trace_id[0], 0x01);
  EXPECT_EQ(context.link.trace_id[15], 0x10);
  EXPECT_EQ(context.link.span_id[0], 0xa0);
  EXPECT_EQ(context.link.span_id[7], 0xa7);
  EXPECT_THAT(context.attributes, ElementsAre(SampleAttribute{"http.route", "/checkout"},
                                              SampleAttribute{"http.method", "POST"}));
}

TEST_F(ThreadRecordTest, ValidMustBeOne) {
  for (uint8_t valid : {0, 2, 255}) {
    std::vector<uint8_t> bytes = Record().Attribute(0, "/checkout").Bytes();
    bytes[kRecordValidAt] = valid;
    SampleContext context = Decode(bytes, kKeyMap);
    EXPECT_EQ(outcome.result, Result::kInvalid);
    EXPECT_TRUE(context.empty());
  }
}

TEST_F(ThreadRecordTest, ShorterThanItsHeaderIsInvalid) {
  std::vector<uint8_t> bytes = Record().Bytes();
  bytes.resize(kRecordHeaderBytes - 1);
  EXPECT_TRUE(Decode(bytes, kKeyMap).empty());
  EXPECT_EQ(outcome.result, Result::kInvalid);
  EXPECT_TRUE(Decode({}, kKeyMap).empty());
  EXPECT_EQ(outcome.result, Result::kInvalid);
}

TEST_F(ThreadRecordTest, AZeroTraceIdIsNoLinkButKeepsItsAttributes) {
  SampleContext context = Decode(Record(/*trace_byte=*/0).Attribute(3, "search").Bytes(), kKeyMap);
  EXPECT_EQ(outcome.result, Result::kNoTrace);
  EXPECT_TRUE(context.link.empty());
  EXPECT_EQ(context.link, TraceLink{});  // no stray span id either
  EXPECT_THAT(context.attributes, ElementsAre(SampleAttribute{"request.kind", "search"}));
}

TEST_F(ThreadRecordTest, TheLastOccurrenceOfAKeyWinsInItsFirstPlace) {
  SampleContext context = Decode(
      Record().Attribute(0, "/a").Attribute(1, "GET").Attribute(0, "/b").Attribute(0, "/c").Bytes(),
      kKeyMap);
  EXPECT_THAT(context.attributes, ElementsAre(SampleAttribute{"http.route", "/c"},
                                              SampleAttribute{"http.method", "GET"}));
  // The next record starts afresh: nothing of the last one's keys remains.
  context = Decode(Record().Attribute(1, "PUT").Bytes(), kKeyMap);
  EXPECT_THAT(context.attributes, ElementsAre(SampleAttribute{"http.method", "PUT"}));
}

TEST_F(ThreadRecordTest, KeysOutsideTheMapAreSkippedAndCounted) {
  // 2 is in the map without a name; 4 and 200 are past its end.
  SampleContext context = Decode(
      Record().Attribute(2, "x").Attribute(4, "y").Attribute(0, "/ok").Attribute(200, "z").Bytes(),
      kKeyMap);
  EXPECT_THAT(context.attributes, ElementsAre(SampleAttribute{"http.route", "/ok"}));
  EXPECT_EQ(outcome.keys_out_of_range, 3u);
  EXPECT_TRUE(outcome.key_map_stale);
  EXPECT_EQ(outcome.result, Result::kOk);

  context = Decode(Record().Attribute(2, "x").Bytes(), kKeyMap);
  EXPECT_EQ(outcome.keys_out_of_range, 1u);
  EXPECT_FALSE(outcome.key_map_stale);  // a hole in the map is no news of a longer one
  // No key map at all (a process whose context is not read yet).
  context = Decode(Record().Attribute(0, "/a").Bytes(), {});
  EXPECT_TRUE(context.attributes.empty());
  EXPECT_FALSE(context.link.empty());
  EXPECT_TRUE(outcome.key_map_stale);
}

TEST_F(ThreadRecordTest, ValuesThatAreNotUtf8AreSkippedAndCounted) {
  SampleContext context = Decode(
      Record().Attribute(0, "/ok").Attribute(1, "\xff\xfe").Attribute(3, "caf\xc3\xa9").Bytes(),
      kKeyMap);
  EXPECT_THAT(context.attributes, ElementsAre(SampleAttribute{"http.route", "/ok"},
                                              SampleAttribute{"request.kind", "caf\xc3\xa9"}));
  EXPECT_EQ(outcome.invalid_values, 1u);
  EXPECT_EQ(outcome.keys_out_of_range, 0u);
}

TEST_F(ThreadRecordTest, AnEntryThatDoesNotFitEndsTheAttributes) {
  // The second entry says 9 bytes, 3 follow.
  SampleContext context =
      Decode(Record().Attribute(0, "/a").Raw({1, 9, 'G', 'E', 'T'}).Bytes(), kKeyMap);
  EXPECT_THAT(context.attributes, ElementsAre(SampleAttribute{"http.route", "/a"}));
  EXPECT_TRUE(outcome.attribute_truncated);
  // A lone key byte at the end.
  context = Decode(Record().Attribute(0, "/a").Raw({1}).Bytes(), kKeyMap);
  EXPECT_THAT(context.attributes, ElementsAre(SampleAttribute{"http.route", "/a"}));
  EXPECT_TRUE(outcome.attribute_truncated);
}

TEST_F(ThreadRecordTest, AttrsSizeIsTheBoundNotTheBytesCopied) {
  Record record;
  record.Attribute(0, "/a").Attribute(1, "GET");
  // attrs_data_size covers only the first entry: the second is not read.
  SampleContext context = Decode(record.Bytes(4), kKeyMap);
  EXPECT_THAT(context.attributes, ElementsAre(SampleAttribute{"http.route", "/a"}));
  EXPECT_FALSE(outcome.attribute_truncated);
  // attrs_data_size past the bytes the copy holds (a record over the copy's bound, or a lie).
  context = Decode(record.Bytes(60000), kKeyMap);
  EXPECT_THAT(context.attributes, ElementsAre(SampleAttribute{"http.route", "/a"},
                                              SampleAttribute{"http.method", "GET"}));
  EXPECT_TRUE(outcome.attribute_truncated);
  // Zero: no attributes, whatever follows.
  context = Decode(record.Bytes(0), kKeyMap);
  EXPECT_TRUE(context.attributes.empty());
  EXPECT_FALSE(outcome.attribute_truncated);
}

TEST_F(ThreadRecordTest, EveryKeyIdOnce) {
  // 256 distinct ids, then each again: one attribute per id, each with its last value.
  std::vector<std::string> key_map;
  for (int i = 0; i < 256; ++i) key_map.push_back("k" + std::to_string(i));
  Record record;
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < 256; ++i)
      record.Raw({static_cast<uint8_t>(i), 1, static_cast<uint8_t>(pass ? 'b' : 'a')});
  }
  // Longer than a real copy (640 bytes), which the decoder does not assume.
  SampleContext context = Decode(record.Bytes(), key_map);
  ASSERT_EQ(context.attributes.size(), 256u);
  EXPECT_EQ(context.attributes[255], (SampleAttribute{"k255", "b"}));
  EXPECT_EQ(context.attributes[0], (SampleAttribute{"k0", "b"}));
}

}  // namespace
}  // namespace ember::context
