// Registration and synchronization of the symbolization failure metrics.
#include "stacks/symbolization_metrics.h"

#include <string>

#include "absl/strings/string_view.h"

namespace ember {
namespace {

void SyncCounter(Counter* counter, uint64_t total) {
  if (total > counter->Value()) counter->Increment(total - counter->Value());
}

}  // namespace

SymbolizationFailureMetrics::SymbolizationFailureMetrics(MetricsRegistry& registry) {
  constexpr absl::string_view kName = "ember_symbolization_failures_total";
  constexpr absl::string_view kHelp =
      "User frames that could not be named, by reason: address in no mapping, file unreadable as "
      "ELF, no symbol covering it, file truncated after it was opened, the process's vDSO "
      "unreadable (once per process). Counted per location "
      "symbolized (once per cache generation), unmapped addresses per frame.";
  // Registration fails only on a programming error (a bad or duplicate name).
  auto counter = [&](absl::string_view reason) {
    return registry.AddCounter(kName, kHelp, {{"reason", std::string(reason)}}).value();
  };
  unmapped_ = counter("unmapped");
  unreadable_file_ = counter("unreadable_file");
  no_symbol_ = counter("no_symbol");
  file_changed_ = counter("file_changed");
  vdso_unreadable_ = counter("vdso_unreadable");
}

void SymbolizationFailureMetrics::Sync(const SymbolizationFailures& failures) {
  SyncCounter(unmapped_, failures.unmapped);
  SyncCounter(unreadable_file_, failures.unreadable_file);
  SyncCounter(no_symbol_, failures.no_symbol);
  SyncCounter(file_changed_, failures.file_changed);
  SyncCounter(vdso_unreadable_, failures.vdso_unreadable);
}

}  // namespace ember
