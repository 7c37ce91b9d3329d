// Registration of the metrics of src/common's counters.
#include "status/common_metrics.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/untrusted_open.h"

namespace ember {

absl::Status RegisterFileOpenMetrics(MetricsRegistry& registry) {
  for (size_t kind = 0; kind < kOpenRefusalKinds; ++kind) {
    const auto refusal = static_cast<OpenRefusal>(kind);
    RETURN_IF_ERROR(registry.AddCallbackCounter(
        "ember_file_open_refusals_total",
        "Files a profiled process names (mapped files, perf maps, separate debug files, Python "
        "interpreters) that the agent refused to read, by reason: not_regular (a FIFO, socket, "
        "device or directory at the path), identity_mismatch (not the device and inode of its "
        "maps line), magic_link, escapes_root, bad_debuglink (a .gnu_debuglink that is not a "
        "plain file name).",
        {{"reason", std::string(OpenRefusalName(refusal))}},
        [refusal] { return static_cast<double>(OpenRefusalCount(refusal)); }));
  }
  return absl::OkStatus();
}

absl::Status RegisterNameMetrics(MetricsRegistry& registry) {
  for (size_t kind = 0; kind < kNameKinds; ++kind) {
    RETURN_IF_ERROR(registry.AddCallbackCounter(
        "ember_names_truncated_total",
        absl::StrCat("Names and labels from the profiled programs cut to ", kMaxNameBytes,
                     " bytes (ending in \"\u2026\"), by what they name; output: cut by a writer."),
        {{"name", std::string(NameKindName(static_cast<NameKind>(kind)))}},
        [kind] { return static_cast<double>(NamesTruncated(static_cast<NameKind>(kind))); }));
  }
  return absl::OkStatus();
}

}  // namespace ember
