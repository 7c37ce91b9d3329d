// The self-metrics of the frames the frame resolver could not name, by reason.
#pragma once

#include <cstdint>

#include "stacks/frame_resolver.h"
#include "status/metrics_registry.h"

namespace ember {

// ember_symbolization_failures_total{reason}. The resolver counts in plain integers on the
// sampling thread; Sync brings the registry's counters up to them.
class SymbolizationFailureMetrics {
 public:
  // Registers every series in `registry`, which must outlive this object.
  explicit SymbolizationFailureMetrics(MetricsRegistry& registry);

  // Adds to each counter what `failures` counted since the last call.
  void Sync(const SymbolizationFailures& failures);

 private:
  CounterMirror unmapped_;
  CounterMirror unreadable_file_;
  CounterMirror no_symbol_;
  CounterMirror file_changed_;
  CounterMirror vdso_unreadable_;
};

}  // namespace ember
