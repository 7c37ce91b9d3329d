// An in-process OTLP Profiles gRPC receiver on loopback for the exporter tests: it records what
// arrives (decoded, checked with ValidateExportRequest, with its metadata) and answers from a
// script (errors with or without RetryInfo, slow answers, partial success).
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "unit/otlp/test_requests.h"

namespace ember::testing {

// One scripted answer; after the script runs out every call is answered OK.
struct GrpcReply {
  grpc::StatusCode code = grpc::StatusCode::OK;
  std::string message = {};
  std::optional<absl::Duration> retry_delay = {};  // a RetryInfo in grpc-status-details-bin
  absl::Duration delay = absl::ZeroDuration();     // waited before answering
  int64_t rejected_profiles = 0;                   // OK: the answer's partial_success
  std::string partial_error_message = {};
};

// A request the receiver answered OK (one the client gave up on is not recorded).
struct ReceivedExport {
  ExportRequest request = {};
  absl::Status valid = {};  // ValidateExportRequest(request)
  std::multimap<std::string, std::string> metadata = {};
};

struct GrpcReceiverOptions {
  int port = 0;  // 0: any free port
  // TLS when set (PEM contents); otherwise plaintext.
  std::string cert_pem = {};
  std::string key_pem = {};
  // When set, clients must present a certificate this CA signed (mTLS).
  std::string client_ca_pem = {};
  // When false, the server refuses gzip-compressed messages (UNIMPLEMENTED before Export runs),
  // which shows whether a client compressed.
  bool accept_gzip = true;
};

class GrpcTestReceiver {
 public:
  // Listening on 127.0.0.1; nullptr when the port cannot be bound.
  static std::unique_ptr<GrpcTestReceiver> Start(const GrpcReceiverOptions& options = {});
  ~GrpcTestReceiver();

  int port() const { return port_; }
  std::string target() const;  // "127.0.0.1:port"

  void Script(std::vector<GrpcReply> replies);
  int attempts() const;  // calls seen, answered or not
  std::vector<ReceivedExport> received() const;
  std::vector<int> ReceivedIds() const;  // IntervalId of each received request, in order
  std::vector<absl::Time> attempt_times() const;

  void Stop();  // stops listening and ends calls in progress; idempotent

 private:
  class Service;
  GrpcTestReceiver();

  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace ember::testing
