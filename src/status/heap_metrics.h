// The agent's malloc heap, as metrics: what it has allocated and what it holds free. Together
// with process_resident_memory_bytes they tell live data that grows from a heap that only holds
// on to freed memory (fragmentation), which RSS alone cannot.
#pragma once

#include <functional>

#include "absl/status/status.h"
#include "status/metrics_registry.h"

namespace ember {

struct HeapBytes {
  double allocated = 0;  // in blocks malloc has handed out and not had back
  double free = 0;       // held free in malloc's arenas
};

// mallinfo2(), or the sanitizer allocator's figures in sanitized builds.
HeapBytes ReadHeapBytes();

// Registers ember_heap_allocated_bytes and ember_heap_free_bytes, computed at scrape time from one
// reading per scrape (both figures of the same moment; a reading walks every arena under its
// lock). `read` is for tests.
absl::Status AddHeapMetrics(MetricsRegistry& registry,
                            std::function<HeapBytes()> read = ReadHeapBytes);

}  // namespace ember
