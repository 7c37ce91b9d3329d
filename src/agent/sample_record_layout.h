// Pins the layout of the records bpf/ writes, so a change on one side alone fails the build, and
// decodes one ring-buffer record without trusting its sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" {
#include "sample_record.h"
}

namespace ember {

static_assert(offsetof(ember_sample, flags) == 4);
static_assert(offsetof(ember_sample, pid) == 8);
static_assert(offsetof(ember_sample, tid) == 12);
static_assert(offsetof(ember_sample, timestamp_ns) == 16);
static_assert(offsetof(ember_sample, cgroup_id) == 24);
static_assert(offsetof(ember_sample, cpu) == 32);
static_assert(offsetof(ember_sample, kernel_depth) == 36);
static_assert(offsetof(ember_sample, user_depth) == 38);
static_assert(offsetof(ember_sample, comm) == 40);
static_assert(offsetof(ember_sample, user_snapshot_bytes) == 56);
static_assert(offsetof(ember_sample, reserved) == 60);
static_assert(offsetof(ember_sample, user_regs) == 64);
static_assert(sizeof(ember_sample) == 64 + 8 * EMBER_USER_REG_COUNT);

// A record checked against its own sizes; views point into the ring buffer.
struct SampleView {
  const ember_sample* header = nullptr;
  std::span<const uint64_t> kernel_ips;  // leaf first
  std::span<const uint64_t> user_ips;    // leaf first, from the frame-pointer walk
  // The EMBER_USER_REG_COUNT user registers (DWARF numbering); empty when the record has none
  // (kernel threads).
  std::span<const uint64_t> user_regs;
  // The user stack from user_regs[EMBER_USER_REG_SP] upwards; empty without a snapshot.
  std::span<const uint8_t> user_stack;
};

enum class DecodeResult { kOk, kTooShort, kBadVersion, kBadKind, kBadLength };

inline DecodeResult DecodeSample(const void* data, size_t size, SampleView* out) {
  if (size < sizeof(ember_sample)) return DecodeResult::kTooShort;
  const auto* header = static_cast<const ember_sample*>(data);
  if (header->version != EMBER_RECORD_VERSION) return DecodeResult::kBadVersion;
  if (header->kind != EMBER_RECORD_SAMPLE) return DecodeResult::kBadKind;
  const size_t frames = size_t{header->kernel_depth} + header->user_depth;
  if (header->kernel_depth > EMBER_MAX_STACK_DEPTH || header->user_depth > EMBER_MAX_STACK_DEPTH ||
      sizeof(ember_sample) + frames * sizeof(uint64_t) + header->user_snapshot_bytes > size) {
    return DecodeResult::kBadLength;
  }
  const auto* ips = reinterpret_cast<const uint64_t*>(header + 1);
  out->header = header;
  out->kernel_ips = {ips, header->kernel_depth};
  out->user_ips = {ips + header->kernel_depth, header->user_depth};
  if (header->flags & EMBER_SAMPLE_USER_REGS) {
    out->user_regs = {reinterpret_cast<const uint64_t*>(header->user_regs), EMBER_USER_REG_COUNT};
    out->user_stack = {reinterpret_cast<const uint8_t*>(ips + frames), header->user_snapshot_bytes};
  } else {
    out->user_regs = {};
    out->user_stack = {};
  }
  return DecodeResult::kOk;
}

}  // namespace ember
