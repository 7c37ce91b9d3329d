// A small OTLP/HTTP receiver on loopback for the exporter tests: HTTP/1.1 with Content-Length
// bodies and keep-alive, optionally over TLS (OpenSSL, with client certificates for mTLS). It
// records every request (method, path, headers, the body gunzipped and decoded, checked with
// ValidateExportRequest) and answers from a script.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "unit/otlp/test_requests.h"

namespace ember::testing {

// One scripted answer; after the script runs out every request gets 200 with an empty
// ExportProfilesServiceResponse.
struct HttpReply {
  int status = 200;
  std::optional<std::string> retry_after = {};
  std::string body = {};  // e.g. a serialized ExportProfilesServiceResponse or google.rpc.Status
  absl::Duration delay = absl::ZeroDuration();  // waited before answering
};

struct ReceivedHttpRequest {
  std::string method = {};
  std::string path = {};
  std::multimap<std::string, std::string> headers = {};  // names lower-cased
  std::string body = {};                                 // as it came, maybe gzip
  bool gunzipped = false;                                // Content-Encoding: gzip, and it inflated
  std::optional<ExportRequest> request = {};             // the decoded body, when it parsed
  absl::Status valid = {};                               // ValidateExportRequest(*request)
  int answered = 0;                                      // the status answered; 0: none
  std::string Header(const std::string& name) const;     // first value, or ""
};

struct HttpReceiverOptions {
  int port = 0;  // 0: any free port
  // TLS when set (PEM file paths); otherwise plaintext.
  std::string cert_file = {};
  std::string key_file = {};
  // When set, clients must present a certificate this CA signed (mTLS).
  std::string client_ca_file = {};
};

class HttpTestReceiver {
 public:
  // Listening on 127.0.0.1; nullptr when it cannot (the reason is reported to the running test).
  static std::unique_ptr<HttpTestReceiver> Start(const HttpReceiverOptions& options = {});
  ~HttpTestReceiver();

  int port() const;
  // "http[s]://127.0.0.1:port" + path.
  std::string Url(const std::string& path = "/v1development/profiles") const;

  void Script(std::vector<HttpReply> replies);
  int attempts() const;  // HTTP requests read, answered or not
  std::vector<ReceivedHttpRequest> requests() const;
  std::vector<int> DeliveredIds() const;  // IntervalId of each request answered 2xx, in order
  std::vector<absl::Time> attempt_times() const;
  int refused_connections() const;  // failed TLS handshakes, or bytes that are not HTTP

  void Stop();  // idempotent

 private:
  class Impl;
  explicit HttpTestReceiver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember::testing
