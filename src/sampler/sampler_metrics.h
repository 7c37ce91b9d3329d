// The self-metrics of the BPF program's own counters (BpfStats), read when scraped.
#pragma once

#include <functional>

#include "absl/status/status.h"
#include "sampler/bpf_profiler.h"
#include "status/metrics_registry.h"

namespace ember {

// ember_bpf_samples_total. `read_stats` runs on the scraping thread: it reads the BPF maps, or
// what the sampling loop last read of them where that thread may not.
absl::Status RegisterBpfSampleMetrics(MetricsRegistry& registry,
                                      std::function<BpfStats()> read_stats);

}  // namespace ember
