// What the exporter's sending thread needs from a protocol: send one serialized
// ExportProfilesServiceRequest and say whether it arrived, may be retried, or is lost. The gRPC and
// OTLP/HTTP transports implement it; tests stand in for it to drive the queue.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "otlp/exporter_config.h"

namespace ember {

struct SendResult {
  enum class Outcome {
    kDelivered,  // the receiver took the request (maybe only part of it: see partial success)
    kRetryable,  // not delivered, worth sending again (endpoint away, overloaded, too slow)
    kFailed,     // not delivered and never will be (rejected, bad request, misconfiguration)
  };
  Outcome outcome = Outcome::kDelivered;
  // Not delivered: one line for the log, e.g. "UNAVAILABLE: failed to connect". Never holds a
  // header value. Equal reasons are logged once.
  std::string reason = {};
  // How long the receiver asked us to wait before the next attempt (RetryInfo, Retry-After).
  std::optional<absl::Duration> retry_delay = {};
  // Delivered: the response's partial_success.
  int64_t rejected_profiles = 0;
  std::string partial_error_message = {};

  // A send that Cancel() ended: retryable, so a later exporter would still send the interval.
  static SendResult Cancelled() {
    return {.outcome = Outcome::kRetryable, .reason = "cancelled: shutting down"};
  }
};

class ExportTransport {
 public:
  virtual ~ExportTransport() = default;
  // Sends `request` (a serialized ExportProfilesServiceRequest) and waits for the answer, at most
  // the configured per-request timeout. Called from one thread at a time.
  virtual SendResult Send(const std::string& request) = 0;
  // From any thread: makes the Send in progress, and every later one, end at once as kRetryable.
  // For shutdown, which must not wait out a request's full timeout.
  virtual void Cancel() = 0;
};

// Connection settings the transports take from ExporterLimits.
struct TransportOptions {
  // The channel's reconnect backoff follows the exporter's, so a receiver that comes back is seen
  // about as soon as the next attempt.
  absl::Duration initial_backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Seconds(30);
};

// The wait before the next attempt after `failures` retryable failures in a row (1 for the first):
// initial * 2^(failures - 1), at most max, times (0.8 + 0.4 * unit_random), at most max.
// `unit_random` is in [0, 1).
absl::Duration BackoffDelay(int failures, absl::Duration initial, absl::Duration max,
                            double unit_random);

// The retry delay in a serialized google.rpc.Status (gRPC's grpc-status-details-bin trailer) from
// its google.rpc.RetryInfo detail; nullopt when there is none, or it is negative or unreadable.
std::optional<absl::Duration> RetryDelayFromStatusDetails(absl::string_view serialized_status);

// An HTTP Retry-After value: delay-seconds, or an HTTP-date (IMF-fixdate) taken relative to `now`.
// nullopt when it is neither.
std::optional<absl::Duration> ParseRetryAfter(absl::string_view value, absl::Time now);

// The contents of a PEM file named by the settings (CA roots, client certificate or key), or one
// line naming `what` and the path: unreadable, or holding no PEM block.
absl::StatusOr<std::string> ReadPemFile(const std::string& path, absl::string_view what);

// Errors are a user's mistake (unreadable certificate file, bad URL) in one line.
absl::StatusOr<std::unique_ptr<ExportTransport>> CreateGrpcTransport(
    const ExporterConfig& config, const TransportOptions& options);
absl::StatusOr<std::unique_ptr<ExportTransport>> CreateHttpTransport(
    const ExporterConfig& config, const TransportOptions& options);

}  // namespace ember
