// Keeps a PodIndex in step with the pods of this node, on a thread of its own: LIST them (page by
// page), then WATCH from the list's resourceVersion, re-watching when the server ends the stream
// and relisting only when the version has expired (410). Failures keep the last known pods, are
// logged once per change of state, and are retried with jittered exponential backoff.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "k8s/kube_api_config.h"
#include "k8s/pod_index.h"

namespace ember {

class KubeHttpClient;

// Why a request or a stream failed; each kind is counted (a metric label).
enum class KubeWatchError {
  kToken,         // the token file was unreadable or empty
  kTransport,     // no connection, TLS failure, timeout, or the connection broke mid-body
  kUnauthorized,  // HTTP 401 or 403: the token or the RBAC rules
  kHttp,          // any other status that is not 2xx or 410 (e.g. 429, 5xx)
  kBadList,       // a LIST body that is not a PodList
  kWatchError,    // a watch ERROR event other than 410 Gone
};
inline constexpr size_t kKubeWatchErrorKinds = 6;
// "token", "transport", "unauthorized", "http", "bad_list", "watch_error".
const char* KubeWatchErrorName(KubeWatchError kind);

struct PodWatcherStats {
  bool synced = false;          // a LIST has been applied (stays true through later failures)
  bool watching = false;        // a watch stream is open now
  uint64_t lists = 0;           // LISTs applied to the index (all pages each)
  uint64_t relists = 0;         // of them, after the first: the resourceVersion had expired
  uint64_t watches = 0;         // watch requests answered 200
  uint64_t watch_restarts = 0;  // re-watches after the server ended a stream (no relist)
  uint64_t added = 0;           // watch events by type
  uint64_t modified = 0;
  uint64_t deleted = 0;
  uint64_t bookmarks = 0;
  uint64_t error_events = 0;      // ERROR events (410 Expired among them)
  uint64_t expired = 0;           // 410s, as an HTTP status or an ERROR event: each one relists
  uint64_t malformed_events = 0;  // watch lines that were not a JSON event: skipped
  uint64_t rejected_pods = 0;     // objects ParsePod refused, in lists and events: skipped
  std::array<uint64_t, kKubeWatchErrorKinds> errors = {};  // by KubeWatchError
  std::string resource_version;  // the last one seen (list, event or bookmark)
  std::string last_error;        // "" until the first failure
  absl::Time last_error_time = absl::InfinitePast();
};

// The agent's wiring:
//   absl::StatusOr<KubeApiConfig> config = ResolveKubeApiConfig(options.kube, getenv);
//   PodIndex index;  // outlives the watcher
//   absl::StatusOr<std::unique_ptr<PodWatcher>> watcher = PodWatcher::Create(*config, &index);
//   (*watcher)->Start();  // returns at once; index.Lookup answers once stats().synced
//   ...
//   (*watcher)->Stop();  // or its destructor
class PodWatcher {
 public:
  // Checks the configuration and that the token file (if any) and CA file are readable, so a
  // mistake stops the agent at start-up. `index` must outlive the watcher. Nothing is sent before
  // Start.
  static absl::StatusOr<std::unique_ptr<PodWatcher>> Create(const KubeApiConfig& config,
                                                            PodIndex* index);
  ~PodWatcher();  // Stop()
  PodWatcher(const PodWatcher&) = delete;
  PodWatcher& operator=(const PodWatcher&) = delete;

  // Starts the thread; it runs until Stop. Call once.
  void Start();
  // Ends the thread within about a second, even mid-stream or mid-backoff. Idempotent; call it
  // from one thread (the owner's).
  void Stop();

  PodWatcherStats stats() const;
  bool synced() const;

 private:
  PodWatcher(const KubeApiConfig& config, PodIndex* index, std::unique_ptr<KubeHttpClient> http);

  enum class Step { kList, kWatch, kStop };
  void Run();
  Step List();
  Step Watch();
  // Handles one watch line; false ends the stream: an ERROR event, 410 Expired (relist) or
  // another (watch_failure_ says which).
  bool OnWatchLine(absl::string_view line);
  // The step after a failed request: backs off and stays on `retry`, or kStop. `code` (an HTTP
  // status or CURLcode) tells failures of one kind apart for the log.
  Step Fail(KubeWatchError kind, const std::string& what, const std::string& detail, long code,
            Step retry);
  void Succeeded();
  // kList after an expired resourceVersion, waiting out the backoff first when the watch that
  // expired (started at `watch_start`) had no events and was short; kStop when stopped meanwhile.
  Step Relist(absl::Time watch_start);
  // Waits out the backoff; false when stopped meanwhile.
  bool Backoff();
  std::string FieldSelector() const;

  const KubeApiConfig config_;
  PodIndex* const index_;
  const std::unique_ptr<KubeHttpClient> http_;
  std::thread thread_;

  // Watcher thread only.
  std::string resource_version_;
  absl::Duration backoff_;
  std::string logged_failure_;  // the failure state last logged; "" when healthy
  std::mt19937_64 random_;
  uint64_t stream_events_ = 0;  // events of the current watch stream
  bool stream_malformed_logged_ = false;
  std::string line_;           // a watch line not yet complete
  std::string watch_failure_;  // an ERROR event (not 410) that ended the stream

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  PodWatcherStats stats_;
};

}  // namespace ember
