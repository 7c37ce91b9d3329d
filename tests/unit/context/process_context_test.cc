// The process context reader: finding the mapping in maps text, the seqlock read against hostile
// headers and payloads, decoding, and a live publisher read through process_vm_readv.
#include "context/process_context.h"

#include <chrono>
#include <cstring>
#include <deque>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "opentelemetry/proto/processcontext/v1development/process_context.pb.h"
#include "support/recorded_memory.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

namespace ember::context {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::Optional;

namespace otel = ::opentelemetry::proto;

std::string MapsLine(uint64_t start, uint64_t end, const std::string& perms,
                     const std::string& path) {
  return absl::StrFormat("%x-%x %s 00000000 00:01 4242                       %s\n", start, end,
                         perms, path);
}

const std::string kOtherLines =
    MapsLine(0x555555554000, 0x555555556000, "r-xp", "/usr/bin/server") +
    MapsLine(0x7f0000000000, 0x7f0000001000, "rw-p", "[heap]") +
    // Decoys: the name elsewhere in the path, or cut short.
    MapsLine(0x7f0000010000, 0x7f0000011000, "rw-s", "/tmp/memfd:OTEL_CTX") +
    MapsLine(0x7f0000020000, 0x7f0000021000, "rw-p", "[anon:OTEL_CT]") +
    MapsLine(0x7f0000030000, 0x7f0000031000, "rw-s", "/memfd:OTEL (deleted)");

TEST(FindContextMappingTest, FindsEachNameTheOtepLists) {
  for (const std::string path : {"[anon_shmem:OTEL_CTX]", "[anon:OTEL_CTX]",
                                 "/memfd:OTEL_CTX (deleted)", "/memfd:OTEL_CTX"}) {
    SCOPED_TRACE(path);
    auto found =
        FindContextMappings(kOtherLines + MapsLine(0x7f1000000000, 0x7f1000001000, "rw-s", path));
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].start, 0x7f1000000000u);
    EXPECT_EQ(found[0].end, 0x7f1000001000u);
    EXPECT_TRUE(found[0].readable);
    EXPECT_EQ(found[0].deleted, absl::StrContains(path, "(deleted)"));
  }
}

TEST(FindContextMappingTest, NoneAmongDecoys) {
  EXPECT_TRUE(FindContextMappings(kOtherLines).empty());
  EXPECT_TRUE(FindContextMappings("").empty());
}

TEST(FindContextMappingTest, StartsWithIsTheRuleAndEveryCandidateComesInOrder) {
  // A longer name starting with a context's name counts (the signature check tells a real one);
  // it comes first here, and the reader tries it first.
  auto found = FindContextMappings(
      kOtherLines + MapsLine(0x7f2000000000, 0x7f2000001000, "rw-s", "/memfd:OTEL_CTX_OTHER") +
      MapsLine(0x7f3000000000, 0x7f3000001000, "rw-s", "/memfd:OTEL_CTX (deleted)"));
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].start, 0x7f2000000000u);
  EXPECT_EQ(found[1].start, 0x7f3000000000u);
}

TEST(FindContextMappingTest, AtMostSoManyCandidates) {
  std::string text;
  for (uint64_t i = 0; i < 3 * kMaxContextMappings; ++i) {
    text += MapsLine(0x10000 + i * 0x1000, 0x11000 + i * 0x1000, "rw-s", "/memfd:OTEL_CTX");
  }
  auto found = FindContextMappings(text);
  ASSERT_EQ(found.size(), kMaxContextMappings);
  EXPECT_EQ(found.back().start, 0x10000 + (kMaxContextMappings - 1) * 0x1000);
  testing::TempDir dir("ember-context");
  testing::WriteFile(dir.path() + "/maps", text);
  auto from_file = FindContextMappingsInFile(dir.path() + "/maps");
  ASSERT_TRUE(from_file.ok());
  EXPECT_EQ(from_file->size(), kMaxContextMappings);
}

TEST(FindContextMappingTest, MalformedLineIsPassedOver) {
  auto found = FindContextMappings("zzzz-yyyy rw-s 0 00:01 1 /memfd:OTEL_CTX\n" + kOtherLines +
                                   MapsLine(0x1000, 0x2000, "r--s", "[anon:OTEL_CTX]"));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].start, 0x1000u);
  EXPECT_FALSE(found[0].executable);
}

TEST(FindContextMappingTest, ReadsAFileBiggerThanOneReadWithTheLineAcrossPieces) {
  testing::TempDir dir("ember-context");
  std::string text;
  // Lines of different lengths, so that the context's line straddles a 16 KiB boundary.
  for (int i = 0; text.size() < 16384 - 30; ++i) {
    text += MapsLine(0x10000 + i * 0x1000, 0x11000 + i * 0x1000, "r--p",
                     absl::StrCat("/usr/lib/lib", i, ".so"));
  }
  text += MapsLine(0x7f4000000000, 0x7f4000001000, "rw-s", "/memfd:OTEL_CTX (deleted)");
  text += MapsLine(0x7f5000000000, 0x7f5000001000, "rw-p", "[stack]");
  const std::string path = dir.path() + "/maps";
  testing::WriteFile(path, text);
  auto found = FindContextMappingsInFile(path);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0].start, 0x7f4000000000u);

  testing::WriteFile(path, kOtherLines);
  found = FindContextMappingsInFile(path);
  ASSERT_TRUE(found.ok());
  EXPECT_TRUE(found->empty());
  // The last line need not end in a newline.
  std::string last = MapsLine(0x1000, 0x2000, "rw-s", "[anon_shmem:OTEL_CTX]");
  last.pop_back();
  testing::WriteFile(path, kOtherLines + last);
  found = FindContextMappingsInFile(path);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->size(), 1u);

  EXPECT_FALSE(FindContextMappingsInFile(dir.path() + "/absent").ok());
}

// A publisher's memory: the header in its mapping, the payload elsewhere.
constexpr uint64_t kMappingAt = 0x7f6000000000;
constexpr uint64_t kPayloadAt = 0x560000001000;

MemoryMapping ContextMapping() {
  MemoryMapping mapping;
  mapping.start = kMappingAt;
  mapping.end = kMappingAt + 4096;
  mapping.readable = true;
  mapping.path = "/memfd:OTEL_CTX";
  return mapping;
}

ProcessContextHeader Header(uint64_t timestamp, uint32_t payload_size,
                            uint64_t payload = kPayloadAt) {
  ProcessContextHeader header;
  std::memcpy(header.signature, "OTEL_CTX", 8);
  header.version = 2;
  header.payload_size = payload_size;
  header.published_at_ns = timestamp;
  header.payload = payload;
  return header;
}

std::string Payload() {
  otel::processcontext::v1development::ProcessContext context;
  otel::common::v1::KeyValue* kv = context.mutable_resource()->add_attributes();
  kv->set_key("service.name");
  kv->mutable_value()->set_string_value("checkout");
  return context.SerializeAsString();
}

struct Publisher {
  explicit Publisher(ProcessContextHeader header, const std::string& payload = Payload()) {
    memory.Add(kMappingAt, &header, sizeof(header));
    std::string page(4096 - sizeof(header), '\0');
    memory.Add(kMappingAt + sizeof(header), page.data(), page.size());
    memory.Add(kPayloadAt, payload.data(), payload.size());
  }
  testing::RecordedMemory memory;
};

// What a read of `publisher`'s context finds.
ReadResult ReadFrom(Publisher publisher, MemoryMapping mapping = ContextMapping()) {
  RawProcessContext raw;
  return ReadProcessContext(publisher.memory, mapping, 0, &raw);
}

TEST(ReadProcessContextTest, ReadsAConsistentPayloadAndThenKnowsItUnchanged) {
  const std::string payload = Payload();
  Publisher publisher(Header(1234, payload.size()));
  RawProcessContext raw;
  ASSERT_EQ(ReadProcessContext(publisher.memory, ContextMapping(), 0, &raw), ReadResult::kOk);
  EXPECT_EQ(raw.published_at_ns, 1234u);
  EXPECT_EQ(raw.payload, payload);
  EXPECT_EQ(ReadProcessContext(publisher.memory, ContextMapping(), 1234, &raw),
            ReadResult::kUnchanged);
  EXPECT_EQ(ReadProcessContext(publisher.memory, ContextMapping(), 999, &raw), ReadResult::kOk);
}

TEST(ReadProcessContextTest, VersionOneIsReadVersionThreeIsNot) {
  ProcessContextHeader header = Header(1, Payload().size());
  header.version = 1;
  EXPECT_EQ(ReadFrom(Publisher(header)), ReadResult::kOk);
  header.version = 3;
  EXPECT_EQ(ReadFrom(Publisher(header)), ReadResult::kBadVersion);
  header.version = 0;
  EXPECT_EQ(ReadFrom(Publisher(header)), ReadResult::kBadVersion);
}

TEST(ReadProcessContextTest, HostileHeaders) {
  ProcessContextHeader header = Header(1, 10);
  std::memcpy(header.signature, "OTEL_CTY", 8);
  EXPECT_EQ(ReadFrom(Publisher(header)), ReadResult::kBadSignature);
  // 4 GiB, and just over the bound.
  EXPECT_EQ(ReadFrom(Publisher(Header(1, 0xFFFFFFFFu))), ReadResult::kTooLarge);
  EXPECT_EQ(ReadFrom(Publisher(Header(1, kMaxPayloadBytes + 1))), ReadResult::kTooLarge);
  // The payload pointer into unmapped memory, null, and wrapping around.
  EXPECT_EQ(ReadFrom(Publisher(Header(1, 10, 0x1000))), ReadResult::kUnreadable);
  EXPECT_EQ(ReadFrom(Publisher(Header(1, 10, 0))), ReadResult::kUnreadable);
  EXPECT_EQ(ReadFrom(Publisher(Header(1, 10, ~uint64_t{0} - 4))), ReadResult::kUnreadable);
  // A payload running past what is mapped there.
  EXPECT_EQ(ReadFrom(Publisher(Header(1, Payload().size() + 4096))), ReadResult::kUnreadable);
  // The mapping itself unreadable, too small for a header, or not there.
  MemoryMapping mapping = ContextMapping();
  mapping.readable = false;
  EXPECT_EQ(ReadFrom(Publisher(Header(1, 10)), mapping), ReadResult::kUnreadable);
  mapping = ContextMapping();
  mapping.end = mapping.start + 16;
  EXPECT_EQ(ReadFrom(Publisher(Header(1, 10)), mapping), ReadResult::kUnreadable);
  testing::RecordedMemory empty;
  RawProcessContext raw;
  EXPECT_EQ(ReadProcessContext(empty, ContextMapping(), 0, &raw), ReadResult::kUnreadable);
}

TEST(ReadProcessContextTest, AnEmptyPayloadIsAnEmptyContext) {
  Publisher publisher(Header(7, 0, 0));
  RawProcessContext raw;
  raw.payload = "stale";
  EXPECT_EQ(ReadProcessContext(publisher.memory, ContextMapping(), 0, &raw), ReadResult::kOk);
  EXPECT_EQ(raw.payload, "");
}

TEST(ReadProcessContextTest, AnUpdateThatNeverEndsIsTorn) {
  EXPECT_EQ(ReadFrom(Publisher(Header(0, 10))), ReadResult::kTorn);
}

// Memory whose header timestamp changes as a racing publisher's would: each read of the
// timestamp takes the next of `timestamps` (the last one stays).
class RacingPublisher : public MemoryReader {
 public:
  RacingPublisher(testing::RecordedMemory& memory, std::deque<uint64_t> timestamps)
      : memory_(memory), timestamps_(std::move(timestamps)) {}
  bool Read(uint64_t address, void* out, size_t size) override {
    constexpr uint64_t kAt = kMappingAt + offsetof(ProcessContextHeader, published_at_ns);
    if (address <= kAt && kAt + 8 <= address + size) {
      uint64_t now = timestamps_.front();
      if (timestamps_.size() > 1) timestamps_.pop_front();
      memory_.Overwrite(kAt, &now, sizeof(now));
      ++timestamp_reads;
    }
    return memory_.Read(address, out, size);
  }
  int timestamp_reads = 0;

 private:
  testing::RecordedMemory& memory_;
  std::deque<uint64_t> timestamps_;
};

TEST(ReadProcessContextTest, ATornReadIsReadAgain) {
  Publisher publisher(Header(5, Payload().size()));
  RawProcessContext raw;
  // Changed under the payload copy (5 then 6), then mid-update (0), then settled at 6.
  RacingPublisher racing(publisher.memory, {5, 6, 0, 6, 6});
  EXPECT_EQ(ReadProcessContext(racing, ContextMapping(), 0, &raw), ReadResult::kOk);
  EXPECT_EQ(raw.published_at_ns, 6u);
  EXPECT_EQ(racing.timestamp_reads, 5);
  // Never settling: bounded.
  RacingPublisher restless(publisher.memory, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  EXPECT_EQ(ReadProcessContext(restless, ContextMapping(), 0, &raw), ReadResult::kTorn);
  EXPECT_EQ(restless.timestamp_reads, 2 * kMaxReadAttempts);
}

TEST(DecodeProcessContextTest, ResourceAsTextAndThreadLocalSettings) {
  otel::processcontext::v1development::ProcessContext message;
  auto add = [](google::protobuf::RepeatedPtrField<otel::common::v1::KeyValue>* to,
                const std::string& key) {
    otel::common::v1::KeyValue* kv = to->Add();
    kv->set_key(key);
    return kv->mutable_value();
  };
  auto* resource = message.mutable_resource()->mutable_attributes();
  add(resource, "service.name")->set_string_value("checkout");
  add(resource, "process.runtime.pid_hint")->set_int_value(-42);
  add(resource, "feature.on")->set_bool_value(true);
  add(resource, "sample.ratio")->set_double_value(0.25);
  add(resource, "list")->mutable_array_value()->add_values()->set_string_value("x");
  add(resource, "map")->mutable_kvlist_value();
  add(resource, "blob")->set_bytes_value("\x01\x02");
  add(resource, "")->set_string_value("no key");
  add(resource, "service.name")->set_string_value("second");
  add(resource, "unset");
  auto* attributes = message.mutable_attributes();
  add(attributes, "threadlocal.schema_version")->set_string_value("tlsdesc_v1_dev");
  auto* names = add(attributes, "threadlocal.attribute_key_map")->mutable_array_value();
  names->add_values()->set_string_value("http.route");
  names->add_values()->set_int_value(7);
  names->add_values()->set_string_value("request.kind");
  // Named twice, and keys the agent measures: ids that name nothing.
  names->add_values()->set_string_value("http.route");
  names->add_values()->set_string_value("k8s.pod.name");
  names->add_values()->set_string_value("container.id");
  add(attributes, "vendor.other")->set_string_value("ignored");

  ProcessContext context;
  ASSERT_TRUE(DecodeProcessContext(message.SerializeAsString(), &context));
  EXPECT_THAT(context.resource, ElementsAre(ProcessLabel{"service.name", "checkout"},
                                            ProcessLabel{"process.runtime.pid_hint", "-42"},
                                            ProcessLabel{"feature.on", "true"},
                                            ProcessLabel{"sample.ratio", "0.25"}));
  EXPECT_EQ(context.skipped_attributes, 6u);
  EXPECT_EQ(context.schema_version, "tlsdesc_v1_dev");
  EXPECT_THAT(context.key_map, ElementsAre("http.route", "", "request.kind", "", "", ""));
  EXPECT_TRUE(IsTlsSchema(context.schema_version));
  EXPECT_TRUE(IsTlsSchema("tls_v1"));
  EXPECT_FALSE(IsTlsSchema("go_pprof_labels_v1"));
}

TEST(DecodeProcessContextTest, KeyMapStopsAt256) {
  otel::processcontext::v1development::ProcessContext message;
  otel::common::v1::KeyValue* kv = message.add_attributes();
  kv->set_key("threadlocal.attribute_key_map");
  for (int i = 0; i < 300; ++i) {
    kv->mutable_value()->mutable_array_value()->add_values()->set_string_value(
        absl::StrCat("k", i));
  }
  ProcessContext context;
  ASSERT_TRUE(DecodeProcessContext(message.SerializeAsString(), &context));
  ASSERT_EQ(context.key_map.size(), 256u);
  EXPECT_EQ(context.key_map.back(), "k255");
  EXPECT_EQ(context.schema_version, "");
}

TEST(DecodeProcessContextTest, GarbageIsNoContext) {
  ProcessContext context;
  EXPECT_FALSE(DecodeProcessContext("\xff\xff\xff\xff\xff", &context));
  // A length running past the end.
  EXPECT_FALSE(DecodeProcessContext(std::string("\x0a\x40\x0a\x02", 4), &context));
  // A string that is not UTF-8.
  otel::processcontext::v1development::ProcessContext message;
  otel::common::v1::KeyValue* kv = message.mutable_resource()->add_attributes();
  kv->set_key("service.name");
  kv->mutable_value()->set_bytes_value("\xc3\x28");
  std::string wire = message.SerializeAsString();
  // bytes_value (7) becomes string_value (1): same wire type, invalid UTF-8 now.
  size_t tag = wire.find('\x3a');
  ASSERT_NE(tag, std::string::npos);
  wire[tag] = '\x0a';
  EXPECT_FALSE(DecodeProcessContext(wire, &context));
  EXPECT_TRUE(DecodeProcessContext("", &context));
  EXPECT_TRUE(context.resource.empty());
}

// A live publisher: the memfd it names OTEL_CTX found in its /proc/PID/maps, read with
// process_vm_readv, updated, and caught mid-update.
TEST(ProcessContextLiveTest, ReadsAPublisherThroughItsMemory) {
  testing::Subprocess publisher({EMBER_CONTEXT_PUBLISHER});
  ASSERT_TRUE(publisher.WaitForOutput("ready", std::chrono::seconds(10))) << publisher.output();
  const std::string maps_path = absl::StrCat("/proc/", publisher.pid(), "/maps");
  auto mappings = FindContextMappingsInFile(maps_path);
  ASSERT_TRUE(mappings.ok()) << mappings.status();
  ASSERT_EQ(mappings->size(), 1u);
  const MemoryMapping* mapping = &mappings->front();
  EXPECT_TRUE(mapping->path.starts_with("/memfd:OTEL_CTX"));

  ProcessMemoryReader memory(publisher.pid());
  RawProcessContext raw;
  ASSERT_EQ(ReadProcessContext(memory, *mapping, 0, &raw), ReadResult::kOk);
  ProcessContext context;
  ASSERT_TRUE(DecodeProcessContext(raw.payload, &context));
  EXPECT_THAT(context.resource, ElementsAre(ProcessLabel{"service.name", "checkout"},
                                            ProcessLabel{"service.version", "1.2.3"}));
  EXPECT_EQ(context.schema_version, "tlsdesc_v1_dev");
  EXPECT_THAT(context.key_map, ElementsAre("http.route"));
  const uint64_t first = raw.published_at_ns;
  EXPECT_EQ(ReadProcessContext(memory, *mapping, first, &raw), ReadResult::kUnchanged);

  ASSERT_TRUE(publisher.WriteStdin("update deployment.environment.name staging\n"));
  ASSERT_TRUE(publisher.WaitForOutput("updated", std::chrono::seconds(10)));
  ASSERT_EQ(ReadProcessContext(memory, *mapping, first, &raw), ReadResult::kOk);
  EXPECT_GT(raw.published_at_ns, first);
  ASSERT_TRUE(DecodeProcessContext(raw.payload, &context));
  EXPECT_THAT(context.resource.back(), (ProcessLabel{"deployment.environment.name", "staging"}));

  ASSERT_TRUE(publisher.WriteStdin("hold\n"));
  ASSERT_TRUE(publisher.WaitForOutput("holding", std::chrono::seconds(10)));
  EXPECT_EQ(ReadProcessContext(memory, *mapping, 0, &raw), ReadResult::kTorn);
  ASSERT_TRUE(publisher.WriteStdin("release\n"));
  ASSERT_TRUE(publisher.WaitForOutput("released", std::chrono::seconds(10)));
  EXPECT_EQ(ReadProcessContext(memory, *mapping, 0, &raw), ReadResult::kOk);
  publisher.CloseStdin();
  EXPECT_EQ(publisher.Wait(std::chrono::seconds(10)), 0);
}

}  // namespace
}  // namespace ember::context
