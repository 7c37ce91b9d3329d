// Heap metrics from glibc's mallinfo2(), or from the sanitizer's allocator in sanitized builds
// (which replace malloc, so mallinfo2 knows nothing of their blocks).
#include "status/heap_metrics.h"

#include <malloc.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "common/status_macros.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMBER_HEAP_FROM_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define EMBER_HEAP_FROM_SANITIZER 1
#endif
#ifdef EMBER_HEAP_FROM_SANITIZER
// From the sanitizer runtime's allocator interface (GCC ships no header for it).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
extern "C" size_t __sanitizer_get_free_bytes();
#endif

namespace ember {
namespace {

// Hands the reading the first gauge of a scrape took to the second. The registry renders the
// families in registration order under its lock, so the free gauge follows its allocated gauge;
// a free gauge that finds no reading (never, unless rendered alone) takes its own.
class SharedReading {
 public:
  explicit SharedReading(std::function<HeapBytes()> read) : read_(std::move(read)) {}
  HeapBytes Take() {
    std::lock_guard lock(mu_);
    HeapBytes bytes = read_();
    pending_ = bytes;
    return bytes;
  }
  HeapBytes TakePending() {
    std::lock_guard lock(mu_);
    std::optional<HeapBytes> pending = std::exchange(pending_, std::nullopt);
    return pending.has_value() ? *pending : read_();
  }

 private:
  std::mutex mu_;
  std::function<HeapBytes()> read_;
  std::optional<HeapBytes> pending_;
};

}  // namespace

HeapBytes ReadHeapBytes() {
#ifdef EMBER_HEAP_FROM_SANITIZER
  return {static_cast<double>(__sanitizer_get_current_allocated_bytes()),
          static_cast<double>(__sanitizer_get_free_bytes())};
#else
  // Walks every arena under its lock: cheap enough per scrape, not per sample.
  struct mallinfo2 info = mallinfo2();
  return {static_cast<double>(info.uordblks + info.hblkhd), static_cast<double>(info.fordblks)};
#endif
}

absl::Status AddHeapMetrics(MetricsRegistry& registry, std::function<HeapBytes()> read) {
  auto reading = std::make_shared<SharedReading>(std::move(read));
  RETURN_IF_ERROR(registry.AddCallbackGauge(
      "ember_heap_allocated_bytes",
      "Bytes of the agent's heap in use: allocated by malloc and not yet freed.", {},
      [reading]() -> std::optional<double> { return reading->Take().allocated; }));
  return registry.AddCallbackGauge(
      "ember_heap_free_bytes",
      "Bytes malloc holds free in the agent's heap: freed but not returned to the system.", {},
      [reading]() -> std::optional<double> { return reading->TakePending().free; });
}

}  // namespace ember
