// An OpenTelemetry thread-context record (OTEP 4947) as the BPF program copied it into a sample,
// turned into the sample's context: its trace link and its attributes named by the process
// context's key map. Per-sample code: no allocation once warm, no error text, outcomes counted.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/profile.h"

namespace ember::context {

// The 28 bytes before the attributes (packed, host endianness).
inline constexpr size_t kRecordHeaderBytes = 28;
inline constexpr size_t kRecordValidAt = 24;
inline constexpr size_t kRecordAttrsSizeAt = 26;

// What a decode found beyond its context.
struct RecordOutcome {
  enum class Result : uint8_t {
    kOk,       // a valid record with a trace id
    kNoTrace,  // valid, trace id all zero: no link (its attributes still count)
    kInvalid,  // shorter than its header, or valid != 1: no context at all
  };
  Result result = Result::kInvalid;
  // An attribute entry ran past the record's end (or the bytes the BPF program copied): the
  // entries before it were kept.
  bool attribute_truncated = false;
  // Entries whose key id has no name in the key map: skipped. The key map is append-only, so an
  // id past its end asks for the process context to be read again.
  uint32_t keys_out_of_range = 0;
  bool key_map_stale = false;  // some id was at or past the key map's size
  // Entries whose value is not valid UTF-8: skipped.
  uint32_t invalid_values = 0;
};

// Decodes records one at a time. The attributes it returns view `record` and `key_map` and its
// own storage, reused by the next call: valid until then, and while both live.
class ThreadRecordDecoder {
 public:
  ThreadRecordDecoder();

  // `record`: the record's bytes as copied (header, then attribute bytes, maybe cut short of
  // attrs_data_size by the copy's bound). `key_map`: the process context's names, by key id.
  SampleContext Decode(std::span<const uint8_t> record, std::span<const std::string> key_map,
                       RecordOutcome* outcome);

 private:
  std::vector<SampleAttribute> attributes_;  // capacity for one per key id, reserved once
  std::vector<uint8_t> keys_;                // the key id of each of attributes_
  // Per key id: its place in attributes_ plus one (0: not seen in this record).
  std::array<uint16_t, 256> slot_{};
};

}  // namespace ember::context
