// Decoding a thread-context record's header and attribute entries.
#include "context/thread_record.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "common/utf8.h"

namespace ember::context {

ThreadRecordDecoder::ThreadRecordDecoder() {
  attributes_.reserve(slot_.size());
  keys_.reserve(slot_.size());
}

SampleContext ThreadRecordDecoder::Decode(std::span<const uint8_t> record,
                                          std::span<const std::string> key_map,
                                          RecordOutcome* outcome) {
  *outcome = RecordOutcome{};
  if (record.size() < kRecordHeaderBytes || record[kRecordValidAt] != 1) {
    outcome->result = RecordOutcome::Result::kInvalid;
    return {};
  }
  SampleContext context;
  std::memcpy(context.link.trace_id.data(), record.data(), context.link.trace_id.size());
  std::memcpy(context.link.span_id.data(), record.data() + context.link.trace_id.size(),
              context.link.span_id.size());
  outcome->result =
      context.link.empty() ? RecordOutcome::Result::kNoTrace : RecordOutcome::Result::kOk;
  if (context.link.empty()) context.link = {};  // a span id without a trace is no link

  uint16_t attrs_size;
  std::memcpy(&attrs_size, record.data() + kRecordAttrsSizeAt, sizeof(attrs_size));
  const size_t available = record.size() - kRecordHeaderBytes;
  if (attrs_size > available) outcome->attribute_truncated = true;
  std::span<const uint8_t> attrs =
      record.subspan(kRecordHeaderBytes, std::min<size_t>(attrs_size, available));

  // Only the slots the last record used are cleared: most records carry a few attributes.
  for (uint8_t key : keys_) slot_[key] = 0;
  attributes_.clear();
  keys_.clear();
  size_t at = 0;
  while (at < attrs.size()) {
    if (attrs.size() - at < 2) {
      outcome->attribute_truncated = true;
      break;
    }
    const uint8_t key = attrs[at];
    const uint8_t length = attrs[at + 1];
    if (attrs.size() - at - 2 < length) {
      outcome->attribute_truncated = true;
      break;
    }
    const std::string_view value(reinterpret_cast<const char*>(attrs.data() + at + 2), length);
    at += 2 + size_t{length};
    if (key >= key_map.size() || key_map[key].empty()) {
      ++outcome->keys_out_of_range;
      if (key >= key_map.size()) outcome->key_map_stale = true;
      continue;
    }
    // Values become protobuf strings in both outputs, which must be valid UTF-8.
    if (!IsValidUtf8(absl::string_view(value.data(), value.size()))) {
      ++outcome->invalid_values;
      continue;
    }
    if (slot_[key] != 0) {
      attributes_[slot_[key] - 1].value = value;  // the last occurrence wins, in the first's place
      continue;
    }
    keys_.push_back(key);
    attributes_.push_back({.key = key_map[key], .value = value});
    slot_[key] = static_cast<uint16_t>(attributes_.size());
  }
  context.attributes = attributes_;
  return context;
}

}  // namespace ember::context
