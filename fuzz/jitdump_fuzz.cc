// jitdump files (jit-PID.dump) are written by the profiled programs: any bytes, read while they
// grow. The input is read in two steps, up to a length its first byte picks and then whole, with
// a small per-call budget, as a growing file is; every name must lie where it says, every line
// belong to named code, and the limits hold.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "symbolize/jitdump.h"

namespace {

class BytesSource : public ember::JitDumpSource {
 public:
  BytesSource(const char* data, size_t size) : data_(data), size_(size) {}
  uint64_t size() const override { return size_; }
  bool Read(uint64_t offset, size_t size, char* out) override {
    if (offset > size_ || size > size_ - offset) return false;
    std::memcpy(out, data_ + offset, size);
    return true;
  }

 private:
  const char* data_;
  size_t size_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const char* bytes = reinterpret_cast<const char*>(data) + 1;
  const size_t length = size - 1;
  const size_t split = length == 0 ? 0 : (length * data[0]) / 255;
  ember::PerfMapLimits limits;
  limits.max_entries = 64;
  limits.max_name_bytes = 4096;
  limits.max_bytes = 6144;
  limits.max_line_bytes = 512;
  ember::JitDump dump(limits);
  BytesSource part(bytes, split);
  dump.Read(part, 256);
  if (data[0] & 1) dump.ShedOldest();
  BytesSource whole(bytes, length);
  for (int i = 0; i < 64; ++i) {
    if (dump.Read(whole, 4096) == 0) break;
  }
  if (dump.offset() > length && dump.offset() > 4096) __builtin_trap();
  for (uint64_t address :
       {uint64_t{0}, uint64_t{0x1000}, uint64_t{0x1040}, uint64_t{0x7fff0000}, ~uint64_t{0}}) {
    if (auto symbol = dump.names().Lookup(address)) {
      if (address < symbol->start || address >= symbol->end) __builtin_trap();
    }
    if (auto line = dump.LineAt(address)) {
      if (line->file.size() > limits.max_line_bytes) __builtin_trap();
    }
  }
  if (dump.names().EstimatedBytes() > limits.max_bytes ||
      dump.EstimatedBytes() > limits.max_bytes + limits.max_bytes / 4) {
    __builtin_trap();
  }
  return 0;
}
