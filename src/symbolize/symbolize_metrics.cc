// Registration of the symbolizers' metrics.
#include "symbolize/symbolize_metrics.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "symbolize/demangle.h"
#include "symbolize/jitdump.h"

namespace ember {

absl::Status RegisterJitDumpMetrics(MetricsRegistry& registry) {
  for (JitDumpRefusal refusal :
       {JitDumpRefusal::kBadMagic, JitDumpRefusal::kByteOrder, JitDumpRefusal::kVersion,
        JitDumpRefusal::kBadHeader, JitDumpRefusal::kBadRecord}) {
    RETURN_IF_ERROR(registry.AddCallbackCounter(
        "ember_jitdump_refusals_total",
        "jitdump files (jit-PID.dump) the agent stopped reading, by reason: bad_magic, "
        "byte_order (written by the other byte order), version (not 1), bad_header (its size), "
        "bad_record (sizes that contradict each other or are absurd). What was read before stays.",
        {{"reason", std::string(JitDumpRefusalName(refusal))}},
        [refusal] { return static_cast<double>(JitDumpRefusalCount(refusal)); }));
  }
  return absl::OkStatus();
}

absl::Status RegisterDemangleMetrics(MetricsRegistry& registry) {
  return registry.AddCallbackCounter(
      "ember_demangle_over_budget_total",
      absl::StrCat("Symbols whose demangled name would exceed ", kDemangleBudget,
                   " bytes: the demangler was stopped there and the name kept mangled."),
      {}, [] { return static_cast<double>(DemangleOverBudget()); });
}

}  // namespace ember
