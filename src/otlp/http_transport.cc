// OTLP/HTTP with protobuf bodies: POST the request (gzip-compressed when asked) to the
// configured URL, TLS verified against the system roots or the CA file, and read the status,
// Retry-After and the ExportProfilesServiceResponse. On an http::Client, so the connection is kept
// between intervals and Cancel wakes a transfer in progress.
#include <algorithm>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/gzip.h"
#include "google/rpc/status.pb.h"
#include "http/client.h"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"
#include "otlp/export_transport.h"

namespace ember {
namespace {

namespace collector_pb = opentelemetry::proto::collector::profiles::v1development;

// A response body beyond this is not kept: a partial-success answer or an error is small.
constexpr size_t kMaxResponseBody = 64 << 10;

bool RetryableHttpStatus(long status) {
  return status == 429 || status == 502 || status == 503 || status == 504;
}

// A header value becomes part of the request text: a line break would add headers of its own.
absl::Status CheckHeaders(const std::vector<OtlpHeader>& headers) {
  for (const OtlpHeader& header : headers) {
    auto bad = [](char c) { return c == '\r' || c == '\n' || c == '\0'; };
    if (header.name.empty() || std::any_of(header.name.begin(), header.name.end(), bad) ||
        absl::StrContains(header.name, ':') ||
        std::any_of(header.value.begin(), header.value.end(), bad)) {
      return absl::InvalidArgumentError(
          absl::StrCat("OTLP header '", absl::CEscape(header.name),
                       "': names and values cannot hold line breaks (and names no ':') in HTTP"));
    }
  }
  return absl::OkStatus();
}

class HttpTransport final : public ExportTransport {
 public:
  HttpTransport(const ExporterConfig& config, std::unique_ptr<http::Client> http)
      : config_(config), http_(std::move(http)) {
    headers_.push_back("Content-Type: application/x-protobuf");
    if (config_.gzip) headers_.push_back("Content-Encoding: gzip");
    headers_.push_back("Expect:");  // no 100-continue round trip
    for (const OtlpHeader& header : config_.headers) {
      headers_.push_back(absl::StrCat(header.name, ": ", header.value));
    }
  }

  SendResult Send(const std::string& request) override {
    std::string compressed;
    if (config_.gzip) {
      if (absl::Status status = GzipCompress(request, &compressed, kGzipSmaller); !status.ok()) {
        return {.outcome = SendResult::Outcome::kFailed,
                .reason = absl::StrCat("OTLP/HTTP: ", status.message())};
      }
    }
    std::optional<std::string> retry_after;
    http::Response response = http_->Perform({
        .url = config_.target,
        .headers = headers_,
        .timeout = config_.timeout,
        .post_body = config_.gzip ? &compressed : &request,
        .on_header =
            [&retry_after](absl::string_view line) {
              // A new status line (after a 1xx or a retry inside curl) starts a new set of
              // headers.
              if (absl::StartsWith(line, "HTTP/")) retry_after.reset();
              size_t colon = line.find(':');
              if (colon != absl::string_view::npos &&
                  absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(line.substr(0, colon)),
                                         "retry-after")) {
                retry_after = std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
              }
            },
        .max_kept_body = kMaxResponseBody,
    });
    if (response.outcome == http::Response::Outcome::kCancelled) return SendResult::Cancelled();

    SendResult result;
    if (response.outcome != http::Response::Outcome::kCompleted) {
      result.outcome = http::IsPermanentTransportError(response.curl_code)
                           ? SendResult::Outcome::kFailed
                           : SendResult::Outcome::kRetryable;
      result.reason =
          absl::StrCat(response.curl_error, response.detail.empty() ? "" : ": ", response.detail);
      return result;
    }
    long status = response.status;
    if (status >= 200 && status < 300) {
      collector_pb::ExportProfilesServiceResponse answer;
      // An empty or unreadable body is no partial success to report: the request was taken.
      if (answer.ParseFromString(response.body)) {
        result.rejected_profiles = answer.partial_success().rejected_profiles();
        result.partial_error_message = answer.partial_success().error_message();
      }
      result.outcome = SendResult::Outcome::kDelivered;
      return result;
    }
    result.outcome = RetryableHttpStatus(status) ? SendResult::Outcome::kRetryable
                                                 : SendResult::Outcome::kFailed;
    if (result.outcome == SendResult::Outcome::kRetryable && retry_after) {
      result.retry_delay = ParseRetryAfter(*retry_after, absl::Now());
    }
    result.reason = absl::StrCat("HTTP ", status, DescribeErrorBody(response.body));
    return result;
  }

  void Cancel() override { http_->Cancel(); }

 private:
  // OTLP/HTTP receivers answer a failure with a google.rpc.Status (protobuf) or plain text.
  static std::string DescribeErrorBody(const std::string& body) {
    if (body.empty()) return "";
    google::rpc::Status status;
    if (status.ParseFromString(body) && !status.message().empty()) {
      return absl::StrCat(": ", status.message());
    }
    bool text = std::all_of(body.begin(), body.end(), [](char c) {
      return absl::ascii_isprint(c) || absl::ascii_isspace(c);
    });
    return text ? absl::StrCat(": ", absl::StripAsciiWhitespace(body)) : "";
  }

  const ExporterConfig config_;
  const std::unique_ptr<http::Client> http_;
  std::vector<std::string> headers_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ExportTransport>> CreateHttpTransport(
    const ExporterConfig& config, const TransportOptions& options) {
  const char* scheme = config.tls ? "https://" : "http://";
  if (!absl::StartsWithIgnoreCase(config.target, scheme)) {
    return absl::InvalidArgumentError(absl::StrCat("OTLP/HTTP endpoint '", RedactUrl(config.target),
                                                   "': expected a URL starting with ", scheme));
  }
  if (absl::Status headers = CheckHeaders(config.headers); !headers.ok()) return headers;
  // Read now, so that a missing file is a start-up error rather than every request failing.
  if (config.tls && !config.ca_file.empty()) {
    if (absl::StatusOr<std::string> pem = ReadPemFile(config.ca_file, "OTLP CA file"); !pem.ok()) {
      return pem.status();
    }
  }
  if (config.tls && !config.client_cert_file.empty()) {
    for (auto [path, what] : {std::pair{&config.client_cert_file, "OTLP client certificate"},
                              std::pair{&config.client_key_file, "OTLP client key"}}) {
      if (absl::StatusOr<std::string> pem = ReadPemFile(*path, what); !pem.ok()) {
        return pem.status();
      }
    }
  }
  absl::StatusOr<std::unique_ptr<http::Client>> http = http::Client::Create({
      .what = "OTLP/HTTP",
      .user_agent = "ember-otlp-exporter",
      // Only the scheme asked for, redirects included: an https endpoint never goes plaintext.
      .https = config.tls,
      .ca_file = config.ca_file,
      .client_cert_file = config.client_cert_file,
      .client_key_file = config.client_key_file,
  });
  if (!http.ok()) return http.status();
  return std::make_unique<HttpTransport>(config, *std::move(http));
}

}  // namespace ember
