// PcDesc search and scope chain decoding; every read is bounded by the span it was given.
#include "runtimes/hotspot/scopes.h"

#include <capstone/capstone.h>

#include <cstring>
#include <memory>

#include "runtimes/hotspot/unsigned5.h"

namespace ember::hotspot {
namespace {

int32_t IntAt(std::span<const uint8_t> bytes, size_t offset) {
  int32_t value;
  std::memcpy(&value, bytes.data() + offset, sizeof(value));
  return value;
}

struct CapstoneHandle {
  csh handle = 0;
  bool open = false;
  CapstoneHandle() { open = cs_open(CS_ARCH_X86, CS_MODE_64, &handle) == CS_ERR_OK; }
  ~CapstoneHandle() {
    if (open) cs_close(&handle);
  }
  CapstoneHandle(const CapstoneHandle&) = delete;
  CapstoneHandle& operator=(const CapstoneHandle&) = delete;
};

struct InsnDeleter {
  void operator()(cs_insn* insn) const { cs_free(insn, 1); }
};

}  // namespace

std::optional<PcDescEntry> FollowToPcDesc(std::span<const uint8_t> code,
                                          std::span<const uint8_t> pcs, const PcDescLayout& layout,
                                          int32_t pc_offset) {
  if (pc_offset < 0 || static_cast<uint64_t>(pc_offset) >= code.size()) return std::nullopt;
  CapstoneHandle capstone;
  if (!capstone.open) return std::nullopt;
  std::unique_ptr<cs_insn, InsnDeleter> insn(cs_malloc(capstone.handle));
  if (insn == nullptr) return std::nullopt;
  uint64_t at = static_cast<uint64_t>(pc_offset);
  int jumps = 0;
  for (int count = 0; count < kMaxPathInstructions; ++count) {
    std::optional<PcDescEntry> desc =
        FindPcDesc(pcs, layout, static_cast<int32_t>(at), PcMatch::kExact);
    if (desc) return desc;
    const uint8_t* bytes = code.data() + at;
    size_t left = code.size() - at;
    uint64_t address = at;
    if (!cs_disasm_iter(capstone.handle, &bytes, &left, &address, insn.get())) return std::nullopt;
    const unsigned id = insn->id;
    const uint64_t next = at + insn->size;
    if (id == X86_INS_JMP) {
      // Only the direct forms (EB rel8, E9 rel32) have a target known here.
      int64_t displacement;
      if (insn->size == 2 && insn->bytes[0] == 0xEB) {
        displacement = static_cast<int8_t>(insn->bytes[1]);
      } else if (insn->size == 5 && insn->bytes[0] == 0xE9) {
        int32_t rel32;
        std::memcpy(&rel32, insn->bytes + 1, sizeof(rel32));
        displacement = rel32;
      } else {
        return std::nullopt;
      }
      const int64_t target = static_cast<int64_t>(next) + displacement;
      if (++jumps > kMaxPathJumps || target < 0 || static_cast<uint64_t>(target) >= code.size()) {
        return std::nullopt;
      }
      at = static_cast<uint64_t>(target);
      continue;
    }
    // Conditional jumps fall through and calls return to the next instruction (a call's
    // PcDesc is its return address); anything else that leaves ends the path.
    if (id == X86_INS_RET || id == X86_INS_RETF || id == X86_INS_HLT || id == X86_INS_UD2 ||
        id == X86_INS_INT3 || id == X86_INS_LJMP || id == X86_INS_SYSCALL) {
      return std::nullopt;
    }
    if (next >= code.size()) return std::nullopt;
    at = next;
  }
  return std::nullopt;
}

std::optional<PcDescEntry> FindPcDesc(std::span<const uint8_t> pcs, const PcDescLayout& layout,
                                      int32_t pc_offset, PcMatch match) {
  if (layout.stride == 0 || layout.pc_offset > layout.stride - 4 ||
      layout.scope_decode_offset > layout.stride - 4 || layout.stride < 4) {
    return std::nullopt;
  }
  const size_t count = pcs.size() / layout.stride;
  auto pc_at = [&](size_t i) { return IntAt(pcs, i * layout.stride + layout.pc_offset); };
  // The first entry whose pc offset is >= pc_offset (lower bound); on unsorted garbage it is
  // still some entry, found in log2(count) steps.
  size_t low = 0;
  size_t high = count;
  while (low < high) {
    const size_t mid = low + (high - low) / 2;
    if (pc_at(mid) < pc_offset) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  if (low == count) return std::nullopt;
  const int32_t found = pc_at(low);
  if (match == PcMatch::kExact && found != pc_offset) return std::nullopt;
  return PcDescEntry{
      .pc_offset = found,
      .scope_decode_offset = IntAt(pcs, low * layout.stride + layout.scope_decode_offset)};
}

ScopeChain DecodeScopes(std::span<const uint8_t> scopes_data, int32_t decode_offset,
                        uint8_t excluded) {
  ScopeChain chain;
  int64_t offset = decode_offset;
  int64_t previous = INT64_MAX;
  while (offset != 0) {
    if (offset < 0 || static_cast<uint64_t>(offset) >= scopes_data.size()) {
      chain.status = ScopeStatus::kTruncated;
      return chain;
    }
    // Senders are written before the scopes they call, so offsets strictly decrease outwards.
    if (offset >= previous) {
      chain.status = ScopeStatus::kNotOrdered;
      return chain;
    }
    if (chain.scopes.size() == kMaxScopes) {
      chain.status = ScopeStatus::kTooDeep;
      return chain;
    }
    Unsigned5Reader reader(scopes_data, excluded);
    reader.set_position(static_cast<size_t>(offset));
    std::optional<uint32_t> sender = reader.ReadUnsigned();
    std::optional<uint32_t> method_index = sender ? reader.ReadUnsigned() : std::nullopt;
    std::optional<uint32_t> bci_plus_one = method_index ? reader.ReadUnsigned() : std::nullopt;
    if (!bci_plus_one) {
      chain.status = ScopeStatus::kTruncated;
      return chain;
    }
    chain.scopes.push_back(
        {.method_index = *method_index, .bci = static_cast<int32_t>(*bci_plus_one - 1)});
    previous = offset;
    // The stored offset is an int written as unsigned: a "negative" one fails the bound above.
    offset = static_cast<int32_t>(*sender);
  }
  return chain;
}

}  // namespace ember::hotspot
