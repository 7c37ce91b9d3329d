// A process that publishes an OpenTelemetry process context as OTEP 4719 describes (a memfd named
// OTEL_CTX, the header at its start, the payload on the heap) and changes it when told, for the
// reader's live tests. Commands on stdin, one a line; each answers one line on stdout:
//   update KEY VALUE  publish again with KEY=VALUE added to the resource -> "updated"
//   hold              start an update and stay in it (timestamp 0)     -> "holding"
//   release           finish it with a new timestamp                   -> "released"
//   spin SECONDS      run on the CPU that long (for a profiler to sample) -> "spun"
// Prints "ready" once the first context is published; exits at the end of stdin.
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "opentelemetry/proto/processcontext/v1development/process_context.pb.h"

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

namespace {

namespace otel = ::opentelemetry::proto;

struct Header {
  char signature[8];
  uint32_t version;
  uint32_t payload_size;
  uint64_t published_at_ns;
  uint64_t payload;
};

uint64_t BootTimeNs() {
  timespec now;
  clock_gettime(CLOCK_BOOTTIME, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000000000ULL + static_cast<uint64_t>(now.tv_nsec);
}

void Fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

void Name(void* mapping, size_t size) {
  // Fails where the kernel lacks CONFIG_ANON_VMA_NAME; the memfd's own name shows anyway.
  prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, mapping, size, "OTEL_CTX");
}

}  // namespace

int main() {
  const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    std::perror("memfd");
    return 1;
  }
  void* mapping = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapping == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  close(fd);
  madvise(mapping, size, MADV_DONTFORK);
  auto* header = static_cast<volatile Header*>(mapping);

  otel::processcontext::v1development::ProcessContext context;
  auto add = [](google::protobuf::RepeatedPtrField<otel::common::v1::KeyValue>* to,
                const std::string& key, const std::string& value) {
    otel::common::v1::KeyValue* kv = to->Add();
    kv->set_key(key);
    kv->mutable_value()->set_string_value(value);
  };
  add(context.mutable_resource()->mutable_attributes(), "service.name", "checkout");
  add(context.mutable_resource()->mutable_attributes(), "service.version", "1.2.3");
  add(context.mutable_attributes(), "threadlocal.schema_version", "tlsdesc_v1_dev");
  otel::common::v1::KeyValue* key_map = context.mutable_attributes()->Add();
  key_map->set_key("threadlocal.attribute_key_map");
  key_map->mutable_value()->mutable_array_value()->add_values()->set_string_value("http.route");

  // Each publication's payload is a new heap block; the old one is freed only after the header
  // points to the new one, as a publisher would.
  std::unique_ptr<std::string> payload = std::make_unique<std::string>(context.SerializeAsString());
  header->version = 2;
  header->payload_size = static_cast<uint32_t>(payload->size());
  header->payload = reinterpret_cast<uint64_t>(payload->data());
  header->published_at_ns = BootTimeNs();
  Fence();
  std::memcpy(const_cast<char*>(header->signature), "OTEL_CTX", 8);
  Name(mapping, size);
  std::cout << "ready" << std::endl;

  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream words(line);
    std::string command;
    words >> command;
    if (command == "update") {
      std::string key, value;
      words >> key >> value;
      add(context.mutable_resource()->mutable_attributes(), key, value);
      auto next = std::make_unique<std::string>(context.SerializeAsString());
      header->published_at_ns = 0;
      Fence();
      header->payload = reinterpret_cast<uint64_t>(next->data());
      header->payload_size = static_cast<uint32_t>(next->size());
      Fence();
      header->published_at_ns = BootTimeNs();
      payload = std::move(next);
      Name(mapping, size);
      std::cout << "updated" << std::endl;
    } else if (command == "hold") {
      header->published_at_ns = 0;
      Fence();
      std::cout << "holding" << std::endl;
    } else if (command == "spin") {
      double seconds = 0;
      words >> seconds;
      timespec start, now;
      clock_gettime(CLOCK_MONOTONIC, &start);
      volatile uint64_t sink = 0;
      do {
        for (int i = 0; i < 100000; ++i) sink = sink + static_cast<uint64_t>(i);
        clock_gettime(CLOCK_MONOTONIC, &now);
      } while (static_cast<double>(now.tv_sec - start.tv_sec) +
                   static_cast<double>(now.tv_nsec - start.tv_nsec) / 1e9 <
               seconds);
      std::cout << "spun" << std::endl;
    } else if (command == "release") {
      header->published_at_ns = BootTimeNs();
      Fence();
      std::cout << "released" << std::endl;
    }
  }
  return 0;
}
