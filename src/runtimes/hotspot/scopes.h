// An nmethod's debug information as pure functions over copied bytes: the PcDesc of a pc
// (JDK code/nmethod.cpp find_pc_desc) and the chain of scopes inlined there
// (code/scopeDesc.cpp decode_body), innermost first.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace ember::hotspot {

// At most this many scopes are decoded at one pc (inlining is far shallower in practice).
inline constexpr size_t kMaxScopes = 64;

// Where the PcDesc fields lie (HotSpotLayout::pc_desc_*), each a 4-byte int.
struct PcDescLayout {
  uint32_t stride = 16;  // sizeof(PcDesc)
  uint32_t pc_offset = 0;
  uint32_t scope_decode_offset = 4;
};

struct PcDescEntry {
  int32_t pc_offset = 0;
  int32_t scope_decode_offset = 0;
};

enum class PcMatch {
  // A return address: HotSpot records each call's return pc, so only an equal pc_offset names
  // it (pc_desc_at).
  kExact,
  // The leaf's pc, anywhere in the code: the first PcDesc at or after it (pc_desc_near). A pc
  // past the last real PcDesc lands on the end sentinel, whose scope is the nmethod's own method.
  kAtOrAfter,
};

// The PcDesc for `pc_offset` (pc minus the code's start) in the PcDesc array `pcs` (its bytes,
// sentinels included), found by binary search of the sorted pc offsets; nullopt when none
// matches, when the layout does not fit the stride or when the array is empty.
std::optional<PcDescEntry> FindPcDesc(std::span<const uint8_t> pcs, const PcDescLayout& layout,
                                      int32_t pc_offset, PcMatch match);

struct ScopeEntry {
  // Index into the nmethod's metadata array as stored: metadata[method_index - 1] is the Method*,
  // 0 is null.
  uint32_t method_index = 0;
  int32_t bci = -1;  // -1 (InvocationEntryBci): the method's entry, before its first bytecode
};

enum class ScopeStatus {
  kOk,
  kTruncated,   // a decode offset or a field ran past the scopes data
  kNotOrdered,  // a sender's offset did not decrease (a loop in garbage)
  kTooDeep,     // more than kMaxScopes
};

struct ScopeChain {
  ScopeStatus status = ScopeStatus::kOk;
  std::vector<ScopeEntry> scopes;  // innermost first; what was decoded before a failure
};

// The scopes at `decode_offset` in `scopes_data`: each is UNSIGNED5 (sender decode offset,
// method index, bci + 1), the sender's offset 0 (serialized_null) ending the chain. A decode
// offset of 0 gives no scope (the nmethod's own method, bci unknown). `excluded` is
// HotSpotLayout::unsigned5_excluded.
ScopeChain DecodeScopes(std::span<const uint8_t> scopes_data, int32_t decode_offset,
                        uint8_t excluded);

}  // namespace ember::hotspot
