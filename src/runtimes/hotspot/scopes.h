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

// Bounds of the path FollowToPcDesc decodes: far more than a loop body or a block needs, and a
// small cost once per distinct leaf pc.
inline constexpr int kMaxPathInstructions = 512;
inline constexpr int kMaxPathJumps = 16;

// The PcDesc the leaf's pc reaches first when execution goes on from it (x86-64): instructions of
// `code` (the nmethod's code, pc offset 0 at its first byte) are decoded from `pc_offset`, direct
// unconditional jumps followed, conditional ones taken as falling through, until an instruction
// starts at a PcDesc's pc. Without debug info for non-safepoints (DebugNonSafepoints is off by
// default), C2 records PcDescs only at calls and safepoint polls, and lays blocks out in an order
// of its own: a hot loop's body can sit before the call site of another inlined method while its
// safepoint poll sits above it, reached by the loop's closing jump. The PcDesc next in address
// order (HotSpot's pc_desc_near, which AsyncGetCallTrace and JFR take) then names that other
// method; the next one in execution order names the loop's own scope. nullopt when the path ends
// first (a return, an indirect jump, a byte that does not decode, the code's end, the bounds):
// the caller then takes the next PcDesc in address order.
std::optional<PcDescEntry> FollowToPcDesc(std::span<const uint8_t> code,
                                          std::span<const uint8_t> pcs, const PcDescLayout& layout,
                                          int32_t pc_offset);

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
