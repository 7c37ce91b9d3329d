// libcurl under the pod watcher: one easy handle on a multi handle, so the connection is reused
// between LIST pages and watches, and Cancel wakes curl_multi_poll instead of waiting for the
// next byte of a quiet watch stream.
#include "k8s/kube_http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ember {
namespace {

static_assert(CURL_ERROR_SIZE <= 256, "KubeHttpClient::error_ is too small");

constexpr size_t kMaxErrorBody = 64 << 10;
// How often a quiet transfer wakes anyway (Cancel wakes it at once).
constexpr int kPollMs = 1000;

void EnsureCurlInitialized() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

CURL* Easy(void* handle) { return static_cast<CURL*>(handle); }
CURLM* Multi(void* handle) { return static_cast<CURLM*>(handle); }

}  // namespace

absl::StatusOr<std::string> ReadBearerToken(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("Kubernetes: cannot read the service account token ", path,
                     " (is automountServiceAccountToken off?)"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(text.str()));
  if (token.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Kubernetes: the service account token ", path, " is empty"));
  }
  if (token.find_first_of("\r\n") != std::string::npos || token.find('\0') != std::string::npos) {
    return absl::FailedPreconditionError(
        absl::StrCat("Kubernetes: the service account token ", path, " holds a line break"));
  }
  return token;
}

std::string QueryEscape(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", static_cast<unsigned char>(c));
      out += hex;
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<KubeHttpClient>> KubeHttpClient::Create(
    const KubeApiConfig& config) {
  if (absl::Status valid = ValidateKubeApiConfig(config); !valid.ok()) return valid;
  bool https = absl::StartsWithIgnoreCase(config.server, "https://");
  if (https && !config.ca_file.empty() && !std::ifstream(config.ca_file).good()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Kubernetes: cannot read the CA file ", config.ca_file,
                     " (the service account's ca.crt, or --kube-ca-file)"));
  }
  std::unique_ptr<KubeHttpClient> client(new KubeHttpClient(config));
  if (absl::Status init = client->Init(); !init.ok()) return init;
  return client;
}

absl::Status KubeHttpClient::Init() {
  EnsureCurlInitialized();
  base_url_ = std::string(absl::StripSuffix(config_.server, "/"));
  easy_ = curl_easy_init();
  multi_ = curl_multi_init();
  if (easy_ == nullptr || multi_ == nullptr) {
    return absl::InternalError("Kubernetes: libcurl failed to initialize");
  }
  CURL* easy = Easy(easy_);
  bool https = absl::StartsWithIgnoreCase(config_.server, "https://");
  // Only the scheme configured, and no redirects: a token never leaves for another place.
  const char* protocol = https ? "https" : "http";
  bool ok =
      curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, protocol) == CURLE_OK &&
      curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK &&
      curl_easy_setopt(easy, CURLOPT_USERAGENT, "ember-agent") == CURLE_OK &&
      curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
      curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                       static_cast<long>(std::max<int64_t>(
                           1, absl::ToInt64Milliseconds(config_.connect_timeout)))) == CURLE_OK &&
      // A peer that vanished without a reset is noticed before the watch timeout.
      curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L) == CURLE_OK &&
      curl_easy_setopt(easy, CURLOPT_TCP_KEEPIDLE, 30L) == CURLE_OK &&
      curl_easy_setopt(easy, CURLOPT_TCP_KEEPINTVL, 10L) == CURLE_OK &&
      curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error_) == CURLE_OK &&
      curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &KubeHttpClient::OnBody) == CURLE_OK &&
      curl_easy_setopt(easy, CURLOPT_WRITEDATA, this) == CURLE_OK &&
      curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &KubeHttpClient::OnHeader) == CURLE_OK &&
      curl_easy_setopt(easy, CURLOPT_HEADERDATA, this) == CURLE_OK;
  if (ok && https) {
    ok = curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 1L) == CURLE_OK &&
         curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 2L) == CURLE_OK;
    if (ok && !config_.ca_file.empty()) {
      ok = curl_easy_setopt(easy, CURLOPT_CAINFO, config_.ca_file.c_str()) == CURLE_OK;
    }
  }
  if (!ok) {
    return absl::InternalError(
        "Kubernetes: libcurl refused a setting (it may lack TLS or HTTP support)");
  }
  return absl::OkStatus();
}

KubeHttpClient::~KubeHttpClient() {
  if (multi_ != nullptr) curl_multi_cleanup(Multi(multi_));
  if (easy_ != nullptr) curl_easy_cleanup(Easy(easy_));
}

void KubeHttpClient::Cancel() {
  std::lock_guard lock(mu_);
  cancelled_ = true;
  if (multi_ != nullptr) curl_multi_wakeup(Multi(multi_));
}

size_t KubeHttpClient::OnBody(char* data, size_t size, size_t count, void* user) {
  auto* self = static_cast<KubeHttpClient*>(user);
  size_t bytes = size * count;
  long status = 0;
  curl_easy_getinfo(Easy(self->easy_), CURLINFO_RESPONSE_CODE, &status);
  if (status < 200 || status >= 300) {
    size_t room = kMaxErrorBody - std::min(kMaxErrorBody, self->error_body_.size());
    self->error_body_.append(data, std::min(bytes, room));
    return bytes;
  }
  if (!(*self->on_body_)(absl::string_view(data, bytes))) {
    self->aborted_ = true;
    return 0;  // CURLE_WRITE_ERROR ends the transfer
  }
  return bytes;
}

size_t KubeHttpClient::OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* self = static_cast<KubeHttpClient*>(user);
  // The blank line after the final (non-1xx) status's headers.
  if (absl::StripAsciiWhitespace(absl::string_view(data, size * count)).empty() &&
      self->on_answer_ != nullptr && *self->on_answer_) {
    long status = 0;
    curl_easy_getinfo(Easy(self->easy_), CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200) (*self->on_answer_)(status);
  }
  return size * count;
}

KubeHttpResult KubeHttpClient::Get(const std::string& path_and_query, const std::string& token,
                                   absl::Duration timeout,
                                   absl::FunctionRef<bool(absl::string_view)> on_body,
                                   const std::function<void(long status)>& on_answer) {
  KubeHttpResult result;
  CURL* easy = Easy(easy_);
  CURLM* multi = Multi(multi_);
  std::string url = absl::StrCat(base_url_, path_and_query);
  curl_slist* headers = curl_slist_append(nullptr, "Accept: application/json");
  if (!token.empty()) {
    headers = curl_slist_append(headers, absl::StrCat("Authorization: Bearer ", token).c_str());
  }
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout))));
  on_body_ = &on_body;
  on_answer_ = &on_answer;
  error_body_.clear();
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
  curl_slist_free_all(headers);  // holds the token: gone with the request
  on_body_ = nullptr;
  on_answer_ = nullptr;

  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &result.status);
  result.error_body = std::move(error_body_);
  error_body_.clear();
  if (cancelled) {
    result.outcome = KubeHttpResult::Outcome::kCancelled;
  } else if (aborted_) {
    result.outcome = KubeHttpResult::Outcome::kAborted;
  } else if (code != CURLE_OK) {
    result.outcome = KubeHttpResult::Outcome::kTransportError;
    result.curl_code = code;
    result.error = error_[0] != '\0' ? std::string(error_) : curl_easy_strerror(code);
  }
  return result;
}

}  // namespace ember
