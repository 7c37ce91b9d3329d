// The pod watcher's GETs on an http::Client, so the connection is reused between LIST pages and
// watches, and Cancel wakes a quiet watch stream at once.
#include "k8s/kube_http.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "http/client.h"

namespace ember {
namespace {

constexpr size_t kMaxErrorBody = 64 << 10;

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
  absl::StatusOr<std::unique_ptr<http::Client>> http = http::Client::Create({
      .what = "Kubernetes",
      .user_agent = "ember-agent",
      // Only the scheme configured: a token never leaves for another place.
      .https = https,
      .ca_file = config.ca_file,
      .connect_timeout = config.connect_timeout,
      // A peer that vanished without a reset is noticed before the watch timeout.
      .tcp_keepalive = true,
  });
  if (!http.ok()) return http.status();
  return std::unique_ptr<KubeHttpClient>(new KubeHttpClient(config, *std::move(http)));
}

KubeHttpClient::KubeHttpClient(const KubeApiConfig& config, std::unique_ptr<http::Client> http)
    : config_(config), base_url_(absl::StripSuffix(config.server, "/")), http_(std::move(http)) {}

KubeHttpClient::~KubeHttpClient() = default;

void KubeHttpClient::Cancel() { http_->Cancel(); }

KubeHttpResult KubeHttpClient::Get(const std::string& path_and_query, const std::string& token,
                                   absl::Duration timeout,
                                   absl::FunctionRef<bool(absl::string_view)> on_body,
                                   const std::function<void(long status)>& on_answer) {
  http::Request request{
      .url = absl::StrCat(base_url_, path_and_query),
      .headers = {"Accept: application/json"},
      .timeout = timeout,
      .on_body = [&on_body](absl::string_view data) { return on_body(data); },
      .on_answer = on_answer,
      .max_kept_body = kMaxErrorBody,
  };
  // Held by the request alone, which drops it when it ends.
  if (!token.empty()) request.headers.push_back(absl::StrCat("Authorization: Bearer ", token));
  http::Response response = http_->Perform(request);

  KubeHttpResult result;
  result.status = response.status;
  result.error_body = std::move(response.body);
  switch (response.outcome) {
    case http::Response::Outcome::kCompleted:
      result.outcome = KubeHttpResult::Outcome::kCompleted;
      break;
    case http::Response::Outcome::kCancelled:
      result.outcome = KubeHttpResult::Outcome::kCancelled;
      break;
    case http::Response::Outcome::kAborted:
      result.outcome = KubeHttpResult::Outcome::kAborted;
      break;
    case http::Response::Outcome::kTransportError:
      result.outcome = KubeHttpResult::Outcome::kTransportError;
      result.curl_code = response.curl_code;
      result.error = !response.detail.empty() ? response.detail : response.curl_error;
      break;
  }
  return result;
}

}  // namespace ember
