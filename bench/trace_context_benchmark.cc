// The agent's share of the OpenTelemetry trace context: a sample's thread-context record decoded
// into its span and attributes (the decoder alone, and TraceContexts::ContextOf with its lookup
// and counters, for a process whose key map names both attributes), and a process context read
// through process_vm_readv (this process's own memory: a header whose timestamp is known, and a
// whole read of a 200-byte payload).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "context/process_context.h"
#include "context/thread_record.h"
#include "context/trace_contexts.h"
#include "opentelemetry/proto/processcontext/v1development/process_context.pb.h"
#include "status/metrics_registry.h"

namespace ember::context {
namespace {

// A record with two attributes (http.route, request.kind), as a web server's spans carry.
std::vector<uint8_t> Record() {
  std::vector<uint8_t> bytes(kRecordHeaderBytes, 0x11);
  bytes[kRecordValidAt] = 1;
  for (auto [key, value] : {std::pair<uint8_t, std::string>{0, "/checkout"}, {1, "checkout"}}) {
    bytes.push_back(key);
    bytes.push_back(static_cast<uint8_t>(value.size()));
    bytes.insert(bytes.end(), value.begin(), value.end());
  }
  const uint16_t size = static_cast<uint16_t>(bytes.size() - kRecordHeaderBytes);
  std::memcpy(bytes.data() + kRecordAttrsSizeAt, &size, sizeof(size));
  return bytes;
}

void BM_DecodeRecord(benchmark::State& state) {
  const std::vector<uint8_t> record = Record();
  const std::vector<std::string> key_map = {"http.route", "request.kind"};
  ThreadRecordDecoder decoder;
  RecordOutcome outcome;
  for (auto _ : state) {
    SampleContext context = decoder.Decode(record, key_map, &outcome);
    benchmark::DoNotOptimize(context.attributes.data());
  }
}
BENCHMARK(BM_DecodeRecord);

// A published context in this process's own memory.
struct OwnContext {
  explicit OwnContext(std::string bytes = std::string(200, 'x')) : payload(std::move(bytes)) {
    std::memcpy(header.signature, "OTEL_CTX", 8);
    header.version = 2;
    header.payload_size = static_cast<uint32_t>(payload.size());
    header.published_at_ns = 42;
    header.payload = reinterpret_cast<uint64_t>(payload.data());
    mapping.start = reinterpret_cast<uint64_t>(&header);
    mapping.end = mapping.start + sizeof(header);
    mapping.readable = true;
  }
  std::string payload;
  ProcessContextHeader header;
  MemoryMapping mapping;
};

void BM_ContextOf(benchmark::State& state) {
  // This process publishes a key map; the tracker reads it from a maps file naming its header.
  opentelemetry::proto::processcontext::v1development::ProcessContext message;
  auto* key_map = message.add_attributes();
  key_map->set_key("threadlocal.attribute_key_map");
  for (const char* name : {"http.route", "request.kind"}) {
    key_map->mutable_value()->mutable_array_value()->add_values()->set_string_value(name);
  }
  OwnContext own(message.SerializeAsString());
  char dir[] = "/tmp/ember-trace-context-XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    state.SkipWithError("mkdtemp");
    return;
  }
  const std::string maps = std::string(dir) + "/maps";
  FILE* file = std::fopen(maps.c_str(), "w");
  std::fprintf(file, "%lx-%lx rw-p 00000000 00:00 0 /memfd:OTEL_CTX (deleted)\n",
               static_cast<unsigned long>(own.mapping.start),
               static_cast<unsigned long>(own.mapping.end));
  std::fclose(file);
  Process process;
  process.pid = static_cast<uint32_t>(getpid());
  process.proc_dir = dir;
  MetricsRegistry metrics;
  TraceContexts contexts(nullptr, metrics, {});
  contexts.OnMapsChanged(process);
  std::remove(maps.c_str());
  rmdir(dir);
  if (contexts.Published(process.pid) == nullptr &&
      metrics.Render().find("result=\"ok\"} 1") == std::string::npos) {
    state.SkipWithError("the context was not read");
    return;
  }
  const std::vector<uint8_t> record = Record();
  ember_sample header{};
  header.pid = process.pid;
  header.context_status = EMBER_CONTEXT_OK;
  SampleView sample;
  sample.header = &header;
  sample.thread_context = record;
  size_t attributes = 0;
  for (auto _ : state) {
    SampleContext context = contexts.ContextOf(&process, sample);
    attributes += context.attributes.size();
    benchmark::DoNotOptimize(context.link.trace_id.data());
  }
  if (attributes != 2 * static_cast<size_t>(state.iterations())) {
    state.SkipWithError("the record's attributes were not named");
  }
}
BENCHMARK(BM_ContextOf);

void BM_ReadProcessContext(benchmark::State& state) {
  OwnContext own;
  ProcessMemoryReader memory(getpid());
  RawProcessContext raw;
  const uint64_t known = state.range(0) ? 42 : 0;
  for (auto _ : state) {
    ReadResult result = ReadProcessContext(memory, own.mapping, known, &raw);
    benchmark::DoNotOptimize(result);
  }
}
BENCHMARK(BM_ReadProcessContext)->Arg(1)->Arg(0);

}  // namespace
}  // namespace ember::context

BENCHMARK_MAIN();
