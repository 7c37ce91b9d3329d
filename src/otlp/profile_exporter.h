// Sends export requests to an OTLP Profiles receiver (gRPC or OTLP/HTTP) from a background thread,
// so that sampling never waits on the network. Intervals wait in a queue bounded in bytes while the
// receiver is away, and are sent in order, with retries, once it is back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"
#include "otlp/export_transport.h"
#include "otlp/exporter_config.h"

namespace ember {

struct ExporterLimits {
  // Serialized requests held at most, the one being sent included. When an interval does not fit,
  // the oldest are dropped to make room: fresh data is worth more than old. (The request in
  // flight keeps its memory until its attempt ends, so the true peak is at most one interval
  // more.)
  size_t max_queue_bytes = size_t{64} << 20;
  // Wait after a retryable failure: initial_backoff doubled with each failure in a row, up to
  // max_backoff, times a random factor in [0.8, 1.2) (capped at max_backoff). A delay the
  // receiver asks for (gRPC RetryInfo, HTTP Retry-After) is used instead, up to max_server_delay.
  absl::Duration initial_backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Seconds(30);
  absl::Duration max_server_delay = absl::Minutes(5);
};

// Counters since Create. Every enqueued request (an interval, or a part of one too big for a single
// request: BuildExportRequests) is counted once in exactly one of intervals_sent,
// dropped_queue_full, failed and dropped_at_shutdown, or is still queued.
struct ExporterStats {
  uint64_t intervals_sent = 0;  // delivered, partially rejected ones included
  uint64_t bytes_sent = 0;      // serialized request bytes delivered (before gzip)
  uint64_t retries = 0;         // attempts that failed retryably and are tried again
  uint64_t dropped_queue_full = 0;
  uint64_t failed = 0;               // rejected for good (a non-retryable answer)
  uint64_t dropped_at_shutdown = 0;  // queued when Shutdown's deadline passed, or enqueued after
  uint64_t partial_successes = 0;    // delivered with a partial_success in the answer
  uint64_t rejected_profiles = 0;    // their partial_success.rejected_profiles, summed
  uint64_t queued_intervals = 0;     // now
  uint64_t queued_bytes = 0;         // now
};

class ProfileExporter {
 public:
  using Request =
      opentelemetry::proto::collector::profiles::v1development::ExportProfilesServiceRequest;

  // Opens the channel and starts the sending thread. Nothing is sent yet, so an endpoint that is
  // down is not an error. Errors are the user's to fix: unreadable certificate files, a bad URL.
  // Logs nothing itself: the caller says where it exports (DescribeExporterConfig).
  static absl::StatusOr<std::unique_ptr<ProfileExporter>> Create(const ExporterConfig& config,
                                                                 ExporterLimits limits = {});
  // Over a transport of the caller's (tests).
  static std::unique_ptr<ProfileExporter> CreateWithTransport(
      std::unique_ptr<ExportTransport> transport, ExporterLimits limits = {});

  ~ProfileExporter();  // Shutdown(absl::ZeroDuration()) unless already shut down
  ProfileExporter(const ProfileExporter&) = delete;
  ProfileExporter& operator=(const ProfileExporter&) = delete;

  // Serializes `request` and queues it; never waits on the network. Safe from any thread. The
  // request is sent as given: an empty one (an idle interval) is the caller's to skip.
  void Enqueue(const Request& request);

  // Stops accepting intervals, keeps sending what is queued until `deadline` from now (then
  // cancels the request in flight), and stops the thread. Whatever is left is counted in
  // dropped_at_shutdown. Later calls do nothing.
  void Shutdown(absl::Duration deadline);

  ExporterStats stats() const;
  // Warns of the intervals dropped or rejected since the last call (from one thread only).
  void LogNewProblems();
  // The run's line on what was sent, dropped and left unsent (after Shutdown).
  void LogSummary() const;

 private:
  class Sender;
  explicit ProfileExporter(std::unique_ptr<Sender> sender);
  std::unique_ptr<Sender> sender_;
  ExporterStats logged_;  // LogNewProblems: the counters already logged
};

}  // namespace ember
