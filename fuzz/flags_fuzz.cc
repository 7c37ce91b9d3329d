// Flags and the environment: the command line split at NUL bytes, and the OTLP settings and
// OTEL_RESOURCE_ATTRIBUTES they resolve with. Bad input must be an error, never a crash.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "agent/options.h"
#include "otlp/exporter_config.h"
#include "otlp/resource_attributes.h"
#include "status/listen_address.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<absl::string_view> args = absl::StrSplit(text, '\0');
  auto options = ember::ParseOptions(args);
  ember::ParseResourceAttributes(text);
  // An accepted address reads back the same from the form it is shown in.
  if (absl::StatusOr<ember::ListenAddress> address = ember::ParseListenAddress(text);
      address.ok()) {
    absl::StatusOr<ember::ListenAddress> again = ember::ParseListenAddress(address->ToString());
    if (!again.ok() || again->host != address->host || again->port != address->port ||
        again->ipv6 != address->ipv6) {
      __builtin_trap();
    }
  }
  size_t bytes = 0;
  ember::ParseByteSize(text, &bytes);
  // The same bytes as the values of every OTLP variable the agent reads.
  ember::ExporterFlags flags = options.ok() ? options->otlp : ember::ExporterFlags{};
  const std::string value(text);
  absl::StatusOr<std::optional<ember::ExporterConfig>> config = ember::ResolveExporterConfig(
      flags, [&value](const char*) { return std::optional<std::string>(value); });
  // A resolved exporter has somewhere to send to; over HTTP, a URL whose scheme says its TLS.
  if (config.ok() && config->has_value()) {
    const ember::ExporterConfig& resolved = **config;
    const absl::string_view scheme = resolved.tls ? "https://" : "http://";
    if (resolved.target.empty() || (resolved.protocol == ember::OtlpProtocol::kHttpProtobuf &&
                                    !absl::StartsWith(resolved.target, scheme))) {
      __builtin_trap();
    }
  }
  return 0;
}
