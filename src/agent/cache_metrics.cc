// The cache metrics, registered by the folders of the caches.
#include "agent/cache_metrics.h"

namespace ember {

CacheMetrics::CacheMetrics(MetricsRegistry& registry)
    : processes_(registry), symbols_(registry), cfi_(registry) {}

void CacheMetrics::Publish(const ProcessTable& processes, const ModuleCache& modules,
                           const FrameResolver& frames, const DwarfUnwinder& unwinder) {
  cfi_.Publish(unwinder);
  processes_.Publish(processes);
  symbols_.Publish(modules, frames);
}

}  // namespace ember
