// OTLP/HTTP with protobuf bodies through libcurl: POST the request (gzip-compressed when asked)
// to the configured URL, TLS verified against the system roots or the CA file, and read the
// status, Retry-After and the ExportProfilesServiceResponse. One easy handle on a multi handle,
// so the connection is kept between intervals and Cancel can wake a transfer in progress.
#include <curl/curl.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/gzip.h"
#include "google/rpc/status.pb.h"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"
#include "otlp/export_transport.h"

namespace ember {
namespace {

namespace collector_pb = opentelemetry::proto::collector::profiles::v1development;

// A response body beyond this is not kept: a partial-success answer or an error is small.
constexpr size_t kMaxResponseBody = 64 << 10;
// How often a transfer wakes when nothing happens (Cancel wakes it at once anyway).
constexpr int kPollMs = 1000;

// Local mistakes no retry fixes; every other transfer error may pass (the receiver comes back,
// its certificate is replaced).
bool PermanentCurlError(CURLcode code) {
  switch (code) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_FILESIZE_EXCEEDED:
    case CURLE_OUT_OF_MEMORY:
    case CURLE_FAILED_INIT:
      return true;
    default:
      return false;
  }
}

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

void EnsureCurlInitialized() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

class HttpTransport final : public ExportTransport {
 public:
  explicit HttpTransport(const ExporterConfig& config) : config_(config) {}

  ~HttpTransport() override {
    if (multi_ != nullptr && easy_ != nullptr) curl_multi_remove_handle(multi_, easy_);
    if (easy_ != nullptr) curl_easy_cleanup(easy_);
    if (multi_ != nullptr) curl_multi_cleanup(multi_);
    curl_slist_free_all(headers_);
  }

  absl::Status Init() {
    EnsureCurlInitialized();
    easy_ = curl_easy_init();
    multi_ = curl_multi_init();
    if (easy_ == nullptr || multi_ == nullptr) {
      return absl::InternalError("OTLP/HTTP: libcurl failed to initialize");
    }
    headers_ = curl_slist_append(headers_, "Content-Type: application/x-protobuf");
    if (config_.gzip) headers_ = curl_slist_append(headers_, "Content-Encoding: gzip");
    headers_ = curl_slist_append(headers_, "Expect:");  // no 100-continue round trip
    for (const OtlpHeader& header : config_.headers) {
      headers_ = curl_slist_append(headers_, absl::StrCat(header.name, ": ", header.value).c_str());
    }
    // Only the scheme asked for, redirects included: an https endpoint never goes plaintext.
    const char* protocol = config_.tls ? "https" : "http";
    bool ok =
        curl_easy_setopt(easy_, CURLOPT_URL, config_.target.c_str()) == CURLE_OK &&
        curl_easy_setopt(easy_, CURLOPT_PROTOCOLS_STR, protocol) == CURLE_OK &&
        curl_easy_setopt(easy_, CURLOPT_REDIR_PROTOCOLS_STR, protocol) == CURLE_OK &&
        curl_easy_setopt(easy_, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK &&
        curl_easy_setopt(easy_, CURLOPT_POST, 1L) == CURLE_OK &&
        curl_easy_setopt(easy_, CURLOPT_HTTPHEADER, headers_) == CURLE_OK &&
        curl_easy_setopt(easy_, CURLOPT_USERAGENT, "ember-otlp-exporter") == CURLE_OK &&
        curl_easy_setopt(easy_, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
        curl_easy_setopt(easy_, CURLOPT_TIMEOUT_MS,
                         static_cast<long>(std::max<int64_t>(
                             1, absl::ToInt64Milliseconds(config_.timeout)))) == CURLE_OK &&
        curl_easy_setopt(easy_, CURLOPT_ERRORBUFFER, error_) == CURLE_OK &&
        curl_easy_setopt(easy_, CURLOPT_WRITEFUNCTION, &HttpTransport::OnBody) == CURLE_OK &&
        curl_easy_setopt(easy_, CURLOPT_WRITEDATA, this) == CURLE_OK &&
        curl_easy_setopt(easy_, CURLOPT_HEADERFUNCTION, &HttpTransport::OnHeader) == CURLE_OK &&
        curl_easy_setopt(easy_, CURLOPT_HEADERDATA, this) == CURLE_OK;
    if (ok && config_.tls) {
      ok = curl_easy_setopt(easy_, CURLOPT_SSL_VERIFYPEER, 1L) == CURLE_OK &&
           curl_easy_setopt(easy_, CURLOPT_SSL_VERIFYHOST, 2L) == CURLE_OK;
      if (ok && !config_.ca_file.empty()) {
        ok = curl_easy_setopt(easy_, CURLOPT_CAINFO, config_.ca_file.c_str()) == CURLE_OK;
      }
      if (ok && !config_.client_cert_file.empty()) {
        ok = curl_easy_setopt(easy_, CURLOPT_SSLCERT, config_.client_cert_file.c_str()) ==
                 CURLE_OK &&
             curl_easy_setopt(easy_, CURLOPT_SSLCERTTYPE, "PEM") == CURLE_OK &&
             curl_easy_setopt(easy_, CURLOPT_SSLKEY, config_.client_key_file.c_str()) == CURLE_OK &&
             curl_easy_setopt(easy_, CURLOPT_SSLKEYTYPE, "PEM") == CURLE_OK;
      }
    }
    if (!ok) {
      return absl::InternalError(
          "OTLP/HTTP: libcurl refused a setting (it may lack TLS or HTTP support)");
    }
    return absl::OkStatus();
  }

  SendResult Send(const std::string& request) override {
    std::string compressed;
    if (config_.gzip) {
      if (absl::Status status = GzipCompress(request, &compressed, kGzipSmaller); !status.ok()) {
        return {.outcome = SendResult::Outcome::kFailed,
                .reason = absl::StrCat("OTLP/HTTP: ", status.message())};
      }
    }
    const std::string& body = config_.gzip ? compressed : request;
    curl_easy_setopt(easy_, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(easy_, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    response_body_.clear();
    retry_after_.reset();
    error_[0] = '\0';

    {
      std::lock_guard lock(mu_);
      if (cancelled_) return SendResult::Cancelled();
    }
    curl_multi_add_handle(multi_, easy_);
    CURLcode code = CURLE_OK;
    bool finished = false;
    bool cancelled = false;
    while (!finished && !cancelled) {
      int running = 0;
      if (CURLMcode mc = curl_multi_perform(multi_, &running); mc != CURLM_OK) {
        code = CURLE_FAILED_INIT;
        std::snprintf(error_, sizeof(error_), "%s", curl_multi_strerror(mc));
        break;
      }
      int queued = 0;
      while (CURLMsg* message = curl_multi_info_read(multi_, &queued)) {
        if (message->msg == CURLMSG_DONE) {
          code = message->data.result;
          finished = true;
        }
      }
      if (!finished) curl_multi_poll(multi_, nullptr, 0, kPollMs, nullptr);
      std::lock_guard lock(mu_);
      cancelled = cancelled_;
    }
    curl_multi_remove_handle(multi_, easy_);
    if (cancelled) return SendResult::Cancelled();

    SendResult result;
    if (code != CURLE_OK) {
      result.outcome =
          PermanentCurlError(code) ? SendResult::Outcome::kFailed : SendResult::Outcome::kRetryable;
      result.reason = absl::StrCat(curl_easy_strerror(code), error_[0] ? ": " : "", error_);
      return result;
    }
    long status = 0;
    curl_easy_getinfo(easy_, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200 && status < 300) {
      collector_pb::ExportProfilesServiceResponse response;
      // An empty or unreadable body is no partial success to report: the request was taken.
      if (response.ParseFromString(response_body_)) {
        result.rejected_profiles = response.partial_success().rejected_profiles();
        result.partial_error_message = response.partial_success().error_message();
      }
      result.outcome = SendResult::Outcome::kDelivered;
      return result;
    }
    result.outcome = RetryableHttpStatus(status) ? SendResult::Outcome::kRetryable
                                                 : SendResult::Outcome::kFailed;
    if (result.outcome == SendResult::Outcome::kRetryable && retry_after_) {
      result.retry_delay = ParseRetryAfter(*retry_after_, absl::Now());
    }
    result.reason = absl::StrCat("HTTP ", status, DescribeErrorBody());
    return result;
  }

  void Cancel() override {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    curl_multi_wakeup(multi_);
  }

 private:
  // OTLP/HTTP receivers answer a failure with a google.rpc.Status (protobuf) or plain text.
  std::string DescribeErrorBody() const {
    if (response_body_.empty()) return "";
    google::rpc::Status status;
    if (status.ParseFromString(response_body_) && !status.message().empty()) {
      return absl::StrCat(": ", status.message());
    }
    bool text = std::all_of(response_body_.begin(), response_body_.end(), [](char c) {
      return absl::ascii_isprint(c) || absl::ascii_isspace(c);
    });
    return text ? absl::StrCat(": ", absl::StripAsciiWhitespace(response_body_)) : "";
  }

  static size_t OnBody(char* data, size_t size, size_t count, void* user) {
    auto* self = static_cast<HttpTransport*>(user);
    size_t bytes = size * count;
    size_t room = kMaxResponseBody - std::min(kMaxResponseBody, self->response_body_.size());
    self->response_body_.append(data, std::min(bytes, room));
    return bytes;
  }

  static size_t OnHeader(char* data, size_t size, size_t count, void* user) {
    auto* self = static_cast<HttpTransport*>(user);
    absl::string_view line(data, size * count);
    // A new status line (after a 1xx or a retry inside curl) starts a new set of headers.
    if (absl::StartsWith(line, "HTTP/")) self->retry_after_.reset();
    size_t colon = line.find(':');
    if (colon != absl::string_view::npos &&
        absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(line.substr(0, colon)), "retry-after")) {
      self->retry_after_ = std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
    return size * count;
  }

  const ExporterConfig config_;
  CURL* easy_ = nullptr;
  CURLM* multi_ = nullptr;
  curl_slist* headers_ = nullptr;
  char error_[CURL_ERROR_SIZE] = {};
  std::string response_body_;
  std::optional<std::string> retry_after_;
  std::mutex mu_;
  bool cancelled_ = false;
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
  auto transport = std::make_unique<HttpTransport>(config);
  if (absl::Status init = transport->Init(); !init.ok()) return init;
  return transport;
}

}  // namespace ember
