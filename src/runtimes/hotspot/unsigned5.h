// HotSpot's UNSIGNED5 variable-length integers (utilities/unsigned5.hpp; CompressedReadStream
// before JDK 20): the encoding of line number tables and scope descriptors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace ember::hotspot {

// A reader over a byte span that never reads past it: a number whose bytes run out fails.
class Unsigned5Reader {
 public:
  // `excluded` is the count of low byte values the encoding never uses: 1 from JDK 20 (the zero
  // byte, so that streams can end in a null), 0 before (HotSpotLayout::unsigned5_excluded).
  Unsigned5Reader(std::span<const uint8_t> bytes, uint8_t excluded)
      : bytes_(bytes), excluded_(excluded) {}

  // The next number (1 to 5 bytes); nullopt, with the position left as it was, when the span
  // ends inside it or a byte is one of the excluded values.
  std::optional<uint32_t> ReadUnsigned();
  // The next number in its signed (zigzag) form: (v >> 1) ^ -(v & 1).
  std::optional<int32_t> ReadSigned();
  // One raw byte (the line table's escape and single-byte entries); nullopt at the end.
  std::optional<uint8_t> ReadByte();

  size_t position() const { return position_; }
  void set_position(size_t position) { position_ = position; }
  bool AtEnd() const { return position_ >= bytes_.size(); }

 private:
  std::span<const uint8_t> bytes_;
  uint8_t excluded_;
  size_t position_ = 0;
};

// The zigzag mapping of the signed form.
inline int32_t DecodeUnsigned5Sign(uint32_t value) {
  return static_cast<int32_t>((value >> 1) ^ (0u - (value & 1u)));
}

}  // namespace ember::hotspot
