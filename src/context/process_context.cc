// Finding, reading and decoding a process's OpenTelemetry process context.
#include "context/process_context.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/unique_fd.h"
#include "google/protobuf/stubs/logging.h"
#include "opentelemetry/proto/processcontext/v1development/process_context.pb.h"
#include "process/proc_maps.h"

namespace ember::context {
namespace {

namespace otel = ::opentelemetry::proto;

constexpr char kSignature[8] = {'O', 'T', 'E', 'L', '_', 'C', 'T', 'X'};
constexpr absl::string_view kSchemaVersionKey = "threadlocal.schema_version";
constexpr absl::string_view kKeyMapKey = "threadlocal.attribute_key_map";

// The path column of a maps line: after five space-separated fields; empty when the line has
// fewer.
absl::string_view PathOf(absl::string_view line) {
  size_t at = 0;
  for (int field = 0; field < 5; ++field) {
    while (at < line.size() && line[at] == ' ') ++at;
    while (at < line.size() && line[at] != ' ') ++at;
  }
  while (at < line.size() && line[at] == ' ') ++at;
  return line.substr(at);
}

// The mapping of `line` when it is a context mapping's.
std::optional<MemoryMapping> ContextMappingOf(absl::string_view line) {
  // Most lines fail here, without a parse.
  if (line.find("OTEL_CTX") == absl::string_view::npos) return std::nullopt;
  if (!IsContextMappingName(PathOf(line))) return std::nullopt;
  auto parsed = ParseProcMaps(line);
  if (!parsed.ok() || parsed->size() != 1) return std::nullopt;
  return std::move(parsed->front());
}

// The text of a scalar value; nullopt for arrays, key-value lists, bytes and unset values.
std::optional<std::string> ScalarText(const otel::common::v1::AnyValue& value) {
  using Value = otel::common::v1::AnyValue;
  switch (value.value_case()) {
    case Value::kStringValue:
      return value.string_value();
    case Value::kBoolValue:
      return std::string(value.bool_value() ? "true" : "false");
    case Value::kIntValue:
      return absl::StrCat(value.int_value());
    case Value::kDoubleValue: {
      char text[32];
      auto [end, ec] = std::to_chars(text, text + sizeof(text), value.double_value());
      if (ec != std::errc()) return std::nullopt;
      return std::string(text, end);
    }
    default:
      return std::nullopt;
  }
}

}  // namespace

bool IsContextMappingName(absl::string_view path) {
  for (absl::string_view name : kContextMappingNames) {
    if (absl::StartsWith(path, name)) return true;
  }
  return false;
}

std::vector<MemoryMapping> FindContextMappings(absl::string_view maps_text) {
  std::vector<MemoryMapping> found;
  while (!maps_text.empty() && found.size() < kMaxContextMappings) {
    size_t end = maps_text.find('\n');
    absl::string_view line = maps_text.substr(0, end);
    maps_text.remove_prefix(end == absl::string_view::npos ? maps_text.size() : end + 1);
    if (auto mapping = ContextMappingOf(line)) found.push_back(std::move(*mapping));
  }
  return found;
}

absl::StatusOr<std::vector<MemoryMapping>> FindContextMappingsInFile(const std::string& maps_path) {
  UniqueFd fd(open(maps_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return absl::NotFoundError(absl::StrCat("cannot open ", maps_path));
  std::vector<MemoryMapping> found;
  const auto take = [&found](absl::string_view line) {
    if (auto mapping = ContextMappingOf(line)) found.push_back(std::move(*mapping));
    return found.size() < kMaxContextMappings;
  };
  std::string partial;  // an unfinished line: at most a path's length
  char buffer[16384];
  size_t total = 0;
  while (true) {
    ssize_t n = read(fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(absl::StrCat("cannot read ", maps_path));
    if (n == 0) break;
    total += static_cast<size_t>(n);
    absl::string_view chunk(buffer, static_cast<size_t>(n));
    while (!chunk.empty()) {
      size_t end = chunk.find('\n');
      if (end == absl::string_view::npos) {
        partial.append(chunk.data(), chunk.size());
        break;
      }
      absl::string_view line = chunk.substr(0, end);
      chunk.remove_prefix(end + 1);
      bool more;
      if (!partial.empty()) {
        partial.append(line.data(), line.size());
        more = take(partial);
        partial.clear();
      } else {
        more = take(line);
      }
      if (!more) return found;
    }
  }
  // A live process maps something: empty maps are those of one exiting (a zombie), which says
  // nothing of whether it still published a context.
  if (total == 0) return absl::UnavailableError(absl::StrCat(maps_path, " is empty"));
  take(partial);
  return found;
}

absl::string_view ReadResultName(ReadResult result) {
  switch (result) {
    case ReadResult::kOk:
      return "ok";
    case ReadResult::kUnchanged:
      return "unchanged";
    case ReadResult::kNoMapping:
      return "no_mapping";
    case ReadResult::kBadSignature:
      return "bad_signature";
    case ReadResult::kBadVersion:
      return "bad_version";
    case ReadResult::kTooLarge:
      return "too_large";
    case ReadResult::kTorn:
      return "torn";
    case ReadResult::kUnreadable:
      return "unreadable";
    case ReadResult::kBadPayload:
      return "bad_payload";
  }
  return "unreadable";
}

ReadResult ReadProcessContext(MemoryReader& memory, const MemoryMapping& mapping,
                              uint64_t known_timestamp, RawProcessContext* out) {
  if (!mapping.readable || mapping.end - mapping.start < sizeof(ProcessContextHeader)) {
    return ReadResult::kUnreadable;
  }
  constexpr uint64_t kTimestampAt = offsetof(ProcessContextHeader, published_at_ns);
  for (int attempt = 0; attempt < kMaxReadAttempts; ++attempt) {
    ProcessContextHeader header;
    if (!memory.Read(mapping.start, &header, sizeof(header))) return ReadResult::kUnreadable;
    if (std::memcmp(header.signature, kSignature, sizeof(kSignature)) != 0) {
      return ReadResult::kBadSignature;
    }
    if (header.version != 1 && header.version != 2) return ReadResult::kBadVersion;
    if (header.published_at_ns == 0) continue;  // an update under way
    if (header.published_at_ns == known_timestamp) return ReadResult::kUnchanged;
    if (header.payload_size > kMaxPayloadBytes) return ReadResult::kTooLarge;
    if (header.payload_size > 0 &&
        (header.payload == 0 ||
         header.payload > std::numeric_limits<uint64_t>::max() - header.payload_size)) {
      return ReadResult::kUnreadable;
    }
    out->payload.resize(header.payload_size);
    const bool payload_read = memory.Read(header.payload, out->payload.data(), out->payload.size());
    uint64_t after = 0;
    if (!memory.Read(mapping.start + kTimestampAt, &after, sizeof(after))) {
      return ReadResult::kUnreadable;
    }
    // An update may have freed the payload the header pointed to: a failed read then is torn,
    // not unreadable.
    if (after != header.published_at_ns) continue;
    if (!payload_read) return ReadResult::kUnreadable;
    out->published_at_ns = header.published_at_ns;
    return ReadResult::kOk;
  }
  out->payload.clear();
  return ReadResult::kTorn;
}

bool IsTlsSchema(absl::string_view schema_version) {
  return schema_version == "tlsdesc_v1_dev" || schema_version == "tls_v1";
}

bool DecodeProcessContext(absl::string_view payload, ProcessContext* out) {
  otel::processcontext::v1development::ProcessContext message;
  {
    // Invalid UTF-8 in a string fails the parse, which protobuf would also log: the publisher's
    // mistake is counted (bad_payload), not logged at each read.
    google::protobuf::LogSilencer silence;
    if (!message.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) return false;
  }
  *out = ProcessContext{};
  absl::flat_hash_set<absl::string_view> keys;
  for (const otel::common::v1::KeyValue& attribute : message.resource().attributes()) {
    std::optional<std::string> text = ScalarText(attribute.value());
    if (!text || attribute.key().empty() || !keys.insert(attribute.key()).second) {
      ++out->skipped_attributes;
      continue;
    }
    out->resource.push_back({attribute.key(), std::move(*text)});
  }
  for (const otel::common::v1::KeyValue& attribute : message.attributes()) {
    if (attribute.key() == kSchemaVersionKey && attribute.value().has_string_value()) {
      out->schema_version = attribute.value().string_value();
    } else if (attribute.key() == kKeyMapKey && attribute.value().has_array_value()) {
      out->key_map.clear();
      absl::flat_hash_set<std::string> names;
      for (const otel::common::v1::AnyValue& name : attribute.value().array_value().values()) {
        // Ids are bytes: names past the 256th cannot be referred to.
        if (out->key_map.size() == kMaxKeyMapEntries) break;
        // A name given twice would label a sample twice under one key, and a key the agent
        // measures (k8s.pod.name, container.id, ...) would let a process claim another's identity
        // in the pprof labels: such ids name nothing, and their entries are skipped as unknown.
        const bool usable = name.has_string_value() &&
                            !IsMeasuredResourceKey(name.string_value()) &&
                            names.insert(name.string_value()).second;
        out->key_map.push_back(usable ? name.string_value() : std::string());
      }
    }
  }
  return true;
}

}  // namespace ember::context
