// The input of python_walk_fuzz: a sparse image of a process's memory plus what the agent would
// know about it (layout, _PyRuntime, PyCode_Type, the sampled thread), as a MemoryReader. The
// unit tests build their fake interpreters with the same writer, and check that the seeds in
// corpus/python_walk_fuzz/ still walk to the end.
//
//   u8 layout index (into AllLayouts(), modulo its size)   u8 flags (bit 0: match the native tid)
//   u64 runtime address   u64 PyCode_Type address   u64 pthread id   u32 native tid
//   then regions to the end of the input: u64 base, u16 size, `size` bytes (the last may be cut)
// All little-endian.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "runtimes/cpython/cpython_layout.h"
#include "runtimes/cpython/frame_walker.h"
#include "runtimes/process_memory.h"

namespace ember::python::fuzzing {

inline constexpr size_t kImageHeaderBytes = 30;
inline constexpr uint8_t kMatchNativeTid = 1;

// Regions of bytes at addresses; a read is served when one region holds all of it. Overlapping
// regions: the lowest base that holds the read wins.
class MemoryImage : public MemoryReader {
 public:
  bool Read(uint64_t address, void* out, size_t size) override {
    ++reads_;
    if (size == 0) return true;
    auto it = regions_.upper_bound(address);
    while (it != regions_.begin()) {
      --it;
      const uint64_t base = it->first;
      const std::vector<uint8_t>& bytes = it->second;
      // address >= base here; compared by subtraction so that no sum can wrap.
      const uint64_t skip = address - base;
      if (skip < bytes.size() && size <= bytes.size() - skip) {
        std::memcpy(out, bytes.data() + skip, size);
        return true;
      }
    }
    return false;
  }
  // Adds (or replaces) the region at `base`.
  void Put(uint64_t base, std::vector<uint8_t> bytes) { regions_[base] = std::move(bytes); }
  // Writes into the region holding [address, address + size); false when none does.
  bool Write(uint64_t address, const void* data, size_t size) {
    auto it = regions_.upper_bound(address);
    if (it == regions_.begin()) return false;
    --it;
    const uint64_t skip = address - it->first;
    if (skip >= it->second.size() || size > it->second.size() - skip) return false;
    std::memcpy(it->second.data() + skip, data, size);
    return true;
  }
  template <typename T>
  bool WriteValue(uint64_t address, T value) {
    return Write(address, &value, sizeof(T));
  }
  const std::map<uint64_t, std::vector<uint8_t>>& regions() const { return regions_; }
  size_t reads() const { return reads_; }

 private:
  std::map<uint64_t, std::vector<uint8_t>> regions_;
  size_t reads_ = 0;
};

// What the header says besides the memory.
struct ImageTarget {
  WalkerConfig config;
  ThreadIdentity thread;
  uint8_t layout_index = 0;
  uint8_t flags = 0;
};

namespace internal {
template <typename T>
T Take(std::span<const uint8_t>* in) {
  T value{};
  std::memcpy(&value, in->data(), sizeof(T));
  *in = in->subspan(sizeof(T));
  return value;
}
template <typename T>
void Append(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}
}  // namespace internal

// False when the input is shorter than the header.
inline bool ParseImage(std::span<const uint8_t> in, ImageTarget* target, MemoryImage* memory) {
  if (in.size() < kImageHeaderBytes) return false;
  const std::span<const CPythonLayout> layouts = AllLayouts();
  target->layout_index = internal::Take<uint8_t>(&in);
  target->flags = internal::Take<uint8_t>(&in);
  target->config.layout = layouts[target->layout_index % layouts.size()];
  target->config.runtime_address = internal::Take<uint64_t>(&in);
  target->config.code_type_address = internal::Take<uint64_t>(&in);
  target->thread.pthread_id = internal::Take<uint64_t>(&in);
  target->thread.native_tid = internal::Take<uint32_t>(&in);
  if ((target->flags & kMatchNativeTid) != 0) {
    target->thread.pthread_id = 0;
  } else {
    target->thread.native_tid = 0;
  }
  while (in.size() >= 10) {
    const uint64_t base = internal::Take<uint64_t>(&in);
    const size_t size = std::min<size_t>(internal::Take<uint16_t>(&in), in.size());
    memory->Put(base, std::vector<uint8_t>(in.begin(), in.begin() + size));
    in = in.subspan(size);
  }
  return true;
}

// The input ParseImage reads back as `target` and `memory` (regions over 64 KiB are cut).
inline std::string WriteImage(const ImageTarget& target, const MemoryImage& memory) {
  std::string out;
  internal::Append<uint8_t>(&out, target.layout_index);
  internal::Append<uint8_t>(&out, target.flags);
  internal::Append<uint64_t>(&out, target.config.runtime_address);
  internal::Append<uint64_t>(&out, target.config.code_type_address);
  internal::Append<uint64_t>(&out, target.thread.pthread_id);
  internal::Append<uint32_t>(&out, target.thread.native_tid);
  for (const auto& [base, bytes] : memory.regions()) {
    const size_t size = std::min<size_t>(bytes.size(), UINT16_MAX);
    internal::Append<uint64_t>(&out, base);
    internal::Append<uint16_t>(&out, static_cast<uint16_t>(size));
    out.append(reinterpret_cast<const char*>(bytes.data()), size);
  }
  return out;
}

}  // namespace ember::python::fuzzing
