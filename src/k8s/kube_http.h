// GET requests to the Kubernetes API server through libcurl, for the pod watcher: bearer token,
// CA file, TLS always verified, bodies streamed to a callback as they arrive (watch streams never
// end on their own), and a Cancel that wakes a transfer in progress at once.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "k8s/kube_api_config.h"

namespace ember {
namespace http {
class Client;
}  // namespace http

struct KubeHttpResult {
  enum class Outcome {
    kCompleted,       // the server answered and the body ended cleanly; see status
    kTransportError,  // no answer, or the connection broke (mid-body too); see error
    kAborted,         // the body callback asked to stop
    kCancelled,       // Cancel was called
  };
  Outcome outcome = Outcome::kCompleted;
  long status = 0;         // the HTTP status, once the server answered
  std::string error;       // curl's description of a transport error
  int curl_code = 0;       // its CURLcode
  std::string error_body;  // the body of a non-2xx answer (the first 64 KiB): a v1 Status
};

class KubeHttpClient {
 public:
  // Checks that the CA file is readable; nothing is sent yet.
  static absl::StatusOr<std::unique_ptr<KubeHttpClient>> Create(const KubeApiConfig& config);
  ~KubeHttpClient();
  KubeHttpClient(const KubeHttpClient&) = delete;
  KubeHttpClient& operator=(const KubeHttpClient&) = delete;

  // GETs config.server + `path_and_query`, with "Authorization: Bearer <token>" unless `token` is
  // empty, giving up after `timeout`. The body of a 2xx answer goes to `on_body` piece by piece as
  // it arrives; returning false from it aborts the transfer (kAborted). `on_answer`, when set,
  // hears the status as soon as the headers are in (a watch answers long before its first event).
  // The connection is kept for the next request. One request at a time.
  KubeHttpResult Get(const std::string& path_and_query, const std::string& token,
                     absl::Duration timeout, absl::FunctionRef<bool(absl::string_view)> on_body,
                     const std::function<void(long status)>& on_answer = {});

  // Any thread: the Get in progress, and every later one, returns kCancelled promptly.
  void Cancel();

 private:
  KubeHttpClient(const KubeApiConfig& config, std::unique_ptr<http::Client> http);

  const KubeApiConfig config_;
  std::string base_url_;  // config_.server without a trailing '/'
  const std::unique_ptr<http::Client> http_;
};

// The service account token in `path`, surrounding whitespace trimmed. An error when the file is
// unreadable or empty, or the token holds a line break (it would add a header of its own).
absl::StatusOr<std::string> ReadBearerToken(const std::string& path);

// Percent-encodes `value` for a URL query: everything but RFC 3986 unreserved characters.
std::string QueryEscape(absl::string_view value);

}  // namespace ember
