// Real debug files of as many distinct build ids as a test wants: the symbolizer's fixture
// program, and copies of it that differ only in the last byte of their build id.
#pragma once

#include <fstream>
#include <iterator>
#include <string>

#include "symbolize/elf_module.h"

namespace ember {

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

inline std::string Hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : bytes) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return hex;
}

class ElfVariants {
 public:
  ElfVariants() {
    const std::string path = std::string(EMBER_SYMBOLIZE_FIXTURE_DIR) + "/ember_sym_fixture";
    bytes_ = ReadBytes(path);
    auto module = ElfModule::Open(path, path);
    if (module.ok()) build_id_ = (*module)->build_id();
    std::string raw;
    for (size_t i = 0; i + 1 < build_id_.size(); i += 2) {
      raw += static_cast<char>(std::stoi(build_id_.substr(i, 2), nullptr, 16));
    }
    id_offset_ = raw.empty() ? std::string::npos : bytes_.find(raw);
    raw_id_ = raw;
  }
  bool ok() const { return !build_id_.empty() && id_offset_ != std::string::npos; }
  size_t size() const { return bytes_.size(); }
  // Variant n (0: the fixture itself): its build id and its bytes.
  std::string BuildId(int n) const { return Hex(Patched(raw_id_, n)); }
  std::string Bytes(int n) const {
    std::string bytes = bytes_;
    bytes.replace(id_offset_, raw_id_.size(), Patched(raw_id_, n));
    return bytes;
  }

 private:
  static std::string Patched(std::string id, int n) {
    id.back() = static_cast<char>(static_cast<unsigned char>(id.back()) ^ n);
    return id;
  }
  std::string bytes_;
  std::string build_id_;
  std::string raw_id_;
  size_t id_offset_ = std::string::npos;
};

}  // namespace ember
