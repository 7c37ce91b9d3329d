// Builds jitdump byte images (the layout of perf's jitdump-specification.txt, little-endian) for
// tests: a header, then records appended one by one.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace ember::testing {

class JitDumpImage {
 public:
  struct DebugEntry {
    uint64_t addr;  // as the writer gives it (V8: code address + 64 + offset; perf: + offset)
    uint32_t line;
    std::string file;  // "\xff" for the previous entry's
  };

  explicit JitDumpImage(uint32_t magic = 0x4A695444, uint32_t version = 1,
                        uint32_t header_size = 40) {
    Put32(magic);
    Put32(version);
    Put32(header_size);
    Put32(62);  // EM_X86_64
    Put32(0);
    Put32(4242);
    Put64(123);
    Put64(0);
    bytes_.resize(std::max<size_t>(bytes_.size(), header_size), '\0');
  }

  // The header's e_machine.
  JitDumpImage& Machine(uint32_t machine) {
    std::memcpy(&bytes_[12], &machine, sizeof(machine));
    return *this;
  }

  JitDumpImage& CodeLoad(uint64_t addr, uint64_t size, const std::string& name,
                         uint64_t code_index = 0) {
    const size_t start = Prefix(0);
    Put32(4242);
    Put32(4243);
    Put64(addr);
    Put64(addr);
    Put64(size);
    Put64(code_index);
    bytes_ += name;
    bytes_.push_back('\0');
    bytes_.append(size, '\xcc');  // the code
    return Finish(start);
  }
  JitDumpImage& CodeMove(uint64_t old_addr, uint64_t new_addr, uint64_t size) {
    const size_t start = Prefix(1);
    Put32(4242);
    Put32(4243);
    Put64(new_addr);
    Put64(old_addr);
    Put64(new_addr);
    Put64(size);
    Put64(0);
    return Finish(start);
  }
  JitDumpImage& DebugInfo(uint64_t code_addr, const std::vector<DebugEntry>& entries) {
    const size_t start = Prefix(2);
    Put64(code_addr);
    Put64(entries.size());
    for (const DebugEntry& e : entries) {
      Put64(e.addr);
      Put32(e.line);
      Put32(0);
      bytes_ += e.file;
      bytes_.push_back('\0');
    }
    return Finish(start);
  }
  JitDumpImage& UnwindingInfo(size_t payload) {
    const size_t start = Prefix(4);
    Put64(payload);
    Put64(0);
    Put64(payload);
    bytes_.append(payload, '\x01');
    return Finish(start);
  }
  JitDumpImage& Close() { return Finish(Prefix(3)); }
  // Raw bytes, e.g. a record with lying sizes.
  JitDumpImage& Raw(const std::string& bytes) {
    bytes_ += bytes;
    return *this;
  }
  const std::string& bytes() const { return bytes_; }
  void Put32(uint32_t v) { bytes_.append(reinterpret_cast<const char*>(&v), 4); }
  void Put64(uint64_t v) { bytes_.append(reinterpret_cast<const char*>(&v), 8); }

 private:
  size_t Prefix(uint32_t id) {
    const size_t start = bytes_.size();
    Put32(id);
    Put32(0);  // total size, set by Finish
    Put64(1000);
    return start;
  }
  JitDumpImage& Finish(size_t start) {
    const auto size = static_cast<uint32_t>(bytes_.size() - start);
    std::memcpy(bytes_.data() + start + 4, &size, 4);
    return *this;
  }
  std::string bytes_;
};

}  // namespace ember::testing
