// The multi loop: curl_multi_perform until the transfer is done, sleeping in curl_multi_poll,
// which Cancel's curl_multi_wakeup ends at once.
#include "http/client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace ember::http {
namespace {

static_assert(CURL_ERROR_SIZE <= 256, "Client::error_ is too small");

// How often a quiet transfer wakes anyway (Cancel wakes it at once).
constexpr int kPollMs = 1000;

void EnsureCurlInitialized() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

CURL* Easy(void* handle) { return static_cast<CURL*>(handle); }
CURLM* Multi(void* handle) { return static_cast<CURLM*>(handle); }

long Milliseconds(absl::Duration d) {
  return static_cast<long>(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

}  // namespace

bool IsPermanentTransportError(int curl_code) {
  switch (static_cast<CURLcode>(curl_code)) {
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

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  std::unique_ptr<Client> client(new Client(options));
  if (absl::Status init = client->Init(); !init.ok()) return init;
  return client;
}

absl::Status Client::Init() {
  EnsureCurlInitialized();
  easy_ = curl_easy_init();
  multi_ = curl_multi_init();
  if (easy_ == nullptr || multi_ == nullptr) {
    return absl::InternalError(absl::StrCat(options_.what, ": libcurl failed to initialize"));
  }
  CURL* easy = Easy(easy_);
  const char* protocol = options_.https ? "https" : "http";
  bool ok = curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, protocol) == CURLE_OK &&
            curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, protocol) == CURLE_OK &&
            curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK &&
            curl_easy_setopt(easy, CURLOPT_USERAGENT, options_.user_agent.c_str()) == CURLE_OK &&
            curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
            curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error_) == CURLE_OK &&
            curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &Client::OnBody) == CURLE_OK &&
            curl_easy_setopt(easy, CURLOPT_WRITEDATA, this) == CURLE_OK &&
            curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &Client::OnHeader) == CURLE_OK &&
            curl_easy_setopt(easy, CURLOPT_HEADERDATA, this) == CURLE_OK;
  if (ok && options_.connect_timeout > absl::ZeroDuration()) {
    ok = curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                          Milliseconds(options_.connect_timeout)) == CURLE_OK;
  }
  if (ok && options_.tcp_keepalive) {
    ok = curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L) == CURLE_OK &&
         curl_easy_setopt(easy, CURLOPT_TCP_KEEPIDLE, 30L) == CURLE_OK &&
         curl_easy_setopt(easy, CURLOPT_TCP_KEEPINTVL, 10L) == CURLE_OK;
  }
  if (ok && options_.https) {
    ok = curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 1L) == CURLE_OK &&
         curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 2L) == CURLE_OK;
    if (ok && !options_.ca_file.empty()) {
      ok = curl_easy_setopt(easy, CURLOPT_CAINFO, options_.ca_file.c_str()) == CURLE_OK;
    }
    if (ok && !options_.client_cert_file.empty()) {
      ok = curl_easy_setopt(easy, CURLOPT_SSLCERT, options_.client_cert_file.c_str()) == CURLE_OK &&
           curl_easy_setopt(easy, CURLOPT_SSLCERTTYPE, "PEM") == CURLE_OK &&
           curl_easy_setopt(easy, CURLOPT_SSLKEY, options_.client_key_file.c_str()) == CURLE_OK &&
           curl_easy_setopt(easy, CURLOPT_SSLKEYTYPE, "PEM") == CURLE_OK;
    }
  }
  if (!ok) {
    return absl::InternalError(absl::StrCat(
        options_.what, ": libcurl refused a setting (it may lack TLS or HTTP support)"));
  }
  return absl::OkStatus();
}

Client::~Client() {
  // Perform removes the easy handle from the multi one before it returns.
  if (multi_ != nullptr) curl_multi_cleanup(Multi(multi_));
  if (easy_ != nullptr) curl_easy_cleanup(Easy(easy_));
}

void Client::Cancel() {
  std::lock_guard lock(mu_);
  cancelled_ = true;
  if (multi_ != nullptr) curl_multi_wakeup(Multi(multi_));
}

long Client::ResponseCode() const {
  long status = 0;
  curl_easy_getinfo(Easy(easy_), CURLINFO_RESPONSE_CODE, &status);
  return status;
}

size_t Client::OnBody(char* data, size_t size, size_t count, void* user) {
  auto* self = static_cast<Client*>(user);
  size_t bytes = size * count;
  long status = self->ResponseCode();
  if (self->request_->on_body && status >= 200 && status < 300) {
    if (!self->request_->on_body(absl::string_view(data, bytes))) {
      self->aborted_ = true;
      return 0;  // CURLE_WRITE_ERROR ends the transfer
    }
    return bytes;
  }
  size_t limit = self->request_->max_kept_body;
  size_t room = limit - std::min(limit, self->kept_body_.size());
  self->kept_body_.append(data, std::min(bytes, room));
  return bytes;
}

size_t Client::OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* self = static_cast<Client*>(user);
  absl::string_view line(data, size * count);
  const Request& request = *self->request_;
  if (request.on_header) request.on_header(line);
  // The blank line after the final (non-1xx) status's headers.
  if (request.on_answer && absl::StripAsciiWhitespace(line).empty()) {
    if (long status = self->ResponseCode(); status >= 200) request.on_answer(status);
  }
  return size * count;
}

Response Client::Perform(const Request& request) {
  Response response;
  CURL* easy = Easy(easy_);
  CURLM* multi = Multi(multi_);
  curl_slist* headers = nullptr;
  for (const std::string& header : request.headers) {
    headers = curl_slist_append(headers, header.c_str());
  }
  curl_easy_setopt(easy, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, Milliseconds(request.timeout));
  if (request.post_body != nullptr) {
    curl_easy_setopt(easy, CURLOPT_POST, 1L);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, request.post_body->data());
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.post_body->size()));
  } else {
    curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
  }
  request_ = &request;
  kept_body_.clear();
  aborted_ = false;
  error_[0] = '\0';

  bool cancelled = false;
  {
    std::lock_guard lock(mu_);
    cancelled = cancelled_;
  }
  CURLcode code = CURLE_OK;
  if (!cancelled) {
    curl_multi_add_handle(multi, easy);
    bool finished = false;
    while (!finished && !cancelled) {
      int running = 0;
      if (CURLMcode mc = curl_multi_perform(multi, &running); mc != CURLM_OK) {
        code = CURLE_FAILED_INIT;
        std::snprintf(error_, sizeof(error_), "%s", curl_multi_strerror(mc));
        break;
      }
      int queued = 0;
      while (CURLMsg* message = curl_multi_info_read(multi, &queued)) {
        if (message->msg == CURLMSG_DONE) {
          code = message->data.result;
          finished = true;
        }
      }
      if (!finished) curl_multi_poll(multi, nullptr, 0, kPollMs, nullptr);
      std::lock_guard lock(mu_);
      cancelled = cancelled_;
    }
    curl_multi_remove_handle(multi, easy);
  }
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, nullptr);
  curl_slist_free_all(headers);
  if (request.post_body != nullptr) curl_easy_setopt(easy, CURLOPT_POSTFIELDS, nullptr);
  request_ = nullptr;

  response.status = ResponseCode();
  response.body = std::move(kept_body_);
  kept_body_.clear();
  if (cancelled) {
    response.outcome = Response::Outcome::kCancelled;
  } else if (aborted_) {
    response.outcome = Response::Outcome::kAborted;
  } else if (code != CURLE_OK) {
    response.outcome = Response::Outcome::kTransportError;
    response.curl_code = code;
    response.curl_error = curl_easy_strerror(code);
    response.detail = error_;
  }
  return response;
}

}  // namespace ember::http
