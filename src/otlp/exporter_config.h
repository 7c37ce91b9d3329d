// Where and how the OTLP exporter sends profiles: resolved once at start-up from the agent's
// --otlp-* flags and the standard OTEL_EXPORTER_OTLP_* environment variables (flags win; the
// profiles-specific variables win over the general ones).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ember {

enum class OtlpProtocol { kGrpc, kHttpProtobuf };

struct OtlpHeader {
  std::string name;   // lower-case, as gRPC metadata requires
  std::string value;  // may be a secret: never logged
  bool operator==(const OtlpHeader&) const = default;
};

struct ExporterConfig {
  OtlpProtocol protocol = OtlpProtocol::kGrpc;
  // gRPC: the channel target, "host:port". HTTP: the URL profiles are posted to.
  std::string target;
  bool tls = true;               // false only when asked for (http:// or --otlp-insecure)
  std::string ca_file;           // PEM roots instead of the system ones
  std::string client_cert_file;  // mTLS, with client_key_file
  std::string client_key_file;
  std::vector<OtlpHeader> headers;
  absl::Duration timeout = absl::Seconds(10);  // per request
  bool gzip = true;
};

// The --otlp-* flags as given; unset ones fall back to the environment.
struct ExporterFlags {
  std::optional<std::string> endpoint = {};
  std::optional<std::string> protocol = {};
  std::vector<std::string> headers = {};  // "name=value" each
  bool insecure = false;
  std::optional<std::string> ca_file = {};
  std::optional<std::string> client_cert_file = {};
  std::optional<std::string> client_key_file = {};
  std::optional<absl::Duration> timeout = {};
};

using GetEnv = absl::FunctionRef<std::optional<std::string>(const char* name)>;

// nullopt when no endpoint is configured anywhere (export off). Errors are one line naming the
// flag or variable at fault, never a header's value.
absl::StatusOr<std::optional<ExporterConfig>> ResolveExporterConfig(const ExporterFlags& flags,
                                                                    GetEnv getenv);

// "name=value,name2=value2" with percent-encoded values, as OTEL_EXPORTER_OTLP_HEADERS holds them.
// `source` names the variable or flag in errors.
absl::StatusOr<std::vector<OtlpHeader>> ParseOtlpHeaders(absl::string_view text,
                                                         absl::string_view source);

// For the log: endpoint, protocol, TLS mode, header names; header values, the endpoint's
// userinfo and query string shown as "<redacted>".
std::string DescribeExporterConfig(const ExporterConfig& config);

// A URL as it may be logged: userinfo ("user:token@") and a query string, which can carry
// credentials, become "<redacted>".
std::string RedactUrl(absl::string_view url);

}  // namespace ember
