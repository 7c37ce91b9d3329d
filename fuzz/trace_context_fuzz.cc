// A process's OpenTelemetry contexts are bytes it chooses: the ProcessContext payload, its maps
// line, the header its mapping starts with, and each thread's record. The input is all of them at
// once: a payload (its key map names the records' keys), maps text, a memory image of a header
// and a payload for the seqlock read, and a thread-context record. Every view the record decoder
// returns must lie inside the record or the key map.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "context/process_context.h"
#include "context/thread_record.h"

namespace {

// A header at kHeaderAt (the input's first 32 bytes) and the rest at kPayloadAt; nothing else.
class ImageMemory : public ember::MemoryReader {
 public:
  static constexpr uint64_t kHeaderAt = 0x7f0000000000;
  static constexpr uint64_t kPayloadAt = 0x560000000000;
  explicit ImageMemory(absl::string_view bytes) : bytes_(bytes) {}
  bool Read(uint64_t address, void* out, size_t size) override {
    const absl::string_view header = bytes_.substr(0, 32);
    const absl::string_view payload = bytes_.size() > 32 ? bytes_.substr(32) : absl::string_view();
    for (auto [at, range] : {std::pair{kHeaderAt, header}, std::pair{kPayloadAt, payload}}) {
      if (address >= at && address - at <= range.size() && range.size() - (address - at) >= size) {
        std::memcpy(out, range.data() + (address - at), size);
        return true;
      }
    }
    return false;
  }

 private:
  absl::string_view bytes_;
};

bool Inside(std::string_view view, const void* start, size_t size) {
  const auto* begin = static_cast<const char*>(start);
  return view.empty() || (view.data() >= begin && view.data() + view.size() <= begin + size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  ember::context::ProcessContext context;
  if (ember::context::DecodeProcessContext(bytes, &context)) {
    if (context.key_map.size() > ember::context::kMaxKeyMapEntries) __builtin_trap();
  }
  const auto mappings = ember::context::FindContextMappings(bytes);
  if (mappings.size() > ember::context::kMaxContextMappings) __builtin_trap();
  for (const ember::MemoryMapping& mapping : mappings) {
    if (!ember::context::IsContextMappingName(mapping.path)) __builtin_trap();
  }

  ImageMemory memory(bytes);
  ember::MemoryMapping mapping;
  mapping.start = ImageMemory::kHeaderAt;
  mapping.end = mapping.start + 4096;
  mapping.readable = true;
  ember::context::RawProcessContext raw;
  if (ember::context::ReadProcessContext(memory, mapping, 0, &raw) ==
      ember::context::ReadResult::kOk) {
    if (raw.payload.size() > ember::context::kMaxPayloadBytes || raw.published_at_ns == 0) {
      __builtin_trap();
    }
  }

  std::vector<std::string> key_map = context.key_map;
  if (key_map.empty()) key_map = {"http.route", "", "request.kind"};
  ember::context::ThreadRecordDecoder decoder;
  ember::context::RecordOutcome outcome;
  for (int pass = 0; pass < 2; ++pass) {  // the second reuses the first's storage
    const std::span<const uint8_t> record(data, size);
    ember::SampleContext sample = decoder.Decode(record, key_map, &outcome);
    if (sample.attributes.size() > 256) __builtin_trap();
    for (const ember::SampleAttribute& attribute : sample.attributes) {
      if (!Inside(attribute.value, data, size) || attribute.key.empty()) __builtin_trap();
      bool named = false;
      for (const std::string& name : key_map) named |= attribute.key.data() == name.data();
      if (!named) __builtin_trap();
    }
  }
  return 0;
}
