// PcDesc search and scope chains over bytes written as HotSpot's debug info recorder writes them.
#include "runtimes/hotspot/scopes.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
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

// The code of a JDK 11 C2 nmethod, copied from a live JVM (-Xcomp, ember.fixture.Phases.runPhase,
// compile id 3044) with its five PcDescs' pcs: 0x18 the entry, 0x4c the call of leafBeta inlined
// through betaOuter and betaInner, 0xa8 the native call of cpuNs, 0x10b the safepoint poll of
// inlined leafGamma's strip-mined loop (bci 26), 0x2c8 the call of leafAlpha inlined through
// alphaOuter. leafGamma's unrolled loop body is 0x130..0x2a0 with no PcDesc of its own; its
// closing "jl 0x130" falls through to "jmp 0x104", which reaches the poll.
constexpr char kJdk11RunPhaseCode[] =
    "89842400c0feff554883ec30488bea89342490e80869ecf84889442408488bdd4885db0f8e7c0200008b0c2481c100"
    "000080bd803e0000e985000000894c2404"
    "48895c24106690e874d0ffff448b1c24488b5c2410eb3981ff60ea00007d1f90458bd141c1ea054569c9e62ebb2745"
    "03ca4403cfffc781ff60ea00007ce249ba"
    "a0f8c19e0600000045894a7c894c240448895c241044891c2448be60f3c89e06000000e8d8c3ffff482b442408483b"
    "4424100f8def010000488b5c24108b4c24"
    "04448b1c244183fb010f846dffffff81f9ffffff7f760a4183fb020f8cd601000049baa0f8c19e06000000458b427c"
    "4569c8e62ebb2741c1e8054503c8bf0100"
    "0000eb164d8b870801000041850081ff51ea00000f8d3dffffff41ba51ea0000442bd7443bd5440f4fd54403d76666"
    "90448bc74183c00c8bf783c6084169d1e6"
    "2ebb2741c1e9054103d103d78bc2c1e8054469cae62ebb274403c84403cf4169c1e62ebb2741ffc141c1e9054403c8"
    "4403cf4181c1e82ebb27418bd1c1ea0541"
    "69c1e62ebb2703c203c7448bc84183c10369c0e62ebb2741c1e9054103c103c781c0b68c3177448bc841c1e90569c0"
    "e62ebb274103c103c7448bc84183c10483"
    "c0054169d1e62ebb27c1e80503c203c781c0ec2ebb27448bc841c1e90569c0e62ebb274103c103c783c007448bc841"
    "c1e90569c0e62ebb274103c103c6448bc8"
    "41c1e90569c0e62ebb274103c103c64469c8e62ebb27ffc0c1e8054103c103c681c0e82ebb278bd0c1ea054469c8e6"
    "2ebb274403ca4403ce4169c1e62ebb2741"
    "83c10341c1e9054403c84503c84181c1b28c3177418bd1c1ea054169c1e62ebb2703c24103c04469c8e62ebb27ffc0"
    "c1e8054103c14103c081c0e82ebb278bd0"
    "c1ea054469c8e62ebb274403ca4403ce4183c10783c710413bfa0f8c90feffffe95ffeffff33c04883c4305d4d8b97"
    "08010000418502c3894c240448895c2410"
    "666690e8f8e3ffff448b1c24488b5c2410e9bafdffff488bf0eb0d488bf0eb08488bf0eb03488bf04883c4305de92e"
    "c850f8f4f4f4f4f4f4f4f4f4f4f4f4f4f4"
    "48bb0000000000000000e9fbffffff48bb0000000000000000e9fbffffff48bb0000000000000000e9fbffffff48bb"
    "0000000000000000e9fbffffffe9df2947"
    "f8e80000000048832c2405e9709545f8";
constexpr int32_t kPoll = 0x10b, kAlphaCall = 0x2c8;

std::vector<uint8_t> Jdk11RunPhaseCode() {
  std::string bytes = absl::HexStringToBytes(kJdk11RunPhaseCode);
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

std::vector<uint8_t> Jdk11RunPhasePcs() {
  return EncodePcDescs({{0x18, 1}, {0x4c, 2}, {0xa8, 3}, {kPoll, 4}, {kAlphaCall, 5}});
}

TEST(FollowToPcDescTest, LeafInALoopBodyReachesItsLoopsPollNotTheNextCallSite) {
  const std::vector<uint8_t> code = Jdk11RunPhaseCode();
  ASSERT_EQ(code.size(), 0x350u);
  const std::vector<uint8_t> pcs = Jdk11RunPhasePcs();
  PcDescLayout layout;
  // Leaf pcs sampled in leafGamma's loop: in address order the next PcDesc is alphaOuter's call.
  for (int32_t leaf : {0x130, 0x143, 0x1d6, 0x26d, 0x29a, 0x2a0}) {
    std::optional<PcDescEntry> near = FindPcDesc(pcs, layout, leaf, PcMatch::kAtOrAfter);
    ASSERT_TRUE(near.has_value());
    EXPECT_EQ(near->pc_offset, kAlphaCall) << leaf;
    std::optional<PcDescEntry> reached = FollowToPcDesc(code, pcs, layout, leaf);
    ASSERT_TRUE(reached.has_value()) << leaf;
    EXPECT_EQ(reached->pc_offset, kPoll) << leaf;
    EXPECT_EQ(reached->scope_decode_offset, 4) << leaf;
  }
  // At a PcDesc's own pc, and on straight-line code before a call: that PcDesc.
  EXPECT_EQ(FollowToPcDesc(code, pcs, layout, kPoll)->pc_offset, kPoll);
  EXPECT_EQ(FollowToPcDesc(code, pcs, layout, 0x2b7)->pc_offset, kAlphaCall);
  // The loop's exit path returns (0x2a5 .. ret at 0x2b6) before any PcDesc.
  EXPECT_FALSE(FollowToPcDesc(code, pcs, layout, 0x2a5).has_value());
}

TEST(FollowToPcDescTest, PathsThatEndOrLeaveTheCodeFindNothing) {
  const std::vector<uint8_t> code = Jdk11RunPhaseCode();
  const std::vector<uint8_t> pcs = Jdk11RunPhasePcs();
  PcDescLayout layout;
  EXPECT_FALSE(FollowToPcDesc(code, pcs, layout, -1).has_value());
  EXPECT_FALSE(FollowToPcDesc(code, pcs, layout, 0x350).has_value());
  EXPECT_FALSE(FollowToPcDesc({}, pcs, layout, 0).has_value());
  // The code cut short before the loop's jump back to the poll.
  std::span<const uint8_t> cut(code.data(), 0x29a);
  EXPECT_FALSE(FollowToPcDesc(cut, pcs, layout, 0x143).has_value());
  // A jump out of the code, a jump to itself (bounded), an indirect jump, bytes that do not decode.
  const std::vector<uint8_t> out = {0xe9, 0x00, 0x10, 0x00, 0x00, 0x90};
  EXPECT_FALSE(FollowToPcDesc(out, EncodePcDescs({{5, 1}}), layout, 0).has_value());
  const std::vector<uint8_t> spin = {0xeb, 0xfe, 0x90};
  EXPECT_FALSE(FollowToPcDesc(spin, EncodePcDescs({{2, 1}}), layout, 0).has_value());
  const std::vector<uint8_t> indirect = {0xff, 0xe0, 0x90};  // jmp *%rax
  EXPECT_FALSE(FollowToPcDesc(indirect, EncodePcDescs({{2, 1}}), layout, 0).has_value());
  const std::vector<uint8_t> garbage = {0x0f, 0x0b, 0x90};  // ud2
  EXPECT_FALSE(FollowToPcDesc(garbage, EncodePcDescs({{2, 1}}), layout, 0).has_value());
  // A straight path of nops longer than the bound.
  std::vector<uint8_t> nops(kMaxPathInstructions + 2, 0x90);
  EXPECT_FALSE(
      FollowToPcDesc(nops, EncodePcDescs({{kMaxPathInstructions + 1, 1}}), layout, 0).has_value());
  EXPECT_EQ(
      FollowToPcDesc(nops, EncodePcDescs({{kMaxPathInstructions - 1, 1}}), layout, 0)->pc_offset,
      kMaxPathInstructions - 1);
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
