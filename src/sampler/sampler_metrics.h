// The self-metrics of the BPF program's own counters (BpfStats), read when scraped.
#pragma once

#include <functional>

#include "absl/status/status.h"
#include "sampler/bpf_profiler.h"
#include "status/metrics_registry.h"

namespace ember {

// ember_bpf_samples_total, ember_bpf_thread_context_reads_total{result} and
// ember_bpf_context_notices_total{result}. `read_stats` runs on the scraping thread: it reads the
// BPF maps, or what the sampling loop last read of them where that thread may not. With
// `context_notices_enabled` (BpfProfiler::context_notices_enabled), the gauge
// ember_trace_context_notices_enabled too.
absl::Status RegisterBpfSampleMetrics(MetricsRegistry& registry,
                                      std::function<BpfStats()> read_stats,
                                      std::function<bool()> context_notices_enabled = nullptr);

}  // namespace ember
