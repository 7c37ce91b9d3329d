// The per-process tracker on fixture maps and recorded memory, with a fake BPF configuration, a
// fake TLS resolver and a clock the test turns: first sight, late and repeated publications,
// dlopen, exec, exit, hostile contexts, and what each sample's context becomes.
#include "context/trace_contexts.h"

#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

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

namespace otel = ::opentelemetry::proto;

constexpr uint32_t kPid = 4242;
constexpr uint64_t kMappingAt = 0x7f6000000000;
constexpr uint64_t kPayloadAt = 0x560000001000;

class FakeBpf : public ThreadContextBpfConfig {
 public:
  absl::Status SetThreadContextProcess(uint32_t pid, const ember_context_proc& config) override {
    if (refuse) return absl::ResourceExhaustedError("full");
    entries[pid] = config;
    ++sets;
    return absl::OkStatus();
  }
  void RemoveThreadContextProcess(uint32_t pid) override {
    entries.erase(pid);
    ++removes;
  }
  std::map<uint32_t, ember_context_proc> entries;
  int sets = 0;
  int removes = 0;
  bool refuse = false;
};

// Reads through to the test's memory, which the test changes between reads.
class SharedMemory : public MemoryReader {
 public:
  explicit SharedMemory(testing::RecordedMemory* memory) : memory_(memory) {}
  bool Read(uint64_t address, void* out, size_t size) override {
    return memory_->Read(address, out, size);
  }

 private:
  testing::RecordedMemory* memory_;
};

std::string MapsLine(uint64_t start, const std::string& perms, const std::string& path) {
  return absl::StrFormat("%x-%x %s 00000000 00:01 77                         %s\n", start,
                         start + 0x1000, perms, path);
}

struct Published {
  std::vector<std::pair<std::string, std::string>> resource = {{"service.name", "checkout"}};
  std::string schema = "tlsdesc_v1_dev";
  std::vector<std::string> keys = {"http.route"};
};

std::string Payload(const Published& published) {
  otel::processcontext::v1development::ProcessContext message;
  for (const auto& [key, value] : published.resource) {
    otel::common::v1::KeyValue* kv = message.mutable_resource()->add_attributes();
    kv->set_key(key);
    kv->mutable_value()->set_string_value(value);
  }
  if (!published.schema.empty()) {
    otel::common::v1::KeyValue* kv = message.add_attributes();
    kv->set_key("threadlocal.schema_version");
    kv->mutable_value()->set_string_value(published.schema);
  }
  otel::common::v1::KeyValue* kv = message.add_attributes();
  kv->set_key("threadlocal.attribute_key_map");
  for (const std::string& key : published.keys) {
    kv->mutable_value()->mutable_array_value()->add_values()->set_string_value(key);
  }
  return message.SerializeAsString();
}

// A thread-context record with trace id 0x11.., span id `span`, and attribute entries.
std::vector<uint8_t> Record(uint8_t span, std::vector<std::pair<uint8_t, std::string>> attrs) {
  std::vector<uint8_t> bytes(kRecordHeaderBytes, 0x11);
  for (int i = 16; i < 24; ++i) bytes[i] = span;
  bytes[kRecordValidAt] = 1;
  bytes[25] = 1;
  for (const auto& [key, value] : attrs) {
    bytes.push_back(key);
    bytes.push_back(static_cast<uint8_t>(value.size()));
    bytes.insert(bytes.end(), value.begin(), value.end());
  }
  const uint16_t size = static_cast<uint16_t>(bytes.size() - kRecordHeaderBytes);
  std::memcpy(bytes.data() + kRecordAttrsSizeAt, &size, sizeof(size));
  return bytes;
}

class TraceContextsTest : public ::testing::Test {
 protected:
  TraceContextsTest() : dir_("ember-trace-contexts") {
    process_.pid = kPid;
    process_.proc_dir = dir_.path();
    SetMaps(false);
    ember_context_proc config{};
    config.offset = -64;
    config.kind = EMBER_CONTEXT_TLS_TP_OFFSET;
    tls_result_ = config;
  }

  std::unique_ptr<TraceContexts> Make(TraceContextsOptions options = {}) {
    options.proc_root = dir_.path() + "/proc";
    TraceContextsHooks hooks{
        .find_process = [this](uint32_t pid) -> const Process* {
          return pid == kPid && in_table_ ? &process_ : nullptr;
        },
        .memory = [this](uint32_t) { return std::make_unique<SharedMemory>(&memory_); },
        .resolve_tls = [this](const Process& process,
                              MemoryReader&) -> absl::StatusOr<ember_context_proc> {
          ++tls_calls_;
          EXPECT_EQ(process.pid, kPid);
          return tls_result_;
        },
        .now = [this] { return now_; }};
    return std::make_unique<TraceContexts>(&bpf_, metrics_, std::move(hooks), options);
  }

  // The process's maps, with or without its context's mapping.
  void SetMaps(bool with_context, const std::string& name = "/memfd:OTEL_CTX (deleted)") {
    std::string text = MapsLine(0x555555554000, "r-xp", "/usr/bin/server");
    if (with_context) text += MapsLine(kMappingAt, "rw-s", name);
    text += MapsLine(0x7ffff0000000, "rw-p", "[stack]");
    testing::WriteFile(dir_.path() + "/maps", text);
  }

  // Publishes `published` at `timestamp` (0: mid-update) in the process's memory.
  void Publish(const Published& published, uint64_t timestamp, const char* signature = "OTEL_CTX") {
    const std::string payload = Payload(published);
    payload_at_ += 0x1000;  // a new block each time, as a publisher's heap gives
    ProcessContextHeader header;
    std::memcpy(header.signature, signature, 8);
    header.version = 2;
    header.payload_size = static_cast<uint32_t>(payload.size());
    header.published_at_ns = timestamp;
    header.payload = payload_at_;
    memory_.Add(kMappingAt, &header, sizeof(header));
    memory_.Add(payload_at_, payload.data(), payload.size());
  }

  SampleContext Sample(TraceContexts& contexts, uint8_t status, std::vector<uint8_t> record = {}) {
    header_ = ember_sample{};
    header_.pid = kPid;
    header_.context_status = status;
    records_.push_back(std::move(record));
    SampleView view;
    view.header = &header_;
    view.thread_context = records_.back();
    return contexts.ContextOf(&process_, view);
  }

  // The value of one series of /metrics, e.g. Metric("ember_process_context_reads_total",
  // "result", "ok").
  double Metric(const std::string& name, const std::string& label, const std::string& value) {
    const std::string text = metrics_.Render();
    const std::string series = absl::StrCat(name, "{", label, "=\"", value, "\"} ");
    size_t at = text.find(series);
    if (at == std::string::npos) {
      ADD_FAILURE() << "no series " << series;
      return -1;
    }
    return std::stod(text.substr(at + series.size()));
  }
  double Reads(const std::string& result) {
    return Metric("ember_process_context_reads_total", "result", result);
  }
  double Processes(const std::string& state) {
    return Metric("ember_trace_context_processes", "state", state);
  }

  void Advance(std::chrono::milliseconds by) { now_ += by; }

  testing::TempDir dir_;
  Process process_;
  bool in_table_ = true;
  testing::RecordedMemory memory_;
  uint64_t payload_at_ = kPayloadAt;
  FakeBpf bpf_;
  MetricsRegistry metrics_;
  absl::StatusOr<ember_context_proc> tls_result_;
  int tls_calls_ = 0;
  std::chrono::steady_clock::time_point now_ =
      std::chrono::steady_clock::time_point() + std::chrono::hours(1);
  ember_sample header_{};
  std::deque<std::vector<uint8_t>> records_;
};

TEST_F(TraceContextsTest, FirstSightReadsTheContextAndTurnsTheThreadReadOn) {
  SetMaps(true);
  Publish(Published{.resource = {{"service.name", "checkout"}, {"service.version", "1.2"}},
                    .keys = {"http.route", "request.kind"}},
          100);
  auto contexts = Make();
  contexts->OnMapsChanged(process_);
  EXPECT_EQ(Reads("ok"), 1);
  ASSERT_NE(contexts->Published(kPid), nullptr);
  EXPECT_THAT(*contexts->Published(kPid), ElementsAre(ProcessLabel{"service.name", "checkout"},
                                                      ProcessLabel{"service.version", "1.2"}));
  ASSERT_EQ(bpf_.entries.count(kPid), 1u);
  EXPECT_EQ(bpf_.entries[kPid].offset, -64);
  EXPECT_EQ(Processes("published"), 1);
  EXPECT_EQ(Processes("thread_context"), 1);
  EXPECT_EQ(Metric("ember_thread_context_tls_resolutions_total", "result", "ok"), 1);

  SampleContext context =
      Sample(*contexts, EMBER_CONTEXT_OK, Record(0x22, {{1, "checkout"}, {0, "/cart"}}));
  EXPECT_EQ(context.link.trace_id[0], 0x11);
  EXPECT_EQ(context.link.span_id[7], 0x22);
  EXPECT_THAT(context.attributes, ElementsAre(SampleAttribute{"request.kind", "checkout"},
                                              SampleAttribute{"http.route", "/cart"}));
  EXPECT_EQ(Metric("ember_thread_context_records_total", "result", "ok"), 1);

  // A later maps change of a process whose context is read and resolved reads nothing.
  Advance(std::chrono::seconds(5));
  contexts->OnMapsChanged(process_);
  EXPECT_EQ(Reads("ok") + Reads("unchanged"), 1);
  EXPECT_EQ(tls_calls_, 1);
}

TEST_F(TraceContextsTest, BpfStatusesAreCountedAndCarryNoContext) {
  auto contexts = Make();
  contexts->OnMapsChanged(process_);
  EXPECT_TRUE(Sample(*contexts, EMBER_CONTEXT_NOT_READ).empty());
  EXPECT_TRUE(Sample(*contexts, EMBER_CONTEXT_NONE).empty());
  EXPECT_TRUE(Sample(*contexts, EMBER_CONTEXT_INVALID).empty());
  EXPECT_TRUE(Sample(*contexts, EMBER_CONTEXT_READ_FAILED).empty());
  EXPECT_TRUE(Sample(*contexts, EMBER_CONTEXT_NO_TLS_BLOCK).empty());
  EXPECT_TRUE(Sample(*contexts, 77).empty());
  EXPECT_EQ(Metric("ember_thread_context_records_total", "result", "none"), 1);
  EXPECT_EQ(Metric("ember_thread_context_records_total", "result", "invalid"), 2);
  EXPECT_EQ(Metric("ember_thread_context_records_total", "result", "read_failed"), 1);
  EXPECT_EQ(Metric("ember_thread_context_records_total", "result", "no_tls_block"), 1);
  // A record with valid == 0 from the BPF side's race with the writer.
  std::vector<uint8_t> record = Record(0x22, {});
  record[kRecordValidAt] = 0;
  EXPECT_TRUE(Sample(*contexts, EMBER_CONTEXT_OK, record).empty());
  EXPECT_EQ(Metric("ember_thread_context_records_total", "result", "invalid"), 3);
}

TEST_F(TraceContextsTest, ALatePublicationIsNoticedAndReadOncePerInterval) {
  auto contexts = Make();
  contexts->OnMapsChanged(process_);
  EXPECT_EQ(Reads("no_mapping"), 1);
  EXPECT_EQ(contexts->Published(kPid), nullptr);

  // The SDK starts and publishes right after: the notice comes within min_reread.
  SetMaps(true);
  Publish(Published{}, 200);
  contexts->Notice(kPid);
  EXPECT_EQ(Metric("ember_trace_context_notices_total", "result", "deferred"), 1);
  EXPECT_EQ(contexts->pending(), 1u);
  contexts->Upkeep();  // too early still
  EXPECT_EQ(contexts->Published(kPid), nullptr);
  // A storm of notices makes no more reads.
  for (int i = 0; i < 100; ++i) contexts->Notice(kPid);
  Advance(std::chrono::milliseconds(1000));
  contexts->Upkeep();
  EXPECT_EQ(contexts->pending(), 0u);
  EXPECT_EQ(Reads("ok"), 1);
  EXPECT_EQ(Reads("no_mapping"), 1);
  ASSERT_NE(contexts->Published(kPid), nullptr);
  EXPECT_EQ(bpf_.sets, 1);

  // The same publication noticed again: the header alone is read.
  Advance(std::chrono::seconds(2));
  contexts->Notice(kPid);
  EXPECT_EQ(Reads("unchanged"), 1);
  EXPECT_EQ(Metric("ember_trace_context_notices_total", "result", "read"), 1);
  // An update right after a notice comes with none of its own (the BPF side passes one per
  // process per second): the header is looked at once more when min_reread has passed.
  EXPECT_EQ(contexts->pending(), 1u);
  Publish(Published{.resource = {{"service.name", "checkout"}, {"service.version", "2"}}}, 300);
  Advance(std::chrono::milliseconds(1000));
  contexts->Upkeep();
  EXPECT_EQ(Reads("ok"), 2);
  EXPECT_EQ(contexts->pending(), 0u);
  ASSERT_NE(contexts->Published(kPid), nullptr);
  EXPECT_EQ(contexts->Published(kPid)->size(), 2u);
  // A pid never sampled: nothing read.
  contexts->Notice(kPid + 1);
  EXPECT_EQ(Metric("ember_trace_context_notices_total", "result", "unknown_process"), 1);
  EXPECT_EQ(contexts->size(), 1u);
}

TEST_F(TraceContextsTest, MapsChangesOfAProcessWithoutContextAreRateLimited) {
  auto contexts = Make();
  contexts->OnMapsChanged(process_);
  for (int i = 0; i < 10; ++i) contexts->OnMapsChanged(process_);
  EXPECT_EQ(Reads("no_mapping"), 1);
  EXPECT_EQ(contexts->pending(), 1u);
  Advance(std::chrono::seconds(1));
  contexts->Upkeep();
  EXPECT_EQ(Reads("no_mapping"), 2);
  EXPECT_EQ(contexts->pending(), 0u);
  contexts->Upkeep();
  EXPECT_EQ(Reads("no_mapping"), 2);
}

TEST_F(TraceContextsTest, ARepublicationWithANewKeyIsReadWhenARecordUsesIt) {
  SetMaps(true);
  Publish(Published{}, 100);
  auto contexts = Make();
  contexts->OnMapsChanged(process_);
  EXPECT_THAT(
      Sample(*contexts, EMBER_CONTEXT_OK, Record(1, {{0, "/cart"}, {1, "checkout"}})).attributes,
      ElementsAre(SampleAttribute{"http.route", "/cart"}));
  EXPECT_EQ(Metric("ember_thread_context_records_total", "result", "key_out_of_range"), 1);
  // The record's key id 1 is past the map: its process context is read again (no notice came:
  // the kernel cannot report the prctl here, say).
  EXPECT_EQ(contexts->pending(), 1u);
  Publish(
      Published{.resource = {{"service.name", "checkout"}, {"deployment.environment.name", "prod"}},
                .keys = {"http.route", "request.kind"}},
      300);
  Advance(std::chrono::seconds(1));
  contexts->Upkeep();
  EXPECT_EQ(Reads("ok"), 2);
  EXPECT_THAT(*contexts->Published(kPid),
              ElementsAre(ProcessLabel{"service.name", "checkout"},
                          ProcessLabel{"deployment.environment.name", "prod"}));
  EXPECT_THAT(
      Sample(*contexts, EMBER_CONTEXT_OK, Record(1, {{0, "/cart"}, {1, "checkout"}})).attributes,
      ElementsAre(SampleAttribute{"http.route", "/cart"},
                  SampleAttribute{"request.kind", "checkout"}));
  // Already resolved: the thread read stays as it was.
  EXPECT_EQ(tls_calls_, 1);
  EXPECT_EQ(bpf_.sets, 1);
}

TEST_F(TraceContextsTest, AVariableInALibraryDlopenedLaterIsFoundAtTheNextMapsChange) {
  SetMaps(true);
  Publish(Published{}, 100);
  tls_result_ = absl::NotFoundError("no otel_thread_ctx_v1");
  auto contexts = Make();
  contexts->OnMapsChanged(process_);
  EXPECT_EQ(Processes("tls_unresolved"), 1);
  EXPECT_EQ(Processes("thread_context"), 0);
  EXPECT_TRUE(bpf_.entries.empty());
  EXPECT_EQ(Metric("ember_thread_context_tls_resolutions_total", "result", "not_found"), 1);

  ember_context_proc dtv{};
  dtv.offset = 16;
  dtv.module_id = 3;
  dtv.kind = EMBER_CONTEXT_TLS_DTV;
  dtv.dtv_entry_shift = 4;
  tls_result_ = dtv;
  Advance(std::chrono::seconds(2));
  contexts->OnMapsChanged(process_);  // the dlopen's new code
  EXPECT_EQ(Reads("unchanged"), 1);
  EXPECT_EQ(tls_calls_, 2);
  ASSERT_EQ(bpf_.entries.count(kPid), 1u);
  EXPECT_EQ(bpf_.entries[kPid].module_id, 3u);
  EXPECT_EQ(Processes("tls_unresolved"), 0);
  EXPECT_EQ(Processes("thread_context"), 1);
}

TEST_F(TraceContextsTest, OtherSchemasAndABpfMapThatRefuses) {
  SetMaps(true);
  Publish(Published{.schema = "go_pprof_labels_v1", .keys = {}}, 100);
  auto contexts = Make();
  contexts->OnMapsChanged(process_);
  EXPECT_EQ(Processes("other_schema"), 1);
  EXPECT_EQ(tls_calls_, 0);
  EXPECT_NE(contexts->Published(kPid), nullptr);

  // Re-published with the TLS schema, but the BPF map is full.
  bpf_.refuse = true;
  Publish(Published{}, 200);
  Advance(std::chrono::seconds(2));
  contexts->Notice(kPid);
  EXPECT_EQ(Processes("other_schema"), 0);
  EXPECT_EQ(Processes("tls_unresolved"), 1);
  EXPECT_EQ(Metric("ember_thread_context_tls_resolutions_total", "result", "bpf_failed"), 1);

  // And without a schema at all, later: the thread read is off.
  bpf_.refuse = false;
  Advance(std::chrono::seconds(2));
  contexts->OnMapsChanged(process_);
  EXPECT_EQ(Processes("thread_context"), 1);
  Publish(Published{.schema = ""}, 300);
  Advance(std::chrono::seconds(2));
  contexts->Notice(kPid);
  EXPECT_EQ(Processes("thread_context"), 0);
  EXPECT_TRUE(bpf_.entries.empty());
}

TEST_F(TraceContextsTest, ExecAndExitForgetTheContext) {
  SetMaps(true);
  Publish(Published{}, 100);
  auto contexts = Make();
  contexts->OnMapsChanged(process_);
  ASSERT_EQ(bpf_.entries.size(), 1u);

  // The new program publishes nothing.
  ++process_.execs;
  SetMaps(false);
  contexts->OnMapsChanged(process_);
  EXPECT_TRUE(bpf_.entries.empty());
  EXPECT_EQ(contexts->Published(kPid), nullptr);
  EXPECT_EQ(Processes("published"), 0);
  EXPECT_EQ(Reads("no_mapping"), 1);

  SetMaps(true);
  Advance(std::chrono::seconds(2));
  contexts->OnMapsChanged(process_);
  EXPECT_EQ(bpf_.entries.size(), 1u);
  contexts->OnExited(kPid);
  EXPECT_TRUE(bpf_.entries.empty());
  EXPECT_EQ(contexts->size(), 0u);
  EXPECT_EQ(Processes("published"), 0);
  EXPECT_EQ(Processes("thread_context"), 0);
  contexts->OnExited(kPid);  // once more: nothing
  EXPECT_EQ(bpf_.removes, 2);
}

// Between its exit and the table's notice of it, a process's memory is gone and its maps read
// empty: what it published stays for its last interval's resource.
TEST_F(TraceContextsTest, AnExitingProcessKeepsWhatItPublished) {
  SetMaps(true);
  Publish(Published{}, 100);
  auto contexts = Make();
  contexts->OnMapsChanged(process_);
  ASSERT_NE(contexts->Published(kPid), nullptr);
  memory_ = testing::RecordedMemory();
  testing::WriteFile(dir_.path() + "/maps", "");
  Advance(std::chrono::seconds(2));
  contexts->Notice(kPid);
  EXPECT_NE(contexts->Published(kPid), nullptr);
  EXPECT_GE(Reads("unreadable"), 1);
  EXPECT_EQ(Reads("no_mapping"), 0);
  // The table tells of its exit: kept for the interval being written, then forgotten.
  contexts->OnExited(kPid);
  EXPECT_EQ(contexts->size(), 0u);
  ASSERT_NE(contexts->Published(kPid), nullptr);
  EXPECT_EQ(contexts->Published(kPid)->front().key, "service.name");
  contexts->ForgetExited();
  EXPECT_EQ(contexts->Published(kPid), nullptr);
}

TEST_F(TraceContextsTest, HostileContextsAreCountedAndNothingIsPublished) {
  auto contexts = Make();
  // A bogus mapping with the name and the wrong signature.
  SetMaps(true, "[anon:OTEL_CTX]");
  Publish(Published{}, 100, "NOT_CTX!");
  contexts->OnMapsChanged(process_);
  EXPECT_EQ(Reads("bad_signature"), 1);
  EXPECT_EQ(contexts->Published(kPid), nullptr);
  EXPECT_TRUE(bpf_.entries.empty());

  // A payload that is no protobuf.
  Publish(Published{}, 200);
  const std::string garbage(64, '\xff');
  memory_.Add(payload_at_, garbage.data(), garbage.size());
  Advance(std::chrono::seconds(2));
  contexts->Notice(kPid);
  EXPECT_EQ(Reads("bad_payload"), 1);
  EXPECT_EQ(contexts->Published(kPid), nullptr);

  // Unreadable memory (the process exited between its maps and its memory): the mapping known,
  // then the maps' candidate, each read once.
  testing::RecordedMemory empty;
  memory_ = empty;
  Advance(std::chrono::seconds(2));
  contexts->Notice(kPid);
  EXPECT_EQ(Reads("unreadable"), 2);
  EXPECT_EQ(Processes("published"), 0);
}

TEST_F(TraceContextsTest, ADecoyBeforeTheContextDoesNotHideIt) {
  // A mapping named like a context, without its signature, listed before the real one.
  const uint64_t decoy_at = kMappingAt - 0x100000;
  testing::WriteFile(dir_.path() + "/maps",
                     MapsLine(decoy_at, "rw-s", "/memfd:OTEL_CTX (deleted)") +
                         MapsLine(0x7e0000000000, "rw-p", "[anon:OTEL_CTX]") +
                         MapsLine(kMappingAt, "rw-s", "/memfd:OTEL_CTX (deleted)"));
  const std::string junk(64, 'J');
  memory_.Add(decoy_at, junk.data(), junk.size());
  Publish(Published{}, 100);
  auto contexts = Make();
  contexts->OnMapsChanged(process_);
  EXPECT_EQ(Reads("bad_signature"), 1);
  EXPECT_EQ(Reads("unreadable"), 1);  // the second decoy is not even mapped
  EXPECT_EQ(Reads("ok"), 1);
  ASSERT_NE(contexts->Published(kPid), nullptr);
  EXPECT_EQ(bpf_.entries.size(), 1u);
  // The real one is what later reads go to.
  Advance(std::chrono::seconds(2));
  contexts->Notice(kPid);
  EXPECT_EQ(Reads("unchanged"), 1);
  EXPECT_EQ(Reads("bad_signature"), 1);
}

TEST_F(TraceContextsTest, ATornContextIsTriedAgainABoundedNumberOfTimes) {
  SetMaps(true);
  Publish(Published{}, 0);  // mid-update, and it stays so
  auto contexts = Make(TraceContextsOptions{.max_torn_retries = 2});
  contexts->OnMapsChanged(process_);
  EXPECT_EQ(Reads("torn"), 1);
  for (int i = 0; i < 5; ++i) {
    Advance(std::chrono::seconds(1));
    contexts->Upkeep();
  }
  EXPECT_EQ(Reads("torn"), 3);
  EXPECT_EQ(contexts->pending(), 0u);
  // The update finishes; its notice reads it.
  Publish(Published{}, 500);
  contexts->Notice(kPid);
  EXPECT_EQ(Reads("ok"), 1);
  EXPECT_NE(contexts->Published(kPid), nullptr);
}

TEST_F(TraceContextsTest, AnEvictedProcessIsReadByPidWhenItRepublishes) {
  auto contexts = Make();
  contexts->OnMapsChanged(process_);
  EXPECT_EQ(Reads("no_mapping"), 1);
  // The table let it go; it publishes later. Its maps are read under proc_root by pid.
  in_table_ = false;
  Publish(Published{}, 100);
  const std::string pid_dir = absl::StrCat(dir_.path(), "/proc/", kPid);
  ASSERT_EQ(std::filesystem::create_directories(pid_dir), true);
  testing::WriteFile(pid_dir + "/maps", MapsLine(kMappingAt, "rw-s", "/memfd:OTEL_CTX"));
  Advance(std::chrono::seconds(2));
  contexts->Notice(kPid);
  EXPECT_EQ(Reads("ok"), 1);
  EXPECT_NE(contexts->Published(kPid), nullptr);
  // Where its threads keep their pointer needs its mappings: at its next sample's maps change.
  EXPECT_EQ(tls_calls_, 0);
  EXPECT_EQ(Processes("tls_unresolved"), 1);
  in_table_ = true;
  Advance(std::chrono::seconds(2));
  contexts->OnMapsChanged(process_);
  EXPECT_EQ(tls_calls_, 1);
  EXPECT_EQ(Processes("thread_context"), 1);
}

}  // namespace
}  // namespace ember::context

namespace ember::context {
namespace {

// The tracker with its own ways to the system (the process's /proc directory, process_vm_readv)
// on a live publisher that re-publishes.
TEST(TraceContextsLiveTest, ReadsAndRereadsALivePublisher) {
  testing::Subprocess publisher({EMBER_CONTEXT_PUBLISHER});
  ASSERT_TRUE(publisher.WaitForOutput("ready", std::chrono::seconds(10))) << publisher.output();
  Process process;
  process.pid = static_cast<uint32_t>(publisher.pid());
  process.proc_dir = absl::StrCat("/proc/", publisher.pid());
  MetricsRegistry metrics;
  FakeBpf bpf;
  TraceContexts contexts(&bpf, metrics,
                         TraceContextsHooks{.find_process = [&](uint32_t) { return &process; }},
                         TraceContextsOptions{.min_reread = std::chrono::milliseconds(0)});
  contexts.OnMapsChanged(process);
  ASSERT_NE(contexts.Published(process.pid), nullptr);
  EXPECT_THAT(*contexts.Published(process.pid),
              ElementsAre(ProcessLabel{"service.name", "checkout"},
                          ProcessLabel{"service.version", "1.2.3"}));
  // Its schema is read, but no resolver is given: nothing for the BPF side.
  EXPECT_TRUE(bpf.entries.empty());

  ASSERT_TRUE(publisher.WriteStdin("update service.instance.id 7f3a\n"));
  ASSERT_TRUE(publisher.WaitForOutput("updated", std::chrono::seconds(10)));
  contexts.Notice(process.pid);
  EXPECT_THAT(contexts.Published(process.pid)->back(),
              (ProcessLabel{"service.instance.id", "7f3a"}));
  publisher.CloseStdin();
  EXPECT_EQ(publisher.Wait(std::chrono::seconds(10)), 0);
  contexts.OnExited(process.pid);
  contexts.ForgetExited();
  EXPECT_EQ(contexts.Published(process.pid), nullptr);
}

}  // namespace
}  // namespace ember::context
