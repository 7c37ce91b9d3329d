// Registration of the BPF program's metrics.
#include "sampler/sampler_metrics.h"

#include <utility>

namespace ember {

absl::Status RegisterBpfSampleMetrics(MetricsRegistry& registry,
                                      std::function<BpfStats()> read_stats,
                                      std::function<bool()> context_notices_enabled) {
  auto status = registry.AddCallbackCounter(
      "ember_bpf_samples_total",
      "Samples the BPF program wrote to the ring buffer, as they are taken; ember_samples_total "
      "counts those the agent has read (every few seconds).",
      {}, [read = read_stats] { return static_cast<double>(read().samples); });
  if (!status.ok()) return status;
  using Field = uint64_t BpfStats::*;
  const std::pair<const char*, Field> reads[] = {{"ok", &BpfStats::context_ok},
                                                 {"none", &BpfStats::context_none},
                                                 {"invalid", &BpfStats::context_invalid},
                                                 {"read_failed", &BpfStats::context_read_failed},
                                                 {"no_tls_block", &BpfStats::context_no_tls_block}};
  for (const auto& [result, field] : reads) {
    status = registry.AddCallbackCounter(
        "ember_bpf_thread_context_reads_total",
        "OpenTelemetry thread-context reads in BPF for samples of processes that publish one, by "
        "result: ok (a record with valid 1), none (the thread serves no span), invalid (valid "
        "byte not 1), read_failed (its TLS, pointer or record unreadable), no_tls_block (the "
        "thread has no TLS block of the defining module yet).",
        {{"result", result}},
        [read = read_stats, member = field] { return static_cast<double>(read().*member); });
    if (!status.ok()) return status;
  }
  const std::pair<const char*, Field> notices[] = {
      {"written", &BpfStats::context_notices},
      {"lost", &BpfStats::context_notices_lost},
      {"suppressed", &BpfStats::context_notices_suppressed}};
  for (const auto& [result, field] : notices) {
    status = registry.AddCallbackCounter(
        "ember_bpf_context_notices_total",
        "Process-context re-publish notices (a prctl naming a mapping OTEL_CTX) the BPF program "
        "saw, by result: written to the ring buffer, lost to a full one, or suppressed (the "
        "same process gave one less than a second before).",
        {{"result", result}},
        [read = read_stats, member = field] { return static_cast<double>(read().*member); });
    if (!status.ok()) return status;
  }
  if (context_notices_enabled == nullptr) return absl::OkStatus();
  return registry.AddCallbackGauge(
      "ember_trace_context_notices_enabled",
      "1 when the sys_enter_prctl tracepoint is attached and process-context re-publish notices "
      "arrive at once; 0 when a process's context is read again only at its maps' re-reads.",
      {}, [enabled = std::move(context_notices_enabled)] { return enabled() ? 1.0 : 0.0; });
}

}  // namespace ember
