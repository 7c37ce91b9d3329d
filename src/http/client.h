// HTTP requests through libcurl, one at a time on one connection that is kept between them: a
// multi handle around one easy handle, so that Cancel wakes a transfer at once instead of waiting
// for the next byte of a quiet stream. The pod watcher GETs through it and the OTLP/HTTP exporter
// POSTs; what the request means (headers, status, body) is theirs.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace ember::http {

struct ClientOptions {
  // Starts the client's own error messages ("Kubernetes", "OTLP/HTTP").
  std::string what = {};
  std::string user_agent = {};
  // Only this scheme is spoken, redirects included (none are followed): a credential never goes
  // elsewhere, nor an https endpoint plaintext. With https the peer and host are always verified.
  bool https = false;
  std::string ca_file = {};           // https: PEM roots instead of the system's ("" for those)
  std::string client_cert_file = {};  // https: PEM client certificate for mutual TLS, with the key
  std::string client_key_file = {};
  absl::Duration connect_timeout = absl::ZeroDuration();  // zero: libcurl's own
  // TCP keepalive probes, so that a peer gone without a reset is noticed on a quiet stream.
  bool tcp_keepalive = false;
};

struct Request {
  std::string url = {};
  // "Name: value" lines. They may hold credentials: dropped when the request ends.
  std::vector<std::string> headers = {};
  absl::Duration timeout = absl::Seconds(10);  // the whole exchange, body included
  // POSTs these bytes when set (they must outlive Perform), GETs otherwise.
  const std::string* post_body = nullptr;
  // The body of a 2xx answer, piece by piece as it arrives; false aborts the transfer. Unset: that
  // body is kept in Response::body, as any other answer's is.
  std::function<bool(absl::string_view)> on_body = {};
  // Every header line as it comes, status lines (of 1xx answers too) and the blank end included.
  std::function<void(absl::string_view line)> on_header = {};
  // The final (non-1xx) status, as soon as its headers are in: before any of its body.
  std::function<void(long status)> on_answer = {};
  size_t max_kept_body = 64 << 10;  // bytes of Response::body kept; the rest is read and dropped
};

struct Response {
  enum class Outcome {
    kCompleted,       // the server answered and the body ended cleanly; see status
    kTransportError,  // no answer, or the connection broke (mid-body too), or the timeout passed
    kAborted,         // on_body returned false
    kCancelled,       // Cancel was called
  };
  Outcome outcome = Outcome::kCompleted;
  long status = 0;         // the HTTP status, once the server answered
  int curl_code = 0;       // the CURLcode of a transport error
  std::string curl_error;  // its general text (curl_easy_strerror)
  std::string detail;      // libcurl's account of this failure, "" when it gave none
  std::string body;        // the first max_kept_body bytes of a body on_body did not take
};

// A transport error no retry mends: a local mistake (scheme, URL, certificate or key files, TLS
// engine, memory), rather than a peer away or a certificate being replaced.
bool IsPermanentTransportError(int curl_code);

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Create(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // One request at a time; callbacks run on the calling thread.
  Response Perform(const Request& request);

  // Any thread: the Perform in progress, and every later one, returns kCancelled promptly.
  void Cancel();

 private:
  explicit Client(const ClientOptions& options) : options_(options) {}
  absl::Status Init();
  static size_t OnBody(char* data, size_t size, size_t count, void* user);
  static size_t OnHeader(char* data, size_t size, size_t count, void* user);
  long ResponseCode() const;

  const ClientOptions options_;
  // CURL* and CURLM* (void in curl.h), kept out of this header.
  void* easy_ = nullptr;
  void* multi_ = nullptr;
  char error_[256] = {};  // CURL_ERROR_SIZE
  // The request in progress.
  const Request* request_ = nullptr;
  std::string kept_body_;
  bool aborted_ = false;

  std::mutex mu_;
  bool cancelled_ = false;
};

}  // namespace ember::http
