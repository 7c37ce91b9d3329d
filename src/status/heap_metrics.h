// The agent's malloc heap, as metrics: what it has allocated and what it holds free. Together
// with process_resident_memory_bytes they tell live data that grows from a heap that only holds
// on to freed memory (fragmentation), which RSS alone cannot.
#pragma once

#include "absl/status/status.h"
#include "status/metrics_registry.h"

namespace ember {

// Registers ember_heap_allocated_bytes (bytes in blocks malloc has handed out and not had back)
// and ember_heap_free_bytes (bytes malloc holds free in its arenas), computed at scrape time.
absl::Status AddHeapMetrics(MetricsRegistry& registry);

}  // namespace ember
