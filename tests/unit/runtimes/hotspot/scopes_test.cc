// PcDesc search and scope chains over bytes written as HotSpot's debug info recorder writes them.
#include "runtimes/hotspot/scopes.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstring>
#include <vector>

#include "namer_memory_image.h"

namespace ember::hotspot {
namespace {

using testing::EncodePcDescs;
using testing::ScopesWriter;

TEST(PcDescTest, ExactForReturnAddressesAtOrAfterForTheLeaf) {
  const std::vector<uint8_t> pcs = EncodePcDescs({{16, 5}, {40, 9}, {41, 12}, {90, 20}});
  PcDescLayout layout;
  std::optional<PcDescEntry> desc = FindPcDesc(pcs, layout, 40, PcMatch::kExact);
  ASSERT_TRUE(desc.has_value());
  EXPECT_EQ(desc->scope_decode_offset, 9);
  EXPECT_FALSE(FindPcDesc(pcs, layout, 39, PcMatch::kExact).has_value());
  // The leaf: the first PcDesc at or after the pc.
  desc = FindPcDesc(pcs, layout, 39, PcMatch::kAtOrAfter);
  ASSERT_TRUE(desc.has_value());
  EXPECT_EQ(desc->pc_offset, 40);
  desc = FindPcDesc(pcs, layout, 0, PcMatch::kAtOrAfter);
  ASSERT_TRUE(desc.has_value());
  EXPECT_EQ(desc->pc_offset, 16);
  desc = FindPcDesc(pcs, layout, 42, PcMatch::kAtOrAfter);
  ASSERT_TRUE(desc.has_value());
  EXPECT_EQ(desc->scope_decode_offset, 20);
  // Past the last real PcDesc: the end sentinel, which has no scope.
  desc = FindPcDesc(pcs, layout, 91, PcMatch::kAtOrAfter);
  ASSERT_TRUE(desc.has_value());
  EXPECT_EQ(desc->pc_offset, INT_MAX);
  EXPECT_EQ(desc->scope_decode_offset, 0);
}

TEST(PcDescTest, EmptyOrMisfitArraysFindNothing) {
  PcDescLayout layout;
  EXPECT_FALSE(FindPcDesc({}, layout, 0, PcMatch::kAtOrAfter).has_value());
  const std::vector<uint8_t> pcs = EncodePcDescs({{16, 5}});
  // A stride too small for the fields, or none.
  EXPECT_FALSE(
      FindPcDesc(pcs, {.stride = 4, .pc_offset = 0, .scope_decode_offset = 4}, 16, PcMatch::kExact)
          .has_value());
  EXPECT_FALSE(FindPcDesc(pcs, {.stride = 0}, 16, PcMatch::kExact).has_value());
  // A partial last entry is not read.
  std::span<const uint8_t> cut(pcs.data(), 16 + 8);
  EXPECT_FALSE(FindPcDesc(cut, layout, 16, PcMatch::kExact).has_value());
}

class ScopesTest : public ::testing::TestWithParam<uint8_t> {};

TEST_P(ScopesTest, ChainInnermostFirst) {
  const uint8_t x = GetParam();
  ScopesWriter writer(x);
  const int32_t outer = writer.Add(0, 1, 12);
  const int32_t middle = writer.Add(outer, 2, 300);
  const int32_t inner = writer.Add(middle, 3, -1);  // at the entry of the inlined method
  ScopeChain chain = DecodeScopes(writer.bytes(), inner, x);
  ASSERT_EQ(chain.status, ScopeStatus::kOk);
  ASSERT_EQ(chain.scopes.size(), 3u);
  EXPECT_EQ(chain.scopes[0].method_index, 3u);
  EXPECT_EQ(chain.scopes[0].bci, -1);
  EXPECT_EQ(chain.scopes[1].method_index, 2u);
  EXPECT_EQ(chain.scopes[1].bci, 300);
  EXPECT_EQ(chain.scopes[2].method_index, 1u);
  EXPECT_EQ(chain.scopes[2].bci, 12);
  // Offset 0: no scope.
  chain = DecodeScopes(writer.bytes(), 0, x);
  EXPECT_EQ(chain.status, ScopeStatus::kOk);
  EXPECT_TRUE(chain.scopes.empty());
}

TEST_P(ScopesTest, HostileChainsEnd) {
  const uint8_t x = GetParam();
  ScopesWriter writer(x);
  const int32_t first = writer.Add(0, 1, 0);
  // A sender at a larger offset: would loop.
  const int32_t self = writer.AddRaw(static_cast<uint32_t>(first + 100), 1, 1);
  writer.AddRaw(static_cast<uint32_t>(self), 1, 1);
  const int32_t loop = static_cast<int32_t>(writer.bytes().size());
  writer.AddRaw(static_cast<uint32_t>(loop), 1, 1);  // its own offset
  ScopeChain chain = DecodeScopes(writer.bytes(), loop, x);
  EXPECT_EQ(chain.status, ScopeStatus::kNotOrdered);
  EXPECT_EQ(chain.scopes.size(), 1u);
  // Out of the data, negative.
  EXPECT_EQ(DecodeScopes(writer.bytes(), 100000, x).status, ScopeStatus::kTruncated);
  EXPECT_EQ(DecodeScopes(writer.bytes(), -5, x).status, ScopeStatus::kTruncated);
  // A sender past the end.
  EXPECT_EQ(DecodeScopes(writer.bytes(), self, x).status, ScopeStatus::kTruncated);
  // A scope cut inside its fields.
  std::vector<uint8_t> cut(writer.bytes().begin(), writer.bytes().begin() + first + 2);
  EXPECT_EQ(DecodeScopes(cut, first, x).status, ScopeStatus::kTruncated);
}

TEST_P(ScopesTest, AtMost64Scopes) {
  const uint8_t x = GetParam();
  ScopesWriter writer(x);
  int32_t offset = 0;
  for (int i = 0; i < 70; ++i) offset = writer.Add(offset, 1, i);
  ScopeChain chain = DecodeScopes(writer.bytes(), offset, x);
  EXPECT_EQ(chain.status, ScopeStatus::kTooDeep);
  EXPECT_EQ(chain.scopes.size(), kMaxScopes);
  EXPECT_EQ(chain.scopes[0].bci, 69);
}

INSTANTIATE_TEST_SUITE_P(Excluded, ScopesTest, ::testing::Values(0, 1));

}  // namespace
}  // namespace ember::hotspot
