// Registration of the BPF program's metrics.
#include "sampler/sampler_metrics.h"

#include <utility>

namespace ember {

absl::Status RegisterBpfSampleMetrics(MetricsRegistry& registry,
                                      std::function<BpfStats()> read_stats) {
  return registry.AddCallbackCounter(
      "ember_bpf_samples_total",
      "Samples the BPF program wrote to the ring buffer, as they are taken; ember_samples_total "
      "counts those the agent has read (every few seconds).",
      {}, [read = std::move(read_stats)] { return static_cast<double>(read().samples); });
}

}  // namespace ember
