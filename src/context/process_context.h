// The OpenTelemetry process context (OTEP 4719, docs/trace-context.md): finding a process's
// OTEL_CTX mapping in its maps, reading the header and payload there with the publisher's seqlock,
// and decoding the payload into resource attributes and the thread context's settings. Every
// byte of it is the profiled process's to choose: nothing here trusts a size, a pointer or a name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/mapping.h"
#include "common/profile.h"
#include "runtimes/process_memory.h"

namespace ember::context {

// The names a publisher's mapping shows in /proc/PID/maps: a shared anonymous mapping named by
// prctl(PR_SET_VMA_ANON_NAME), a private one, and a memfd (the only one a kernel without
// CONFIG_ANON_VMA_NAME shows). A name counts when it starts with one of them, as the OTEP's
// reference reader has it: "/memfd:OTEL_CTX_OTHER" counts too, and the header's signature is what
// tells a real context from a mapping that merely has such a name.
inline constexpr absl::string_view kContextMappingNames[] = {"[anon_shmem:OTEL_CTX]",
                                                             "[anon:OTEL_CTX]", "/memfd:OTEL_CTX"};

// Whether a maps path (without its " (deleted)" suffix) names a process-context mapping.
bool IsContextMappingName(absl::string_view path);

// Candidates kept from one process's maps: a real publisher has one (the OTEP makes the context a
// singleton), a decoy or a stale one may come before it.
inline constexpr size_t kMaxContextMappings = 8;

// The mappings of `maps_text` (/proc/PID/maps) whose name is a process-context mapping's, in the
// text's order, at most kMaxContextMappings: the reader tries each until one has a context's
// signature and version, as the OTEP says. Lines that do not parse are passed over.
std::vector<MemoryMapping> FindContextMappings(absl::string_view maps_text);

// As FindContextMappings, reading the file at `maps_path` piece by piece (a big process's maps
// are megabytes); an error when it cannot be opened or read, or reads empty (an exiting process).
absl::StatusOr<std::vector<MemoryMapping>> FindContextMappingsInFile(const std::string& maps_path);

// The header at the start of the mapping (host endianness).
struct ProcessContextHeader {
  char signature[8];  // "OTEL_CTX", no NUL
  uint32_t version;
  uint32_t payload_size;
  uint64_t published_at_ns;  // 0 while the publisher updates it
  uint64_t payload;          // address of the payload in the publisher's memory
};
static_assert(sizeof(ProcessContextHeader) == 32);

// Payloads above this are not read: the OTEP's reference reader's bound, and far above what a
// resource and a key map of 256 names take.
inline constexpr uint32_t kMaxPayloadBytes = 64 * 1024;
// Header reads per ReadProcessContext while the publisher is mid-update, before giving up (the
// caller tries again later).
inline constexpr int kMaxReadAttempts = 4;

// How a read ended, the `result` label of ember_process_context_reads_total.
enum class ReadResult : uint8_t {
  kOk,            // a consistent header and payload, decoded
  kUnchanged,     // the same timestamp as the last read: nothing to do
  kNoMapping,     // no mapping with a context's name
  kBadSignature,  // a mapping so named without "OTEL_CTX" at its start
  kBadVersion,    // a version other than 1 or 2
  kTooLarge,      // payload_size above kMaxPayloadBytes
  kTorn,          // still being updated after kMaxReadAttempts header reads
  kUnreadable,    // the header or payload could not be read (unmapped, gone, no access)
  kBadPayload,    // not a ProcessContext message
};
inline constexpr size_t kReadResults = 9;
absl::string_view ReadResultName(ReadResult result);
// A mapping that reads so holds no context: the next candidate is tried.
inline bool IsRefusedMapping(ReadResult result) {
  return result == ReadResult::kBadSignature || result == ReadResult::kBadVersion ||
         result == ReadResult::kUnreadable;
}

// The payload of one consistent read.
struct RawProcessContext {
  uint64_t published_at_ns = 0;
  std::string payload;
};

// Reads the header at `mapping`'s start and then the payload, the OTEP's way: a zero timestamp
// means an update is under way; the read is consistent when the timestamp is the same after the
// payload was copied; else it is read again, at most kMaxReadAttempts times. `known_timestamp`:
// the last consistent read's (0: none), for which kUnchanged is returned without a payload read.
ReadResult ReadProcessContext(MemoryReader& memory, const MemoryMapping& mapping,
                              uint64_t known_timestamp, RawProcessContext* out);

// What the payload says, as the agent uses it.
struct ProcessContext {
  uint64_t published_at_ns = 0;
  // The resource attributes with values as text (string, int, bool, double), in payload order;
  // the first of a key kept.
  std::vector<ProcessLabel> resource;
  // threadlocal.schema_version; empty when not published.
  std::string schema_version;
  // threadlocal.attribute_key_map: index = key id of the thread-context records (at most 256,
  // the ids are bytes); an entry that is not a string is an empty name.
  std::vector<std::string> key_map;
  // Resource attributes left out: arrays, key-value lists and bytes (no text form a label can
  // carry), empty keys, repeated keys.
  uint32_t skipped_attributes = 0;
};

// Schemas of the thread context that Ember reads (the TLS pointer to an OTEP 4947 record):
// "tlsdesc_v1_dev" while the OTEP was a draft, "tls_v1" since.
bool IsTlsSchema(absl::string_view schema_version);

inline constexpr size_t kMaxKeyMapEntries = 256;

// Decodes a ProcessContext message; false when `payload` is not one (malformed, invalid UTF-8 in
// a string).
bool DecodeProcessContext(absl::string_view payload, ProcessContext* out);

}  // namespace ember::context
