// UNSIGNED5: numbers in a modified base-64, little-endian, of at most five bytes. With X
// excluded byte values, L = 256 - 64 - X bytes end a number and the 64 above them carry on.
#include "runtimes/hotspot/unsigned5.h"

namespace ember::hotspot {
namespace {

constexpr int kLgH = 6;
constexpr int kMaxLength = 5;

}  // namespace

std::optional<uint32_t> Unsigned5Reader::ReadUnsigned() {
  const uint32_t x = excluded_;
  const uint32_t low = 256 - (1u << kLgH) - x;
  uint32_t sum = 0;
  for (int i = 0; i < kMaxLength; ++i) {
    if (position_ + i >= bytes_.size()) return std::nullopt;
    const uint32_t b = bytes_[position_ + i];
    if (b < x) return std::nullopt;
    // Unsigned arithmetic: a five-byte number may wrap, as it does in the JVM.
    sum += (b - x) << (kLgH * i);
    if (b < x + low || i == kMaxLength - 1) {
      position_ += i + 1;
      return sum;
    }
  }
  return std::nullopt;  // not reached: the fifth byte always ends a number
}

std::optional<int32_t> Unsigned5Reader::ReadSigned() {
  std::optional<uint32_t> value = ReadUnsigned();
  if (!value) return std::nullopt;
  return DecodeUnsigned5Sign(*value);
}

std::optional<uint8_t> Unsigned5Reader::ReadByte() {
  if (position_ >= bytes_.size()) return std::nullopt;
  return bytes_[position_++];
}

}  // namespace ember::hotspot
