// OpenTelemetry's process context (OTEP 4719) and thread context (OTEP 4947) end to end (issue
// 35), on the fixture in tests/fixtures/trace_context built once per place its TLS pointer can
// live. TraceContextFixtureTest reads the fixture's memory while it is stopped and checks that
// what it publishes is where and what the OTEPs say, with no agent; TraceContextTest profiles it
// with the agent and checks that each request's samples carry that request's trace, span and
// attributes (pprof labels and OTLP links and attributes), that the CPU split per trace matches
// the fixture's own accounting, and that the published resource attributes reach the outputs.
// TraceContextHostileTest runs the fixture's hostile mode: a decoy mapping and records a reader
// must refuse or read in part.
#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/io/coded_stream.h"
#include "gtest/gtest.h"
#include "opentelemetry/proto/common/v1/common.pb.h"
#include "opentelemetry/proto/resource/v1/resource.pb.h"
#include "profiled_run.h"
#include "support/subprocess.h"
#include "support/upstream_otlp.h"
#include "unit/otlp/grpc_test_receiver.h"
#include "unit/otlp/reserved_port.h"
#include "unit/otlp/test_requests.h"

namespace ember::testing {
namespace {

namespace otlp = opentelemetry::proto::profiles::v1development;
namespace common = opentelemetry::proto::common::v1;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kKinds[] = {"checkout", "search"};
constexpr const char* kRoutes[] = {"/checkout", "/search"};

struct Variant {
  std::string name;
  std::vector<std::string> argv_before_seconds;  // the program, and its library for dlopen
  std::string mapping;                           // memfd or anon
};

void PrintTo(const Variant& v, std::ostream* out) { *out << v.name; }

std::string Dir() { return EMBER_TRACE_CONTEXT_FIXTURES; }

std::vector<Variant> Variants() {
  return {
      {"ExeGcc", {Dir() + "/trace_context_exe"}, "memfd"},
      {"ExeClang", {Dir() + "/trace_context_exe_clang"}, "memfd"},
      {"ExeGccAnonymousMapping", {Dir() + "/trace_context_exe"}, "anon"},
      {"LibTlsdesc", {Dir() + "/trace_context_lib_tlsdesc"}, "memfd"},
      {"LibGeneralDynamicLld", {Dir() + "/trace_context_lib_gd"}, "memfd"},
      {"DlopenTlsdesc",
       {Dir() + "/trace_context_dlopen", Dir() + "/libotel_tc_tlsdesc.so"},
       "memfd"},
      {"DlopenGeneralDynamic",
       {Dir() + "/trace_context_dlopen", Dir() + "/libotel_tc_gd.so"},
       "memfd"},
  };
}

std::vector<std::string> Argv(const Variant& v, double seconds) {
  std::vector<std::string> argv = v.argv_before_seconds;
  argv.push_back(absl::StrCat(seconds));
  argv.push_back(v.mapping);
  return argv;
}

// What the fixture printed (the format is in tests/fixtures/trace_context/trace_context.c).
struct FixtureReport {
  std::map<std::string, double> cpu_ns;              // kind -> thread CPU ns
  std::map<std::string, std::string> trace_hex;      // kind -> trace id
  std::map<std::string, std::string> kind_of_trace;  // trace id -> kind
  std::map<std::string, std::set<std::string>> spans;
  std::map<std::string, std::string> kind_of_span;
  std::map<int, std::map<std::string, std::string>> published;  // 1, 2 -> resource attributes
  uint64_t header_address = 0;
  bool mapping_named = false;
  struct Thread {
    int64_t tid = 0;
    uint64_t fs_base = 0;
    uint64_t slot = 0;
  };
  std::vector<Thread> threads;
};

uint64_t Hex(const std::string& text) {
  uint64_t value = 0;
  absl::SimpleHexAtoi(text, &value);
  return value;
}

FixtureReport ParseReport(const std::string& output) {
  FixtureReport report;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() == 3 && f[0] == "cpu") {
      report.cpu_ns[f[1]] = std::strtod(f[2].c_str(), nullptr);
    } else if (f.size() == 3 && f[0] == "trace") {
      report.trace_hex[f[1]] = f[2];
      report.kind_of_trace[f[2]] = f[1];
    } else if (f.size() == 3 && f[0] == "span") {
      report.spans[f[1]].insert(f[2]);
      report.kind_of_span[f[2]] = f[1];
    } else if (f.size() == 3 && f[0] == "published") {
      std::pair<std::string, std::string> kv = absl::StrSplit(f[2], absl::MaxSplits('=', 1));
      report.published[std::atoi(f[1].c_str())][kv.first] = kv.second;
    } else if (f.size() == 6 && f[0] == "mapping") {
      report.header_address = Hex(f[3]);
      report.mapping_named = f[5] == "yes";
    } else if (f.size() == 7 && f[0] == "thread") {
      report.threads.push_back({std::atoll(f[1].c_str()), Hex(f[3]), Hex(f[5])});
    }
  }
  return report;
}

// ---------------------------------------------------------------------------------------------
// The fixture's memory, read from outside while all its threads are stopped.

struct StoppedProcess {
  explicit StoppedProcess(pid_t pid) : pid(pid) {
    kill(pid, SIGSTOP);
    // Bounded: every thread shows state T once the stop has reached it.
    for (int i = 0; i < 200 && !AllStopped(); ++i) std::this_thread::sleep_for(milliseconds(2));
  }
  ~StoppedProcess() { kill(pid, SIGCONT); }
  bool AllStopped() const {
    std::error_code error;
    for (const auto& task :
         std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"), error)) {
      std::ifstream in(task.path() / "stat");
      std::string stat;
      std::getline(in, stat);
      size_t close = stat.rfind(')');
      if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'T') {
        return false;
      }
    }
    return !error;
  }
  pid_t pid;
};

std::optional<std::string> ReadMemory(pid_t pid, uint64_t address, size_t size) {
  int fd = open(absl::StrCat("/proc/", pid, "/mem").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string bytes(size, '\0');
  ssize_t n = pread(fd, bytes.data(), size, static_cast<off_t>(address));
  close(fd);
  if (n != static_cast<ssize_t>(size)) return std::nullopt;
  return bytes;
}

template <typename T>
T Load(const std::string& bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

// The /proc/PID/maps line of the mapping that starts at `address`, and its VmFlags from smaps.
struct MappingLines {
  std::string maps_line;
  std::string vm_flags;
  uint64_t end = 0;
};
MappingLines MappingAt(pid_t pid, uint64_t address) {
  MappingLines found;
  std::ifstream smaps(absl::StrCat("/proc/", pid, "/smaps"));
  std::string line;
  bool in_it = false;
  while (std::getline(smaps, line)) {
    const size_t dash = line.find('-');
    const size_t space = line.find(' ');
    uint64_t start = 0, end = 0;
    if (dash != std::string::npos && space != std::string::npos && dash < space &&
        absl::SimpleHexAtoi(line.substr(0, dash), &start) &&
        absl::SimpleHexAtoi(line.substr(dash + 1, space - dash - 1), &end)) {
      in_it = start == address;
      if (in_it) {
        found.maps_line = line;
        found.end = end;
      }
    } else if (in_it && line.starts_with("VmFlags:")) {
      found.vm_flags = line;
    }
  }
  return found;
}

// The payload, decoded with Ember's own copies of the OTLP common and resource protos: field 1
// is a Resource, field 2 repeated KeyValue (ProcessContext, OTEP 4719 / 4947).
struct ProcessContextPayload {
  std::map<std::string, std::string> resource;
  std::string schema;
  std::vector<std::string> keys;
  bool ok = false;
};
ProcessContextPayload DecodePayload(const std::string& bytes) {
  ProcessContextPayload payload;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  while (uint32_t tag = in.ReadTag()) {
    std::string field;
    uint32_t length = 0;
    if ((tag & 7) != 2 || !in.ReadVarint32(&length) || !in.ReadString(&field, length)) {
      return payload;
    }
    if (tag >> 3 == 1) {
      opentelemetry::proto::resource::v1::Resource resource;
      if (!resource.ParseFromString(field)) return payload;
      for (const common::KeyValue& kv : resource.attributes()) {
        payload.resource[kv.key()] = kv.value().string_value();
      }
    } else if (tag >> 3 == 2) {
      common::KeyValue kv;
      if (!kv.ParseFromString(field)) return payload;
      if (kv.key() == "threadlocal.schema_version") payload.schema = kv.value().string_value();
      if (kv.key() == "threadlocal.attribute_key_map") {
        for (const common::AnyValue& v : kv.value().array_value().values()) {
          payload.keys.push_back(v.string_value());
        }
      }
    }
  }
  payload.ok = true;
  return payload;
}

// Where glibc puts otel_thread_ctx_v1 of an executable, below the thread pointer (x86-64 TLS
// variant II): the executable's block ends at the thread pointer, starts p_memsz rounded up to
// p_align before it (keeping p_vaddr's misalignment), and the symbol's value is its offset in the
// block. nullopt when the file has no PT_TLS or no such symbol in .dynsym.
std::optional<int64_t> ExecutableTlsOffset(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (file.size() < sizeof(Elf64_Ehdr)) return std::nullopt;
  const auto ehdr = Load<Elf64_Ehdr>(file, 0);
  std::optional<Elf64_Phdr> tls;
  for (int i = 0; i < ehdr.e_phnum; ++i) {
    const size_t at = ehdr.e_phoff + static_cast<size_t>(i) * ehdr.e_phentsize;
    if (at + sizeof(Elf64_Phdr) > file.size()) return std::nullopt;
    const auto phdr = Load<Elf64_Phdr>(file, at);
    if (phdr.p_type == PT_TLS) tls = phdr;
  }
  if (!tls || tls->p_align == 0) return std::nullopt;
  std::optional<uint64_t> value;
  for (int i = 0; i < ehdr.e_shnum; ++i) {
    const size_t at = ehdr.e_shoff + static_cast<size_t>(i) * ehdr.e_shentsize;
    if (at + sizeof(Elf64_Shdr) > file.size()) return std::nullopt;
    const auto dynsym = Load<Elf64_Shdr>(file, at);
    if (dynsym.sh_type != SHT_DYNSYM || dynsym.sh_link >= ehdr.e_shnum) continue;
    const auto dynstr =
        Load<Elf64_Shdr>(file, ehdr.e_shoff + size_t{dynsym.sh_link} * ehdr.e_shentsize);
    for (size_t s = 0; (s + 1) * sizeof(Elf64_Sym) <= dynsym.sh_size; ++s) {
      const auto sym = Load<Elf64_Sym>(file, dynsym.sh_offset + s * sizeof(Elf64_Sym));
      if (ELF64_ST_TYPE(sym.st_info) != STT_TLS || sym.st_shndx == SHN_UNDEF) continue;
      if (std::string(file.c_str() + dynstr.sh_offset + sym.st_name) == "otel_thread_ctx_v1") {
        value = sym.st_value;
      }
    }
  }
  if (!value) return std::nullopt;
  const uint64_t align = tls->p_align;
  const uint64_t first_byte = (0 - (tls->p_vaddr & (align - 1))) & (align - 1);
  const uint64_t block = (tls->p_memsz - first_byte + align - 1) / align * align + first_byte;
  return static_cast<int64_t>(*value) - static_cast<int64_t>(block);
}

class TraceContextFixtureTest : public ::testing::TestWithParam<Variant> {};

// Every 50 ms or so for a second and a half: stop the fixture, read its process-context header and
// payload, then each thread's otel_thread_ctx_v1 and the record it points to.
TEST_P(TraceContextFixtureTest, PublishesWhatTheOtepsDescribe) {
  const Variant& variant = GetParam();
  const double run_seconds = 1.5;
  Subprocess fixture(Argv(variant, run_seconds));
  const pid_t pid = fixture.pid();
  ASSERT_TRUE(fixture.WaitForOutput("ready", seconds(10))) << fixture.output();
  fixture.WriteStdin("g");
  // Both threads say where their pointer is once they run.
  const auto started = std::chrono::steady_clock::now();
  while (ParseReport(fixture.output()).threads.size() < 2 &&
         std::chrono::steady_clock::now() - started < seconds(10)) {
    fixture.WaitForOutput("cpu checkout", milliseconds(20));  // reads what came meanwhile
  }
  FixtureReport early = ParseReport(fixture.output());
  ASSERT_EQ(early.threads.size(), 2u) << fixture.output();
  ASSERT_NE(early.header_address, 0u) << fixture.output();
  for (const FixtureReport::Thread& t : early.threads) {
    std::printf("[   INFO   ] %s: thread %lld fs_base 0x%llx otel_thread_ctx_v1 0x%llx\n",
                variant.name.c_str(), static_cast<long long>(t.tid),
                static_cast<unsigned long long>(t.fs_base),
                static_cast<unsigned long long>(t.slot));
    // x86-64 TLS is variant II: every module's block lies below the thread pointer.
    EXPECT_LT(t.slot, t.fs_base);
  }
  if (variant.argv_before_seconds[0].find("_exe") != std::string::npos) {
    // In the executable, the OTEP's fixed offset from the thread pointer, the same on every
    // thread, from PT_TLS and the symbol's value alone.
    std::optional<int64_t> offset = ExecutableTlsOffset(variant.argv_before_seconds[0]);
    ASSERT_TRUE(offset.has_value()) << "no PT_TLS or no otel_thread_ctx_v1 in .dynsym";
    for (const FixtureReport::Thread& t : early.threads) {
      EXPECT_EQ(static_cast<int64_t>(t.slot - t.fs_base), *offset);
    }
  }

  const MappingLines mapping = MappingAt(pid, early.header_address);
  ASSERT_FALSE(mapping.maps_line.empty()) << "no mapping starts at the header";
  if (variant.mapping == "memfd") {
    EXPECT_NE(mapping.maps_line.find("/memfd:OTEL_CTX (deleted)"), std::string::npos)
        << mapping.maps_line;
  } else if (early.mapping_named) {
    EXPECT_NE(mapping.maps_line.find("[anon:OTEL_CTX]"), std::string::npos) << mapping.maps_line;
  } else {
    // Without CONFIG_ANON_VMA_NAME prctl(PR_SET_VMA_ANON_NAME) fails and the mapping stays
    // unnamed: no reader can find it by name (OTEP 4719 says so).
    EXPECT_EQ(mapping.maps_line.find("OTEL_CTX"), std::string::npos) << mapping.maps_line;
  }
  // MADV_DONTFORK shows as "dc".
  EXPECT_NE(mapping.vm_flags.find(" dc"), std::string::npos) << mapping.vm_flags;

  std::set<uint64_t> timestamps;
  std::set<bool> payload_inline;
  int records = 0, null_pointers = 0, with_kind = 0;
  std::map<size_t, int> key_map_sizes;
  struct Seen {
    std::string trace, span, kind;
  };
  std::vector<Seen> seen;
  const auto begin = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - begin < milliseconds(1800) &&
         !fixture.WaitForOutput("trace search", milliseconds(40))) {
    StoppedProcess stopped(pid);
    if (!stopped.AllStopped()) continue;  // exiting
    std::optional<std::string> header = ReadMemory(pid, early.header_address, 32);
    if (!header) continue;  // exiting
    ASSERT_EQ(header->substr(0, 8), "OTEL_CTX");
    EXPECT_EQ(Load<uint32_t>(*header, 8), 2u);
    const uint32_t size = Load<uint32_t>(*header, 12);
    const uint64_t published_at = Load<uint64_t>(*header, 16);
    const uint64_t payload_address = Load<uint64_t>(*header, 24);
    // The fixture's own thread updates it, never while stopped in the middle: a stop does not
    // land inside the update's few stores often, and the timestamp says so when it does.
    if (published_at == 0) continue;
    timestamps.insert(published_at);
    payload_inline.insert(payload_address == early.header_address + 32);
    ASSERT_GT(size, 0u);
    ASSERT_LE(size, 65536u);
    std::optional<std::string> bytes = ReadMemory(pid, payload_address, size);
    ASSERT_TRUE(bytes.has_value()) << "payload pointer 0x" << std::hex << payload_address;
    ProcessContextPayload payload = DecodePayload(*bytes);
    ASSERT_TRUE(payload.ok) << absl::BytesToHexString(*bytes);
    EXPECT_EQ(payload.schema, "tlsdesc_v1_dev");
    ASSERT_GE(payload.keys.size(), 1u);
    EXPECT_EQ(payload.keys[0], "http.route");
    if (payload.keys.size() > 1) {
      EXPECT_EQ(payload.keys[1], "request.kind");
    }
    ++key_map_sizes[payload.keys.size()];
    const FixtureReport now = ParseReport(fixture.output());
    const int publication = payload.keys.size() == 1 ? 1 : 2;
    if (now.published.count(publication)) {
      EXPECT_EQ(payload.resource, now.published.at(publication));
    }
    for (const FixtureReport::Thread& t : early.threads) {
      std::optional<std::string> pointer = ReadMemory(pid, t.slot, 8);
      ASSERT_TRUE(pointer.has_value());
      const uint64_t record_address = Load<uint64_t>(*pointer, 0);
      if (record_address == 0) {
        ++null_pointers;
        continue;
      }
      ++records;
      EXPECT_EQ(record_address % 2, 0u);
      std::optional<std::string> record = ReadMemory(pid, record_address, 28);
      ASSERT_TRUE(record.has_value());
      EXPECT_EQ((*record)[24], 1) << "valid";
      EXPECT_EQ((*record)[25], 1) << "trace flags: sampled";
      const std::string trace = absl::BytesToHexString(record->substr(0, 16));
      const std::string span = absl::BytesToHexString(record->substr(16, 8));
      EXPECT_NE(span, "0000000000000000");
      const uint16_t attrs_size = Load<uint16_t>(*record, 26);
      ASSERT_LE(attrs_size, 612);
      std::optional<std::string> attrs = ReadMemory(pid, record_address + 28, attrs_size);
      ASSERT_TRUE(attrs.has_value());
      std::map<int, std::string> values;
      for (size_t at = 0; at + 2 <= attrs->size();) {
        const size_t length = static_cast<uint8_t>((*attrs)[at + 1]);
        ASSERT_LE(at + 2 + length, attrs->size()) << "an entry runs past attrs_data_size";
        values[static_cast<uint8_t>((*attrs)[at])] = attrs->substr(at + 2, length);
        at += 2 + length;
      }
      const int kind = values[0] == kRoutes[0] ? 0 : 1;
      EXPECT_EQ(values[0], kRoutes[kind]);
      seen.push_back({trace, span, kKinds[kind]});
      for (const auto& [key, value] : values) {
        // A record never uses a key the key map it is published with lacks.
        EXPECT_LT(static_cast<size_t>(key), payload.keys.size());
      }
      if (values.count(1)) {
        ++with_kind;
        EXPECT_EQ(values[1], kKinds[kind]);
      }
    }
  }
  ASSERT_EQ(fixture.Wait(seconds(20)), 0) << fixture.output();
  FixtureReport report = ParseReport(fixture.output());
  // Each record carried its kind's trace id and one of the span ids the fixture reports for it
  // (it prints them at its end), and every request kind ran.
  for (const Seen& s : seen) {
    EXPECT_EQ(report.trace_hex.at(s.kind), s.trace);
    EXPECT_TRUE(report.spans.at(s.kind).count(s.span)) << s.kind << " " << s.span;
  }
  EXPECT_GT(report.spans["checkout"].size(), 10u);
  EXPECT_GT(report.spans["search"].size(), 10u);
  EXPECT_EQ(report.published[1].size(), 3u);
  EXPECT_EQ(report.published[2].size(), 4u);
  EXPECT_EQ(report.published[2]["service.version"], "2.0.0");
  // Both publications were seen, the first with its payload after the header, the update's
  // elsewhere, under a new timestamp; records were attached and detached, and carried the new
  // key after the update.
  EXPECT_EQ(timestamps.size(), 2u);
  EXPECT_EQ(payload_inline, (std::set<bool>{false, true}));
  EXPECT_EQ(key_map_sizes.size(), 2u);
  EXPECT_GT(records, 4);
  EXPECT_GT(null_pointers, 0);
  EXPECT_GT(with_kind, 0);
  std::printf("[   INFO   ] %d records and %d NULL pointers read in %zu stops\n", records,
              null_pointers, static_cast<size_t>(key_map_sizes[1] + key_map_sizes[2]));
}

INSTANTIATE_TEST_SUITE_P(Variants, TraceContextFixtureTest, ::testing::ValuesIn(Variants()),
                         [](const auto& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------
// Under the agent.

constexpr int kHz = 499;
constexpr double kRunSeconds = 4;

// The request kind a sample's stack was in: the fixture runs each kind's work in a function of
// its own; kOther: none of them (start-up, the main thread, and serve() and the SDK's attach around
// a request's work, where the record may or may not be attached).
enum class Work { kCheckout = 0, kSearch = 1, kOutside = 2, kOther = 3 };
Work WorkOf(const std::vector<std::string>& functions) {
  for (const std::string& f : functions) {
    if (f == "checkout_work") return Work::kCheckout;
    if (f == "search_work") return Work::kSearch;
    if (f == "outside_work") return Work::kOutside;
  }
  return Work::kOther;
}

std::string Label(const NamedSample& s, const std::string& key) {
  auto it = s.labels.find(key);
  return it == s.labels.end() ? "" : it->second;
}

std::vector<std::string> FunctionsOf(const otlp::ProfilesDictionary& dictionary,
                                     const otlp::Sample& sample) {
  std::vector<std::string> names;
  const otlp::Stack& stack = dictionary.stack_table(sample.stack_index());
  for (int location_index : stack.location_indices()) {
    const otlp::Location& location = dictionary.location_table(location_index);
    if (location.lines_size() == 0) continue;
    const otlp::Function& function =
        dictionary.function_table(location.lines(location.lines_size() - 1).function_index());
    names.push_back(dictionary.string_table(function.name_strindex()));
  }
  return names;
}

// Until the agent at `endpoint` reads the thread context of a process, at most 5 s; whether it
// did. The gauge is Ember's ember_trace_context_processes{state="thread_context"}.
bool WaitForThreadContext(const std::string& endpoint) {
  const auto begin = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - begin < seconds(5)) {
    auto [status, page] = HttpGet(endpoint + "/metrics");
    const std::optional<double> reading =
        MetricValue(page, "ember_trace_context_processes{state=\"thread_context\"}");
    if (status == 200 && !reading.has_value()) break;  // an agent that reads no thread context
    if (reading.value_or(0) >= 1) {
      std::printf(
          "[   INFO   ] the agent read the thread context after %.0f ms\n",
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin)
              .count());
      return true;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  std::printf("[   INFO   ] the agent did not read the thread context\n");
  return false;
}

// One agent run per variant, shared by that variant's tests (a run is the slow part).
struct VariantRun {
  std::unique_ptr<GrpcTestReceiver> receiver;
  ProfiledRun run;
  FixtureReport report;
  std::vector<NamedSample> samples;
  std::vector<size_t> interval_ends;  // samples[interval_ends[i - 1], interval_ends[i]): file i
};

class TraceContextTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    std::unique_ptr<VariantRun>& cached = (*runs_)[GetParam().name];
    if (cached == nullptr) {
      cached = std::make_unique<VariantRun>();
      cached->receiver = GrpcTestReceiver::Start();
      ASSERT_NE(cached->receiver, nullptr);
      ReservedPort metrics_port;
      ASSERT_NE(metrics_port.port(), 0);
      const std::string metrics_address = absl::StrCat("127.0.0.1:", metrics_port.port());
      metrics_port.Release();  // for the agent: this --metrics-address comes last, and counts
      // The agent reads a process's contexts when its first samples come (the fixture waits for
      // its go byte busy, in waiting_work): the requests start once it has, or the samples of
      // that moment would have none and say nothing about how the records are read. The dlopen
      // build publishes only after the go byte (and pauses a while itself); the anonymous mapping
      // cannot be found here.
      const bool wait = GetParam().mapping == "memfd" &&
                        GetParam().argv_before_seconds[0].find("dlopen") == std::string::npos;
      cached->run =
          ProfileFixture(Argv(GetParam(), kRunSeconds), kHz, nullptr, SIGINT,
                         {"--otlp-endpoint", "http://" + cached->receiver->target(),
                          "--export-interval", "1s", "--metrics-address", metrics_address},
                         {.once_dropped = [&](pid_t) {
                           if (wait) WaitForThreadContext("http://" + metrics_address);
                         }});
      cached->report = ParseReport(cached->run.fixture_output);
      for (const std::string& file : PprofFilesIn(cached->run.output_dir)) {
        auto profile = ReadPprofFile(file);
        ASSERT_TRUE(profile.ok()) << profile.status();
        for (NamedSample& s : NamedSamples(*profile)) {
          if (s.pid == cached->run.pid) cached->samples.push_back(std::move(s));
        }
        cached->interval_ends.push_back(cached->samples.size());
      }
    }
    r_ = cached.get();
    ASSERT_NE(r_->receiver, nullptr);
    ASSERT_EQ(r_->report.trace_hex.size(), 2u) << r_->run.fixture_output;
    ASSERT_FALSE(r_->samples.empty()) << r_->run.agent_log;
  }
  static void SetUpTestSuite() { runs_ = new std::map<std::string, std::unique_ptr<VariantRun>>; }
  static void TearDownTestSuite() {
    for (auto& [name, run] : *runs_) {
      if (run != nullptr && !run->run.output_dir.empty()) {
        std::filesystem::remove_all(run->run.output_dir);
      }
    }
    delete runs_;
    runs_ = nullptr;
  }
  // The kernel names an anonymous mapping only with CONFIG_ANON_VMA_NAME; without it the
  // anonymous variant publishes a process context no reader can find, and with it the thread
  // context's schema and key map: its samples must then carry none.
  bool Findable() const { return GetParam().mapping == "memfd" || r_->report.mapping_named; }

  static std::map<std::string, std::unique_ptr<VariantRun>>* runs_;
  VariantRun* r_ = nullptr;
};
std::map<std::string, std::unique_ptr<VariantRun>>* TraceContextTest::runs_ = nullptr;

TEST_P(TraceContextTest, EachRequestsSamplesCarryItsTraceSpanAndAttributes) {
  int64_t by_work[4] = {};
  int64_t own[2] = {};
  int64_t others[2] = {};
  int64_t with_kind[2] = {};
  int64_t wrong_kind[2] = {};
  int64_t outside_with_context = 0;
  std::map<std::string, int64_t> not_own[2];
  std::string per_interval;  // own/all request samples of each interval, for failure messages
  int64_t interval_own = 0, interval_all = 0;
  for (size_t i = 0, file = 0; i < r_->samples.size(); ++i) {
    const NamedSample& s = r_->samples[i];
    while (file < r_->interval_ends.size() && i >= r_->interval_ends[file]) {
      absl::StrAppend(&per_interval, " ", interval_own, "/", interval_all);
      interval_own = interval_all = 0;
      ++file;
    }
    const Work work = WorkOf(s.functions);
    by_work[static_cast<int>(work)] += s.count;
    if (work == Work::kCheckout || work == Work::kSearch) {
      interval_all += s.count;
      if (!Label(s, "trace_id").empty()) interval_own += s.count;
    }
    const std::string trace = Label(s, "trace_id");
    const std::string span = Label(s, "span_id");
    const std::string route = Label(s, "http.route");
    const std::string kind_label = Label(s, "request.kind");
    if (work == Work::kOther) continue;
    if (work == Work::kOutside) {
      if (!trace.empty() || !span.empty() || !route.empty() || !kind_label.empty()) {
        outside_with_context += s.count;
      }
      continue;
    }
    const int k = static_cast<int>(work);
    const int other = 1 - k;
    if (trace == r_->report.trace_hex[kKinds[k]] && r_->report.spans[kKinds[k]].count(span) &&
        route == kRoutes[k]) {
      own[k] += s.count;
    } else {
      // For the failure message: what the others carry instead.
      const std::string trace_kind = trace.empty() ? "none"
                                     : r_->report.kind_of_trace.count(trace)
                                         ? r_->report.kind_of_trace[trace]
                                         : trace;
      const std::string span_kind = span.empty() ? "none"
                                    : r_->report.kind_of_span.count(span)
                                        ? r_->report.kind_of_span[span]
                                        : span;
      not_own[k][absl::StrCat("trace ", trace_kind, ", span ", span_kind, ", http.route '", route,
                              "'")] += s.count;
    }
    if (trace == r_->report.trace_hex[kKinds[other]] ||
        r_->report.spans[kKinds[other]].count(span) || route == kRoutes[other] ||
        kind_label == kKinds[other]) {
      others[k] += s.count;
    }
    if (kind_label == kKinds[k]) with_kind[k] += s.count;
    if (!kind_label.empty() && kind_label != kKinds[k]) wrong_kind[k] += s.count;
  }
  absl::StrAppend(&per_interval, " ", interval_own, "/", interval_all);
  std::printf(
      "[   INFO   ] samples: checkout %lld (%lld own), search %lld (%lld own), "
      "outside %lld, other %lld; request samples with a trace id / all, per interval:%s\n",
      static_cast<long long>(by_work[0]), static_cast<long long>(own[0]),
      static_cast<long long>(by_work[1]), static_cast<long long>(own[1]),
      static_cast<long long>(by_work[2]), static_cast<long long>(by_work[3]), per_interval.c_str());
  for (int k = 0; k < 2; ++k) {
    ASSERT_GT(by_work[k], 50) << kKinds[k] << " was hardly sampled\n" << r_->run.agent_log;
    EXPECT_EQ(others[k], 0) << kKinds[k] << " samples carrying the other request's context";
    EXPECT_EQ(wrong_kind[k], 0);
    if (!Findable()) {
      EXPECT_EQ(own[k], 0) << "a context from a mapping no reader can find";
      continue;
    }
    EXPECT_GE(Share(own[k], by_work[k]), 0.95)
        << own[k] << " of " << by_work[k] << " " << kKinds[k]
        << " samples carry its trace id, one of its span ids and http.route " << kRoutes[k]
        << "; the others carry:\n"
        <<
        [&] {
          std::string lines;
          for (const auto& [what, n] : not_own[k])
            absl::StrAppend(&lines, "  ", n, " x ", what, "\n");
          return lines;
        }()
        << CommonStacks(
               r_->samples,
               [&](const NamedSample& s) { return static_cast<int>(WorkOf(s.functions)) == k; }, 5)
        << r_->run.agent_log;
    // The update came halfway: request.kind is in the key map and in the records from then on.
    EXPECT_GE(Share(with_kind[k], by_work[k]), 0.25)
        << with_kind[k] << " of " << by_work[k] << " " << kKinds[k]
        << " samples carry request.kind, published by the process-context update halfway";
  }
  EXPECT_GT(by_work[2], 20);
  EXPECT_EQ(outside_with_context, 0) << "samples outside any request carry a context";
}

TEST_P(TraceContextTest, CpuSplitPerTraceMatchesTheFixturesAccounting) {
  int64_t total = 0;
  std::map<std::string, int64_t> by_trace;
  for (const NamedSample& s : r_->samples) {
    if (WorkOf(s.functions) == Work::kOther) continue;
    total += s.count;
    by_trace[Label(s, "trace_id")] += s.count;
  }
  double accounted = 0;
  for (const auto& [kind, ns] : r_->report.cpu_ns) accounted += ns;
  ASSERT_GT(accounted, 0) << r_->run.fixture_output;
  for (const char* kind : kKinds) {
    const double measured = r_->report.cpu_ns[kind] / accounted;
    const double sampled = Share(by_trace[r_->report.trace_hex[kind]], total);
    std::printf(
        "[   INFO   ] %s: %.1f%% of the CPU by the fixture's accounting, %.1f%% of the "
        "samples carry its trace id\n",
        kind, 100 * measured, 100 * sampled);
    if (!Findable()) {
      EXPECT_EQ(sampled, 0);
      continue;
    }
    EXPECT_NEAR(sampled, measured, 0.05) << kind << "\n" << r_->run.agent_log;
  }
}

// The resource attributes the process published reach its pprof samples as labels, the update's
// included.
TEST_P(TraceContextTest, PublishedResourceAttributesLabelTheProcesssSamples) {
  ASSERT_EQ(r_->report.published.size(), 2u) << r_->run.fixture_output;
  int64_t total = 0;
  int64_t labelled = 0;
  int64_t with_update = 0;
  for (const NamedSample& s : r_->samples) {
    total += s.count;
    bool all = true;
    for (const auto& [key, value] : r_->report.published[1]) all = all && Label(s, key) == value;
    if (all) labelled += s.count;
    if (Label(s, "service.version") == r_->report.published[2]["service.version"]) {
      with_update += s.count;
    }
  }
  if (!Findable()) {
    EXPECT_EQ(labelled, 0);
    EXPECT_EQ(with_update, 0);
    return;
  }
  EXPECT_GE(Share(labelled, total), 0.9)
      << labelled << " of " << total << " samples carry service.name, service.instance.id and "
      << "deployment.environment.name as published\n"
      << r_->run.agent_log;
  EXPECT_GT(with_update, 0) << "no sample carries service.version, published by the update";
}

// The same samples over OTLP: valid requests, links into a deduplicated link table, the
// attributes as sample attributes, and the published resource attributes in the Resource.
// Each request is read as the upstream opentelemetry-proto v1.11.0 schema reads its bytes
// (tests/support/upstream_otlp: protoc --decode against the published .proto files).
TEST_P(TraceContextTest, OtlpCarriesLinksAttributesAndThePublishedResource) {
  std::vector<ReceivedExport> received = r_->receiver->received();
  ASSERT_GE(received.size(), 2u) << r_->run.agent_log;
  int64_t by_work[4] = {};
  int64_t linked[2] = {};
  int64_t mislinked = 0;
  int64_t routed[2] = {};
  int resources = 0;
  int resources_with_published = 0;
  bool last_has_update = false;
  for (const ReceivedExport& r : received) {
    EXPECT_TRUE(r.valid.ok()) << r.valid;
    absl::StatusOr<ExportRequest> upstream = ReadWithUpstreamProtos(r.request.SerializeAsString());
    ASSERT_TRUE(upstream.ok()) << upstream.status();
    const ExportRequest& request = *upstream;
    const otlp::ProfilesDictionary& dictionary = request.dictionary();
    if (dictionary.link_table_size() > 0) {
      EXPECT_TRUE(dictionary.link_table(0).trace_id().empty() &&
                  dictionary.link_table(0).span_id().empty())
          << "link_table[0] must be the zero link";
    }
    std::set<std::pair<std::string, std::string>> links;
    for (const otlp::Link& link : dictionary.link_table()) {
      EXPECT_TRUE(links.insert({link.trace_id(), link.span_id()}).second)
          << "link_table holds a link twice";
    }
    for (const auto& resource_profiles : request.resource_profiles()) {
      const auto& resource = resource_profiles.resource();
      if (ResourceAttribute(resource, "process.pid") != std::to_string(r_->run.pid)) continue;
      ++resources;
      bool published = true;
      for (const auto& [key, value] : r_->report.published[1]) {
        published = published && ResourceAttribute(resource, key) == value;
      }
      if (published) ++resources_with_published;
      last_has_update = ResourceAttribute(resource, "service.version") ==
                        r_->report.published[2]["service.version"];
      for (const auto& scope : resource_profiles.scope_profiles()) {
        for (const otlp::Profile& profile : scope.profiles()) {
          for (const otlp::Sample& sample : profile.samples()) {
            const Work work = WorkOf(FunctionsOf(dictionary, sample));
            const int64_t count = sample.values_size() > 0 ? sample.values(0) : 1;
            by_work[static_cast<int>(work)] += count;
            std::string link_kind;
            if (sample.link_index() > 0) {
              ASSERT_LT(sample.link_index(), dictionary.link_table_size());
              const otlp::Link& link = dictionary.link_table(sample.link_index());
              ASSERT_EQ(link.trace_id().size(), 16u);
              ASSERT_EQ(link.span_id().size(), 8u);
              const std::string trace = absl::BytesToHexString(link.trace_id());
              const std::string span = absl::BytesToHexString(link.span_id());
              auto kind = r_->report.kind_of_trace.find(trace);
              ASSERT_NE(kind, r_->report.kind_of_trace.end()) << trace;
              EXPECT_EQ(r_->report.kind_of_span[span], kind->second) << span;
              link_kind = kind->second;
            }
            std::string route;
            for (int index : sample.attribute_indices()) {
              const otlp::KeyValueAndUnit& a = dictionary.attribute_table(index);
              if (dictionary.string_table(a.key_strindex()) == "http.route") {
                route = a.value().string_value();
              }
            }
            if (work == Work::kCheckout || work == Work::kSearch) {
              const int k = static_cast<int>(work);
              if (link_kind == kKinds[k]) linked[k] += count;
              if (!link_kind.empty() && link_kind != kKinds[k]) mislinked += count;
              if (route == kRoutes[k]) routed[k] += count;
            } else if (work == Work::kOutside && (!link_kind.empty() || !route.empty())) {
              mislinked += count;
            }
          }
        }
      }
    }
  }
  ASSERT_GE(resources, 2) << r_->run.agent_log;
  EXPECT_EQ(mislinked, 0);
  if (!Findable()) {
    EXPECT_EQ(linked[0] + linked[1], 0);
    EXPECT_EQ(resources_with_published, 0);
    return;
  }
  for (int k = 0; k < 2; ++k) {
    EXPECT_GE(Share(routed[k], by_work[k]), 0.95) << kKinds[k] << " samples with http.route";
    EXPECT_GE(Share(linked[k], by_work[k]), 0.95)
        << linked[k] << " of " << by_work[k] << " " << kKinds[k] << " samples linked to its trace";
  }
  EXPECT_EQ(resources_with_published, resources)
      << "every interval's Resource carries the published attributes";
  EXPECT_TRUE(last_has_update) << "the last interval's Resource lacks the update's attribute";
}

// Both dlopen builds: glibc places the TLSDESC library's block in static TLS's surplus and the
// general-dynamic one's in a block of its own, reached through the thread's DTV.
INSTANTIATE_TEST_SUITE_P(Variants, TraceContextTest, ::testing::ValuesIn(Variants()),
                         [](const auto& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------
// Hostile records and a decoy mapping (the fixture's `hostile` mode): each is refused or read in
// part, counted in /metrics, and costs neither the sample nor the good requests' context.

TEST(TraceContextHostileTest, HostileRecordsAndADecoyMappingAreSkippedAndCounted) {
  const std::string dir = MakeTempDir();
  ASSERT_FALSE(dir.empty());
  Subprocess fixture({Dir() + "/trace_context_exe", absl::StrCat(kRunSeconds), "memfd", "hostile"});
  ASSERT_TRUE(fixture.WaitForOutput("ready", seconds(10))) << fixture.output();
  // The decoy is listed before the real mapping, so a reader meets it first.
  const FixtureReport before = ParseReport(fixture.output());
  std::ifstream maps(absl::StrCat("/proc/", fixture.pid(), "/maps"));
  std::string line;
  std::vector<uint64_t> named;
  while (std::getline(maps, line)) {
    if (line.find("/memfd:OTEL_CTX") == std::string::npos) continue;
    uint64_t start = 0;
    absl::SimpleHexAtoi(line.substr(0, line.find('-')), &start);
    named.push_back(start);
  }
  ASSERT_EQ(named.size(), 2u);
  ASSERT_EQ(named[1], before.header_address) << "the decoy is not listed first";

  Subprocess agent({EMBER_AGENT_BIN, "--pid", std::to_string(fixture.pid()), "--sampling-hz",
                    std::to_string(kHz), "--export-interval", "1s", "--output-dir", dir,
                    "--metrics-address", "127.0.0.1:0"});
  ASSERT_TRUE(agent.WaitForOutput("status endpoint", seconds(30))) << agent.output();
  const std::string endpoint = StatusEndpoint(agent.output());
  ASSERT_FALSE(endpoint.empty()) << agent.output();
  WaitForThreadContext(endpoint);  // the decoy must not keep it from being read
  fixture.WriteStdin("g");
  ASSERT_EQ(fixture.Wait(seconds(60)), 0) << fixture.output();
  std::this_thread::sleep_for(seconds(2));  // the last samples are read within a few loop turns
  auto [status, page] = HttpGet(endpoint + "/metrics");
  agent.Signal(SIGINT);
  EXPECT_EQ(agent.Wait(seconds(30)), 0) << agent.output();
  ExpectNoSampleLost(agent.output());
  ASSERT_EQ(status, 200) << page;

  FixtureReport report = ParseReport(fixture.output());
  ASSERT_EQ(report.trace_hex.size(), 3u) << fixture.output();
  const std::string hostile_trace = report.trace_hex["hostile"];
  std::map<std::string, int64_t> by_work, carrying, route_ok;
  int64_t own[2] = {}, total = 0, published = 0, stray = 0;
  for (const NamedSample& s : SamplesOf(dir, fixture.pid())) {
    total += s.count;
    if (Label(s, "service.name") == report.published[1]["service.name"]) published += s.count;
    std::string work;
    for (const char* f : {"checkout_work", "search_work", "invalid_record_work",
                          "unreadable_record_work", "stray_key_work", "oversized_record_work"}) {
      if (std::find(s.functions.begin(), s.functions.end(), f) != s.functions.end()) work = f;
    }
    if (work.empty()) continue;
    by_work[work] += s.count;
    const std::string trace = Label(s, "trace_id");
    const std::string route = Label(s, "http.route");
    if (!trace.empty()) carrying[work] += s.count;
    for (int k = 0; k < 2; ++k) {
      if (work == absl::StrCat(kKinds[k], "_work") && trace == report.trace_hex[kKinds[k]] &&
          route == kRoutes[k]) {
        own[k] += s.count;
      }
    }
    if (work == "stray_key_work" && trace == hostile_trace && route == "/hostile") {
      route_ok[work] += s.count;
    }
    if (work == "oversized_record_work" && trace == hostile_trace && route == "/oversized") {
      route_ok[work] += s.count;
    }
    for (const auto& [key, value] : s.labels) {
      if (value == "stray" || value == "abc") stray += s.count;
    }
  }
  std::string counts;
  for (const auto& [work, n] : by_work) absl::StrAppend(&counts, " ", work, "=", n);
  std::printf("[   INFO   ] samples by work:%s\n", counts.c_str());
  // The good requests keep their context beside the hostile ones, and the decoy did not hide the
  // process context.
  for (int k = 0; k < 2; ++k) {
    const int64_t n = by_work[absl::StrCat(kKinds[k], "_work")];
    EXPECT_GE(Share(own[k], n), 0.95) << own[k] << " of " << n << " " << kKinds[k] << " samples";
  }
  EXPECT_GE(Share(published, total), 0.9) << "the decoy mapping hid the process context";
  // valid = 0 and an unreadable record carry nothing; the others their trace and the entries
  // that fit with a known key, and never the stray key's or the overrunning entry's value.
  for (const char* work : {"invalid_record_work", "unreadable_record_work", "stray_key_work",
                           "oversized_record_work"}) {
    EXPECT_GT(by_work[work], 3) << work << " was hardly sampled";
  }
  EXPECT_EQ(carrying["invalid_record_work"], 0);
  EXPECT_EQ(carrying["unreadable_record_work"], 0);
  EXPECT_GE(Share(route_ok["stray_key_work"], by_work["stray_key_work"]), 0.9);
  EXPECT_GE(Share(route_ok["oversized_record_work"], by_work["oversized_record_work"]), 0.9);
  EXPECT_EQ(stray, 0) << "a value of an unknown key or of an entry past the end became a label";
  // Counted.
  auto metric = [&](const std::string& series) { return MetricValue(page, series).value_or(0); };
  EXPECT_GT(metric("ember_bpf_thread_context_reads_total{result=\"invalid\"}") +
                metric("ember_thread_context_records_total{result=\"invalid\"}"),
            0);
  EXPECT_GT(metric("ember_bpf_thread_context_reads_total{result=\"read_failed\"}"), 0);
  EXPECT_GT(metric("ember_thread_context_records_total{result=\"key_out_of_range\"}"), 0);
  EXPECT_GT(metric("ember_thread_context_records_total{result=\"attribute_truncated\"}"), 0);
  EXPECT_GT(metric("ember_bpf_thread_context_reads_total{result=\"ok\"}"), 0);
  if (HasFailure()) {
    std::string context_series;
    std::istringstream lines(page);
    while (std::getline(lines, line)) {
      if (absl::StrContains(line, "context")) absl::StrAppend(&context_series, line, "\n");
    }
    ADD_FAILURE() << "the agent's trace-context series:\n" << context_series << agent.output();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ember::testing
