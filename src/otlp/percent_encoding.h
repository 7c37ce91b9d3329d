// Percent-decoding of the W3C Baggage form the OTEL_* variables use (OTEL_RESOURCE_ATTRIBUTES,
// OTEL_EXPORTER_OTLP_HEADERS).
#pragma once

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace ember {

// RFC 3986 percent-decoding; '+' stays a '+' (this is not form encoding). nullopt on a '%' not
// followed by two hex digits. Decoded bytes that are not UTF-8 become U+FFFD, as W3C Baggage says.
std::optional<std::string> PercentDecode(absl::string_view text);

}  // namespace ember
