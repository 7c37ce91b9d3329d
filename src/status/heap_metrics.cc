// Heap metrics from glibc's mallinfo2(), or from the sanitizer's allocator in sanitized builds
// (which replace malloc, so mallinfo2 knows nothing of their blocks).
#include "status/heap_metrics.h"

#include <malloc.h>

#include <cstddef>
#include <optional>

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

struct HeapBytes {
  double allocated = 0;
  double free = 0;
};

HeapBytes ReadHeap() {
#ifdef EMBER_HEAP_FROM_SANITIZER
  return {static_cast<double>(__sanitizer_get_current_allocated_bytes()),
          static_cast<double>(__sanitizer_get_free_bytes())};
#else
  // Walks every arena under its lock: cheap enough per scrape, not per sample.
  struct mallinfo2 info = mallinfo2();
  return {static_cast<double>(info.uordblks + info.hblkhd), static_cast<double>(info.fordblks)};
#endif
}

}  // namespace

absl::Status AddHeapMetrics(MetricsRegistry& registry) {
  RETURN_IF_ERROR(registry.AddCallbackGauge(
      "ember_heap_allocated_bytes",
      "Bytes of the agent's heap in use: allocated by malloc and not yet freed.", {},
      []() -> std::optional<double> { return ReadHeap().allocated; }));
  return registry.AddCallbackGauge(
      "ember_heap_free_bytes",
      "Bytes malloc holds free in the agent's heap: freed but not returned to the system.", {},
      []() -> std::optional<double> { return ReadHeap().free; });
}

}  // namespace ember
