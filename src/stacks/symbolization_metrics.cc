// Registration and synchronization of the symbolization failure metrics.
#include "stacks/symbolization_metrics.h"

#include <string>

#include "absl/strings/string_view.h"

namespace ember {
SymbolizationFailureMetrics::SymbolizationFailureMetrics(MetricsRegistry& registry) {
  constexpr absl::string_view kName = "ember_symbolization_failures_total";
  constexpr absl::string_view kHelp =
      "User frames that could not be named, by reason: address in no mapping, file unreadable as "
      "ELF, no symbol covering it, file truncated after it was opened, the process's vDSO "
      "unreadable (once per process). Counted per location "
      "symbolized (once per cache generation), unmapped addresses per frame.";
  // Registration fails only on a programming error (a bad or duplicate name).
  auto counter = [&](absl::string_view reason) {
    return CounterMirror(
        registry.AddCounter(kName, kHelp, {{"reason", std::string(reason)}}).value());
  };
  unmapped_ = counter("unmapped");
  unreadable_file_ = counter("unreadable_file");
  no_symbol_ = counter("no_symbol");
  file_changed_ = counter("file_changed");
  vdso_unreadable_ = counter("vdso_unreadable");
}

void SymbolizationFailureMetrics::Sync(const SymbolizationFailures& failures) {
  unmapped_.Publish(failures.unmapped);
  unreadable_file_.Publish(failures.unreadable_file);
  no_symbol_.Publish(failures.no_symbol);
  file_changed_.Publish(failures.file_changed);
  vdso_unreadable_.Publish(failures.vdso_unreadable);
}

}  // namespace ember
