// Where an interval's samples keep their names and stacks: copied in once, when a stack is first
// counted, and handed to the output writers with the interval, not copied again.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace ember {

struct Frame;

// A bump allocator in blocks: what it hands out never moves, so views of it stay valid while
// more is copied in and when the arena itself is moved, until it is destroyed.
class SampleArena {
 public:
  SampleArena() = default;
  // The moved-from arena is empty: its next copy starts a block of its own.
  SampleArena(SampleArena&& other) noexcept { *this = std::move(other); }
  SampleArena& operator=(SampleArena&& other) noexcept {
    if (this == &other) return *this;
    blocks_ = std::move(other.blocks_);
    other.blocks_.clear();
    next_ = std::exchange(other.next_, nullptr);
    end_ = std::exchange(other.end_, nullptr);
    return *this;
  }

  std::span<const Frame* const> CopyFrames(std::span<const Frame* const> frames) {
    if (frames.empty()) return {};
    auto* at = static_cast<const Frame**>(Allocate(frames.size_bytes(), alignof(const Frame*)));
    std::copy(frames.begin(), frames.end(), at);
    return {at, frames.size()};
  }

  // Copies trivially copyable values (views stay views: copy what they point at first).
  template <typename T>
  std::span<const T> CopySpan(std::span<const T> values) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (values.empty()) return {};
    auto* at = static_cast<T*>(Allocate(values.size_bytes(), alignof(T)));
    std::memcpy(static_cast<void*>(at), values.data(), values.size_bytes());
    return {at, values.size()};
  }

  std::string_view CopyString(std::string_view text) {
    if (text.empty()) return {};
    auto* at = static_cast<char*>(Allocate(text.size(), 1));
    std::memcpy(at, text.data(), text.size());
    return {at, text.size()};
  }

 private:
  // Most intervals' stacks fit in a few blocks; a bigger request gets a block of its own size.
  static constexpr size_t kBlockBytes = 64 * 1024;

  void* Allocate(size_t bytes, size_t align) {
    size_t padding = (align - reinterpret_cast<uintptr_t>(next_) % align) % align;
    if (next_ == nullptr || bytes + padding > static_cast<size_t>(end_ - next_)) {
      const size_t block = std::max(bytes, kBlockBytes);
      blocks_.push_back(std::make_unique_for_overwrite<std::byte[]>(block));
      next_ = blocks_.back().get();  // new[] aligns for any fundamental type
      end_ = next_ + block;
      padding = 0;
    }
    void* at = next_ + padding;
    next_ += padding + bytes;
    return at;
  }

  std::vector<std::unique_ptr<std::byte[]>> blocks_;
  std::byte* next_ = nullptr;
  std::byte* end_ = nullptr;
};

}  // namespace ember
