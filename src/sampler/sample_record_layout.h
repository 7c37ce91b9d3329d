// Pins the layout of the records bpf/ writes, so a change on one side alone fails the build, and
// decodes one ring-buffer record without trusting its sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
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
static_assert(offsetof(ember_sample, python_depth) == 60);
static_assert(offsetof(ember_sample, python_status) == 62);
static_assert(offsetof(ember_sample, context_bytes) == 64);
static_assert(offsetof(ember_sample, context_status) == 66);
static_assert(offsetof(ember_sample, user_regs) == 72);
static_assert(sizeof(ember_sample) == 72 + 8 * EMBER_USER_REG_COUNT);
static_assert(sizeof(ember_sample) % 8 == 0);

static_assert(offsetof(ember_python_frame, code) == 0);
static_assert(offsetof(ember_python_frame, position) == 8);
static_assert(offsetof(ember_python_frame, flags) == 16);
static_assert(sizeof(ember_python_frame) == 24);

static_assert(offsetof(ember_python_proc, runtime_address) == 0);
static_assert(offsetof(ember_python_proc, code_type_address) == 8);
static_assert(offsetof(ember_python_proc, tstate_current_address) == 16);
static_assert(offsetof(ember_python_proc, interpreters_head) == 24);
static_assert(offsetof(ember_python_proc, code_type_offset) == 46);
static_assert(offsetof(ember_python_proc, minor) == 48);
static_assert(offsetof(ember_python_proc, frame_header_bytes) == 51);
static_assert(offsetof(ember_python_proc, flags) == 52);

static_assert(offsetof(ember_context_proc, module_id) == 8);
static_assert(offsetof(ember_context_proc, kind) == 16);
static_assert(sizeof(ember_context_proc) == 24);

static_assert(offsetof(ember_unwind_row, pc) == 0);
static_assert(offsetof(ember_unwind_row, cfa_offset) == 8);
static_assert(offsetof(ember_unwind_row, bp_offset) == 12);
static_assert(offsetof(ember_unwind_row, kind) == 14);
static_assert(offsetof(ember_unwind_row, bp_rule) == 15);
static_assert(sizeof(ember_unwind_row) == 16);
static_assert(offsetof(ember_unwind_mapping, table_base) == 24);
static_assert(offsetof(ember_unwind_mapping, first_row) == 32);
static_assert(offsetof(ember_unwind_mapping, bucket_count) == 40);
static_assert(offsetof(ember_unwind_mapping, bucket_shift) == 44);
static_assert(sizeof(ember_unwind_mapping) == 48);
static_assert(offsetof(ember_unwind_proc, mappings) == 8);
static_assert(sizeof(ember_unwind_proc) == 8 + 48 * EMBER_MAX_UNWIND_MAPPINGS);
static_assert(EMBER_MAX_UNWIND_MAPPINGS > 0 &&
              (EMBER_MAX_UNWIND_MAPPINGS & (EMBER_MAX_UNWIND_MAPPINGS - 1)) == 0);
static_assert(sizeof(ember_python_proc) == 56);
static_assert(EMBER_MAX_PYTHON_FRAMES > 0 &&
              (EMBER_MAX_PYTHON_FRAMES & (EMBER_MAX_PYTHON_FRAMES - 1)) == 0);
static_assert(EMBER_MAX_PYTHON_FRAME_HEADER > 0 &&
              (EMBER_MAX_PYTHON_FRAME_HEADER & (EMBER_MAX_PYTHON_FRAME_HEADER - 1)) == 0);

// Where a record's Python frames start, from its first byte: after the addresses and the
// snapshot, rounded up to 8.
constexpr size_t PythonFramesOffset(size_t frames, size_t snapshot_bytes) {
  return (sizeof(ember_sample) + frames * sizeof(uint64_t) + snapshot_bytes + 7) & ~size_t{7};
}

// Where a record's thread-context bytes start: right after its Python frames.
constexpr size_t ContextOffset(size_t frames, size_t snapshot_bytes, size_t python_depth) {
  return PythonFramesOffset(frames, snapshot_bytes) + python_depth * sizeof(ember_python_frame);
}

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
  // CPython frames, leaf first (header->python_status says how the walk ended); empty when the
  // process is not a configured CPython or the thread ran no Python.
  std::span<const ember_python_frame> python_frames;
  // The sampled thread's OpenTelemetry thread-context record as its memory held it (28-byte
  // header, then attribute bytes, at most EMBER_MAX_CONTEXT_BYTES); empty unless
  // header->context_status is EMBER_CONTEXT_OK. Unchecked beyond its size: hostile input.
  std::span<const uint8_t> thread_context;
};

static_assert(sizeof(ember_context_notice) == 8);
static_assert(offsetof(ember_context_notice, kind) == offsetof(ember_sample, kind));
static_assert(offsetof(ember_context_notice, pid) == 4);

// The pid of a process-context re-publish notice (EMBER_RECORD_CONTEXT_NOTICE); nullopt for any
// other record, and for a notice of another record version or size.
inline std::optional<uint32_t> DecodeContextNotice(const void* data, size_t size) {
  if (size < sizeof(ember_context_notice)) return std::nullopt;
  ember_context_notice notice;
  std::memcpy(&notice, data, sizeof(notice));
  if (notice.kind != EMBER_RECORD_CONTEXT_NOTICE || notice.version != EMBER_RECORD_VERSION ||
      size != sizeof(ember_context_notice)) {
    return std::nullopt;
  }
  return notice.pid;
}

enum class DecodeResult { kOk, kTooShort, kBadVersion, kBadKind, kBadLength };

inline DecodeResult DecodeSample(const void* data, size_t size, SampleView* out) {
  if (size < sizeof(ember_sample)) return DecodeResult::kTooShort;
  const auto* header = static_cast<const ember_sample*>(data);
  if (header->version != EMBER_RECORD_VERSION) return DecodeResult::kBadVersion;
  if (header->kind != EMBER_RECORD_SAMPLE) return DecodeResult::kBadKind;
  const size_t frames = size_t{header->kernel_depth} + header->user_depth;
  if (header->kernel_depth > EMBER_MAX_STACK_DEPTH || header->user_depth > EMBER_MAX_STACK_DEPTH ||
      header->python_depth > EMBER_MAX_PYTHON_FRAMES ||
      header->context_bytes > EMBER_MAX_CONTEXT_BYTES ||
      sizeof(ember_sample) + frames * sizeof(uint64_t) + header->user_snapshot_bytes > size) {
    return DecodeResult::kBadLength;
  }
  const size_t python_at = PythonFramesOffset(frames, header->user_snapshot_bytes);
  if (header->python_depth > 0 &&
      python_at + size_t{header->python_depth} * sizeof(ember_python_frame) > size) {
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
  // The ring buffer keeps records 8-byte aligned, so the frames are aligned too.
  out->python_frames = {};
  if (header->python_depth > 0) {
    out->python_frames = {
        reinterpret_cast<const ember_python_frame*>(static_cast<const uint8_t*>(data) + python_at),
        header->python_depth};
  }
  out->thread_context = {};
  if (header->context_bytes > 0) {
    const size_t context_at =
        ContextOffset(frames, header->user_snapshot_bytes, header->python_depth);
    if (context_at + header->context_bytes > size) return DecodeResult::kBadLength;
    out->thread_context = {static_cast<const uint8_t*>(data) + context_at, header->context_bytes};
  }
  return DecodeResult::kOk;
}

}  // namespace ember
