// Resolution of the exporter's settings from flags and OTEL_EXPORTER_OTLP_* variables.
#include "otlp/exporter_config.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "otlp/percent_encoding.h"

namespace ember {
namespace {

constexpr char kProfilesPath[] = "/v1development/profiles";

// A setting and where it came from, for error messages.
struct Setting {
  std::string value;
  std::string source;  // "--otlp-endpoint" or the variable's name
};

// The flag, else the profiles variable, else the general one.
std::optional<Setting> Pick(const std::optional<std::string>& flag, const char* flag_name,
                            const char* profiles_variable, const char* general_variable,
                            GetEnv getenv) {
  if (flag) return Setting{*flag, flag_name};
  for (const char* variable : {profiles_variable, general_variable}) {
    if (variable == nullptr) continue;
    std::optional<std::string> value = getenv(variable);
    if (value && !absl::StripAsciiWhitespace(*value).empty()) {
      return Setting{std::string(absl::StripAsciiWhitespace(*value)), variable};
    }
  }
  return std::nullopt;
}

absl::Status SettingError(const Setting& setting, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(setting.source, ": expected ", expected, ", got '", setting.value, "'"));
}

// Splits "scheme://host:port/path" into its parts; scheme and path may be absent.
struct Endpoint {
  std::string scheme;  // "http", "https" or ""
  std::string authority;
  std::string path;
};

absl::StatusOr<Endpoint> ParseEndpoint(const Setting& setting) {
  const Setting shown{RedactUrl(setting.value), setting.source};  // errors never echo a secret
  Endpoint endpoint;
  absl::string_view rest = setting.value;
  if (size_t scheme_end = rest.find("://"); scheme_end != absl::string_view::npos) {
    endpoint.scheme = absl::AsciiStrToLower(rest.substr(0, scheme_end));
    rest.remove_prefix(scheme_end + 3);
    if (endpoint.scheme != "http" && endpoint.scheme != "https") {
      return SettingError(shown, "an http:// or https:// URL, or host:port");
    }
  }
  size_t slash = rest.find('/');
  endpoint.authority = std::string(rest.substr(0, slash));
  if (slash != absl::string_view::npos) endpoint.path = std::string(rest.substr(slash));
  if (endpoint.authority.empty() || absl::StrContains(endpoint.authority, ' ')) {
    return SettingError(shown, "an http:// or https:// URL, or host:port");
  }
  return endpoint;
}

// host:port, adding the protocol's default port when there is none (an IPv6 literal is
// bracketed: "[::1]:4317").
std::string WithPort(const std::string& authority, int default_port) {
  size_t at = authority.rfind('@');  // userinfo ("user:password@") has colons of its own
  size_t bracket = authority.rfind(']');
  size_t colon = authority.rfind(':');
  bool has_port = colon != std::string::npos && (at == std::string::npos || colon > at) &&
                  (bracket == std::string::npos || colon > bracket);
  return has_port ? authority : absl::StrCat(authority, ":", default_port);
}

}  // namespace

absl::StatusOr<std::vector<OtlpHeader>> ParseOtlpHeaders(absl::string_view text,
                                                         absl::string_view source) {
  std::vector<OtlpHeader> headers;
  for (absl::string_view entry : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    size_t equals = entry.find('=');
    std::string name = absl::AsciiStrToLower(absl::StripAsciiWhitespace(entry.substr(0, equals)));
    if (equals == absl::string_view::npos || name.empty()) {
      // The entry may hold a secret: name only its position.
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": expected name=value entries separated by commas, entry ",
                       headers.size() + 1, " has no name=value"));
    }
    std::optional<std::string> name_decoded = PercentDecode(name);
    std::optional<std::string> value =
        PercentDecode(absl::StripAsciiWhitespace(entry.substr(equals + 1)));
    if (!name_decoded || !value) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": bad percent-encoding in header '", name, "'"));
    }
    headers.push_back({.name = *name_decoded, .value = *value});
  }
  return headers;
}

absl::StatusOr<std::optional<ExporterConfig>> ResolveExporterConfig(const ExporterFlags& flags,
                                                                    GetEnv getenv) {
  std::optional<Setting> endpoint_setting = Pick(
      flags.endpoint, "--otlp-endpoint", "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", nullptr, getenv);
  bool signal_specific = endpoint_setting.has_value();
  if (!endpoint_setting) {
    endpoint_setting = Pick(std::nullopt, "", nullptr, "OTEL_EXPORTER_OTLP_ENDPOINT", getenv);
  }
  if (!endpoint_setting) return std::nullopt;

  ExporterConfig config;
  std::optional<Setting> protocol =
      Pick(flags.protocol, "--otlp-protocol", "OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL",
           "OTEL_EXPORTER_OTLP_PROTOCOL", getenv);
  if (protocol) {
    if (protocol->value == "grpc") {
      config.protocol = OtlpProtocol::kGrpc;
    } else if (protocol->value == "http/protobuf") {
      config.protocol = OtlpProtocol::kHttpProtobuf;
    } else {
      return SettingError(*protocol, "grpc or http/protobuf");
    }
  }

  std::optional<Setting> insecure_env =
      Pick(std::nullopt, "", "OTEL_EXPORTER_OTLP_PROFILES_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE",
           getenv);
  bool insecure = flags.insecure;
  if (!insecure && insecure_env) {
    std::string value = absl::AsciiStrToLower(insecure_env->value);
    if (value != "true" && value != "false") return SettingError(*insecure_env, "true or false");
    insecure = value == "true";
  }

  absl::StatusOr<Endpoint> endpoint = ParseEndpoint(*endpoint_setting);
  if (!endpoint.ok()) return endpoint.status();
  if (endpoint->scheme == "https" && flags.insecure) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--otlp-insecure: contradicts the https:// endpoint of ", endpoint_setting->source));
  }
  config.tls = endpoint->scheme == "https" || (endpoint->scheme.empty() && !insecure);
  if (config.protocol == OtlpProtocol::kGrpc) {
    config.target = WithPort(endpoint->authority, 4317);
  } else {
    // The general variable is a base URL the signal's path is appended to; the profiles one and
    // the flag are used as given (with the path added when they have none).
    std::string path = endpoint->path;
    if (!signal_specific || path.empty() || path == "/") {
      path = absl::StrCat(absl::StripSuffix(path, "/"), kProfilesPath);
    }
    config.target = absl::StrCat(config.tls ? "https" : "http", "://",
                                 WithPort(endpoint->authority, 4318), path);
  }

  std::optional<Setting> ca =
      Pick(flags.ca_file, "--otlp-ca-file", "OTEL_EXPORTER_OTLP_PROFILES_CERTIFICATE",
           "OTEL_EXPORTER_OTLP_CERTIFICATE", getenv);
  std::optional<Setting> cert = Pick(flags.client_cert_file, "--otlp-client-cert",
                                     "OTEL_EXPORTER_OTLP_PROFILES_CLIENT_CERTIFICATE",
                                     "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", getenv);
  std::optional<Setting> key =
      Pick(flags.client_key_file, "--otlp-client-key", "OTEL_EXPORTER_OTLP_PROFILES_CLIENT_KEY",
           "OTEL_EXPORTER_OTLP_CLIENT_KEY", getenv);
  if (ca) config.ca_file = ca->value;
  if (cert.has_value() != key.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(cert ? cert->source : key->source,
                     ": a client certificate and a client key go together; only one is set"));
  }
  if (cert) {
    config.client_cert_file = cert->value;
    config.client_key_file = key->value;
  }
  if (!config.tls && (ca || cert)) {
    return absl::InvalidArgumentError(
        absl::StrCat(ca ? ca->source : cert->source, ": TLS files given for a plaintext endpoint"));
  }

  // Headers: every source adds; a flag's header replaces a variable's of the same name.
  std::vector<OtlpHeader> headers;
  for (const char* variable :
       {"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_PROFILES_HEADERS"}) {
    std::optional<std::string> text = getenv(variable);
    if (!text) continue;
    absl::StatusOr<std::vector<OtlpHeader>> parsed = ParseOtlpHeaders(*text, variable);
    if (!parsed.ok()) return parsed.status();
    headers.insert(headers.end(), parsed->begin(), parsed->end());
  }
  for (const std::string& flag : flags.headers) {
    absl::StatusOr<std::vector<OtlpHeader>> parsed = ParseOtlpHeaders(flag, "--otlp-header");
    if (!parsed.ok()) return parsed.status();
    headers.insert(headers.end(), parsed->begin(), parsed->end());
  }
  // Later sources win for the same name.
  for (const OtlpHeader& header : headers) {
    auto same = std::find_if(config.headers.begin(), config.headers.end(),
                             [&](const OtlpHeader& h) { return h.name == header.name; });
    if (same != config.headers.end()) {
      same->value = header.value;
    } else {
      config.headers.push_back(header);
    }
  }

  if (flags.timeout) {
    config.timeout = *flags.timeout;
  } else if (std::optional<Setting> timeout =
                 Pick(std::nullopt, "", "OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT",
                      "OTEL_EXPORTER_OTLP_TIMEOUT", getenv)) {
    int64_t ms = 0;
    if (!absl::SimpleAtoi(timeout->value, &ms) || ms <= 0) {
      return SettingError(*timeout, "a positive number of milliseconds");
    }
    config.timeout = absl::Milliseconds(ms);
  }
  if (std::optional<Setting> compression =
          Pick(std::nullopt, "", "OTEL_EXPORTER_OTLP_PROFILES_COMPRESSION",
               "OTEL_EXPORTER_OTLP_COMPRESSION", getenv)) {
    if (compression->value != "gzip" && compression->value != "none") {
      return SettingError(*compression, "gzip or none");
    }
    config.gzip = compression->value == "gzip";
  }
  return config;
}

std::string RedactUrl(absl::string_view url) {
  std::string shown;
  if (size_t scheme_end = url.find("://"); scheme_end != absl::string_view::npos) {
    absl::StrAppend(&shown, url.substr(0, scheme_end + 3));
    url.remove_prefix(scheme_end + 3);
  }
  size_t authority_end = url.find_first_of("/?#");
  absl::string_view authority = url.substr(0, authority_end);
  absl::string_view rest =
      authority_end == absl::string_view::npos ? absl::string_view() : url.substr(authority_end);
  if (size_t at = authority.rfind('@'); at != absl::string_view::npos) {
    absl::StrAppend(&shown, "<redacted>@");
    authority.remove_prefix(at + 1);
  }
  absl::StrAppend(&shown, authority);
  size_t query = rest.find_first_of("?#");
  absl::StrAppend(&shown, rest.substr(0, query));
  if (query != absl::string_view::npos) absl::StrAppend(&shown, "?<redacted>");
  return shown;
}

std::string DescribeExporterConfig(const ExporterConfig& config) {
  std::vector<std::string> headers;
  for (const OtlpHeader& header : config.headers) {
    headers.push_back(absl::StrCat(header.name, "=<redacted>"));
  }
  return absl::StrCat(
      config.protocol == OtlpProtocol::kGrpc ? "grpc " : "http/protobuf ", RedactUrl(config.target),
      config.tls ? (config.ca_file.empty() ? " (TLS, system roots" : " (TLS, roots from ")
                 : " (plaintext",
      config.tls && !config.ca_file.empty() ? config.ca_file : "",
      config.client_cert_file.empty() ? "" : ", client certificate", config.gzip ? ", gzip" : "",
      ", timeout ", absl::FormatDuration(config.timeout), ")",
      headers.empty() ? "" : absl::StrCat(", headers ", absl::StrJoin(headers, ", ")));
}

}  // namespace ember
