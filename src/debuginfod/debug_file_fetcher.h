// Separate debug files fetched by build id from debuginfod servers, off the sampling path: a
// queue served by a few worker threads, a bounded cache on disk, and memory of what the servers
// did not have. The symbolizer asks through DebugFileSource and learns of arrivals by polling.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "symbolize/debug_file_source.h"

namespace ember {

// The name of the worker threads (/proc/PID/task/TID/comm).
inline constexpr char kWorkerThreadName[] = "debuginfod";

// How one fetch ended.
enum class FetchResult : uint8_t {
  kOk,        // a debug file of the build id, now in the cache
  kNotFound,  // no server has it
  kError,     // a server or the connection failed, or the fetch was cancelled
  kTimeout,   // no answer, or no whole file, in time
  kRefused,   // an answer that is not the build id's debug file (FetchRefusal says why)
};
inline constexpr size_t kFetchResults = 5;
absl::string_view FetchResultName(FetchResult result);

enum class FetchRefusal : uint8_t {
  kTooBig,           // over the per-file size limit (cut off while downloading, or after)
  kNotElf,           // not an ELF file (garbage, an HTML error page...)
  kBuildIdMismatch,  // an ELF file of another build id
};
inline constexpr size_t kFetchRefusals = 3;
absl::string_view FetchRefusalName(FetchRefusal refusal);

// What a transport made of one request.
struct Download {
  FetchResult result = FetchResult::kError;
  // kOk: where the transport left the file; the fetcher moves it into its cache (same file
  // system) or deletes it.
  std::string path;
  // kRefused: the transport stopped a download over the size limit.
  bool too_big = false;
};

// One connection's worth of fetching; each worker thread has its own, used by it alone.
class DebuginfodTransport {
 public:
  virtual ~DebuginfodTransport() = default;
  // Downloads the debug file of `build_id`, blocking up to the transport's own time limit, or
  // until `cancel` turns true (the fetcher is stopping).
  virtual Download Fetch(const std::string& build_id, const std::atomic<bool>& cancel) = 0;
};

struct DebugFileFetcherOptions {
  // The cache: <cache_dir>/<build id>.debug files, kept across runs. Created if missing.
  std::string cache_dir;
  // Bytes of debug files kept; over it, the least recently used ones are deleted.
  size_t max_cache_bytes = size_t{1} << 30;
  // Largest file kept; bigger ones are refused (too_big).
  size_t max_file_bytes = size_t{1} << 30;
  // Fetches at once: one worker thread each.
  int max_concurrent = 2;
  // Build ids waiting for a worker; more are not asked for now (asked again later).
  size_t max_queued = 1024;
  // A build id no server had (or one whose answer was refused) is not asked for again for this
  // long; one whose fetch failed or timed out, for error_retry.
  std::chrono::seconds not_found_retry{600};
  std::chrono::seconds error_retry{60};
  // Build ids remembered as missing, at most (past it, those whose time is up go, then all).
  size_t max_remembered_missing = 65536;
};

struct DebugFileFetcherStats {
  uint64_t results[kFetchResults] = {};
  uint64_t refusals[kFetchRefusals] = {};
  uint64_t cache_bytes = 0;
  uint64_t cache_files = 0;
  uint64_t evictions = 0;       // files deleted to stay within max_cache_bytes
  uint64_t queue_full = 0;      // requests not queued: max_queued were waiting
  uint64_t in_flight_peak = 0;  // most fetches running at once
};

class DebugFileFetcher : public DebugFileSource {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  using TransportFactory = std::function<std::unique_ptr<DebuginfodTransport>()>;

  // Creates the cache directory (mode 0700) and reads what it holds (files from an earlier run
  // are used, oldest first to go). Starts no thread. `transports` makes one transport per worker.
  static absl::StatusOr<std::unique_ptr<DebugFileFetcher>> Create(DebugFileFetcherOptions options,
                                                                  TransportFactory transports,
                                                                  Clock clock = nullptr);
  ~DebugFileFetcher() override;  // Stop()
  DebugFileFetcher(const DebugFileFetcher&) = delete;
  DebugFileFetcher& operator=(const DebugFileFetcher&) = delete;

  // Starts the worker threads (they inherit the caller's capabilities and seccomp filter).
  void Start();
  // Cancels the fetches under way and joins the workers. Queued requests are dropped.
  void Stop();

  // DebugFileSource: the cached file's path, or nullopt after queueing the build id (unless it
  // is queued or being fetched already, was missing lately, or the queue is full). Takes a lock
  // the workers hold only to update the tables, never across I/O.
  std::optional<std::string> Find(const std::string& build_id) override;

  // Whether files arrived since the last TakeArrived (one atomic load).
  bool HasArrived() const { return has_arrived_.load(std::memory_order_acquire); }
  // The build ids of the files that arrived since the last call.
  std::vector<std::string> TakeArrived();

  DebugFileFetcherStats stats() const;
  const std::string& cache_dir() const { return options_.cache_dir; }
  // The run's one line on what was fetched; `frames_named_late`: the cached frames named again
  // once their debug file arrived.
  void LogSummary(uint64_t frames_named_late) const;

 private:
  struct CachedFile {
    uint64_t bytes = 0;
    uint64_t last_use = 0;  // tick, for LRU order
  };

  DebugFileFetcher(DebugFileFetcherOptions options, TransportFactory transports, Clock clock);
  absl::Status ScanCache();
  std::string CachePath(absl::string_view build_id) const;
  void Work(DebuginfodTransport* transport);
  // Moves a download into the cache and checks it; the result and, when refused, why.
  FetchResult Adopt(const std::string& build_id, const Download& download, uint64_t* bytes,
                    std::optional<FetchRefusal>* refusal);
  // Under mu_: drops least recently used files (never `keep`) while over max_cache_bytes; returns
  // the paths to delete once the lock is released.
  std::vector<std::string> EvictLocked(absl::string_view keep);
  void RememberMissingLocked(const std::string& build_id, std::chrono::seconds retry);

  DebugFileFetcherOptions options_;
  TransportFactory transports_;
  Clock clock_;

  mutable std::mutex mu_;
  std::condition_variable work_ready_;
  std::deque<std::string> queue_;                        // guarded by mu_
  absl::flat_hash_set<std::string> pending_;             // queued or being fetched; guarded by mu_
  absl::flat_hash_map<std::string, CachedFile> cached_;  // guarded by mu_
  // Missing build ids and when they may be asked for again; guarded by mu_.
  absl::flat_hash_map<std::string, std::chrono::steady_clock::time_point> missing_;
  std::vector<std::string> arrived_;  // guarded by mu_
  uint64_t tick_ = 0;                 // guarded by mu_
  uint64_t in_flight_ = 0;            // guarded by mu_
  DebugFileFetcherStats stats_;       // guarded by mu_
  std::atomic<bool> has_arrived_{false};
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> workers_;
};

}  // namespace ember
