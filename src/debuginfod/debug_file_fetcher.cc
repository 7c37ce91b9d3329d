// DebugFileFetcher: the fetch queue, its workers, the cache on disk and the memory of misses.
#include "debuginfod/debug_file_fetcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace ember {
namespace {

constexpr absl::string_view kSuffix = ".debug";
// Entries of the cache directory read at start, at most: a directory someone filled with
// millions of files must not stall the start.
constexpr size_t kMaxScannedEntries = 100000;

std::chrono::steady_clock::time_point SteadyNow() { return std::chrono::steady_clock::now(); }

}  // namespace

absl::string_view FetchResultName(FetchResult result) {
  switch (result) {
    case FetchResult::kOk:
      return "ok";
    case FetchResult::kNotFound:
      return "not_found";
    case FetchResult::kError:
      return "error";
    case FetchResult::kTimeout:
      return "timeout";
    case FetchResult::kRefused:
      return "refused";
  }
  return "error";
}

absl::string_view FetchRefusalName(FetchRefusal refusal) {
  switch (refusal) {
    case FetchRefusal::kTooBig:
      return "too_big";
    case FetchRefusal::kNotElf:
      return "not_elf";
    case FetchRefusal::kBuildIdMismatch:
      return "build_id_mismatch";
  }
  return "not_elf";
}

DebugFileFetcher::DebugFileFetcher(DebugFileFetcherOptions options, TransportFactory transports,
                                   Clock clock)
    : options_(std::move(options)),
      transports_(std::move(transports)),
      clock_(clock != nullptr ? std::move(clock) : Clock(SteadyNow)) {}

absl::StatusOr<std::unique_ptr<DebugFileFetcher>> DebugFileFetcher::Create(
    DebugFileFetcherOptions options, TransportFactory transports, Clock clock) {
  if (options.cache_dir.empty()) return absl::InvalidArgumentError("no cache directory");
  if (options.max_concurrent < 1) options.max_concurrent = 1;
  std::unique_ptr<DebugFileFetcher> fetcher(
      new DebugFileFetcher(std::move(options), std::move(transports), std::move(clock)));
  if (absl::Status status = fetcher->ScanCache(); !status.ok()) return status;
  return fetcher;
}

DebugFileFetcher::~DebugFileFetcher() { Stop(); }

std::string DebugFileFetcher::CachePath(absl::string_view build_id) const {
  return absl::StrCat(options_.cache_dir, "/", build_id, kSuffix);
}

absl::Status DebugFileFetcher::ScanCache() {
  const std::string& dir = options_.cache_dir;
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create '", dir, "': ", std::strerror(errno)));
  }
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read '", dir, "': ", std::strerror(errno)));
  }
  struct Found {
    std::string build_id;
    uint64_t bytes;
    int64_t mtime_ns;
  };
  std::vector<Found> found;
  size_t scanned = 0;
  while (dirent* entry = readdir(listing)) {
    if (++scanned > kMaxScannedEntries) break;
    absl::string_view name = entry->d_name;
    if (!absl::EndsWith(name, kSuffix)) continue;
    absl::string_view build_id = name.substr(0, name.size() - kSuffix.size());
    if (!IsBuildIdText(build_id)) continue;
    struct stat st;
    if (fstatat(dirfd(listing), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode)) {
      continue;
    }
    found.push_back({std::string(build_id), static_cast<uint64_t>(st.st_size),
                     st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec});
  }
  closedir(listing);
  // Files of an earlier run go first, oldest first.
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime_ns < b.mtime_ns; });
  std::vector<std::string> evicted;
  {
    std::lock_guard lock(mu_);
    for (Found& file : found) {
      if (file.bytes > options_.max_file_bytes) {
        evicted.push_back(CachePath(file.build_id));
        continue;
      }
      stats_.cache_bytes += file.bytes;
      ++stats_.cache_files;
      cached_[std::move(file.build_id)] = CachedFile{file.bytes, ++tick_};
    }
    std::vector<std::string> over = EvictLocked("");
    evicted.insert(evicted.end(), over.begin(), over.end());
  }
  for (const std::string& path : evicted) unlink(path.c_str());
  return absl::OkStatus();
}

void DebugFileFetcher::Start() {
  std::lock_guard lock(mu_);
  if (!workers_.empty() || stopping_.load()) return;
  for (int i = 0; i < options_.max_concurrent; ++i) {
    std::shared_ptr<DebuginfodTransport> transport = transports_();
    if (transport == nullptr) continue;
    workers_.emplace_back([this, transport] { Work(transport.get()); });
    // Named, so that /proc shows which threads fetch (and that they hold no capability); named
    // here, so that every worker has its name once Start returns, however late it first runs.
    pthread_setname_np(workers_.back().native_handle(), kWorkerThreadName);
  }
}

void DebugFileFetcher::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_.store(true);
    queue_.clear();
  }
  work_ready_.notify_all();
  for (std::thread& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
  workers_.clear();
}

std::optional<std::string> DebugFileFetcher::Find(const std::string& build_id) {
  if (!IsBuildIdText(build_id)) return std::nullopt;
  std::lock_guard lock(mu_);
  if (auto it = cached_.find(build_id); it != cached_.end()) {
    std::string path = CachePath(build_id);
    // The cache directory may be shared (a node's hostPath) or cleaned by someone else: a file
    // gone from it is fetched again, not handed out (and reloaded at every export) for ever.
    if (access(path.c_str(), F_OK) == 0 || errno != ENOENT) {
      it->second.last_use = ++tick_;
      return path;
    }
    stats_.cache_bytes -= it->second.bytes;
    cached_.erase(it);
  }
  if (pending_.contains(build_id)) return std::nullopt;
  if (auto it = missing_.find(build_id); it != missing_.end()) {
    if (clock_() < it->second) return std::nullopt;
    missing_.erase(it);
  }
  if (stopping_.load() || queue_.size() >= options_.max_queued) {
    ++stats_.queue_full;
    return std::nullopt;
  }
  queue_.push_back(build_id);
  pending_.insert(build_id);
  work_ready_.notify_one();
  return std::nullopt;
}

std::vector<std::string> DebugFileFetcher::TakeArrived() {
  std::lock_guard lock(mu_);
  has_arrived_.store(false, std::memory_order_release);
  return std::exchange(arrived_, {});
}

DebugFileFetcherStats DebugFileFetcher::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void DebugFileFetcher::LogSummary(uint64_t frames_named_late) const {
  const DebugFileFetcherStats fetched = stats();
  const auto count = [&fetched](FetchResult result) {
    return fetched.results[static_cast<size_t>(result)];
  };
  spdlog::info(
      "debuginfod: {} debug file(s) fetched, {} not found, {} error(s), {} timeout(s), {} "
      "refused; {} frame(s) named late; cache {} bytes in {} file(s), {} evicted",
      count(FetchResult::kOk), count(FetchResult::kNotFound), count(FetchResult::kError),
      count(FetchResult::kTimeout), count(FetchResult::kRefused), frames_named_late,
      fetched.cache_bytes, fetched.cache_files, fetched.evictions);
}

void DebugFileFetcher::RememberMissingLocked(const std::string& build_id,
                                             std::chrono::seconds retry) {
  const auto now = clock_();
  if (missing_.size() >= options_.max_remembered_missing) {
    absl::erase_if(missing_, [now](const auto& item) { return item.second <= now; });
    // Still full: forgetting costs some requests again, never memory.
    if (missing_.size() >= options_.max_remembered_missing) missing_.clear();
  }
  missing_[build_id] = now + retry;
}

std::vector<std::string> DebugFileFetcher::EvictLocked(absl::string_view keep) {
  std::vector<std::string> paths;
  while (stats_.cache_bytes > options_.max_cache_bytes) {
    auto oldest = cached_.end();
    for (auto it = cached_.begin(); it != cached_.end(); ++it) {
      if (it->first == keep) continue;
      if (oldest == cached_.end() || it->second.last_use < oldest->second.last_use) oldest = it;
    }
    if (oldest == cached_.end()) break;
    stats_.cache_bytes -= oldest->second.bytes;
    --stats_.cache_files;
    ++stats_.evictions;
    paths.push_back(CachePath(oldest->first));
    cached_.erase(oldest);
  }
  return paths;
}

FetchResult DebugFileFetcher::Adopt(const std::string& build_id, const Download& download,
                                    uint64_t* bytes, std::optional<FetchRefusal>* refusal) {
  const std::string path = CachePath(build_id);
  if (download.path.empty() || rename(download.path.c_str(), path.c_str()) != 0) {
    if (!download.path.empty()) unlink(download.path.c_str());
    return FetchResult::kError;
  }
  // The transport's own per-file directory, left empty by the move (rmdir removes nothing else).
  if (size_t slash = download.path.rfind('/'); slash != std::string::npos) {
    const std::string parent = download.path.substr(0, slash);
    if (absl::StartsWith(parent, options_.cache_dir + "/")) rmdir(parent.c_str());
  }
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    unlink(path.c_str());
    *refusal = FetchRefusal::kNotElf;
    return FetchResult::kRefused;
  }
  if (static_cast<uint64_t>(st.st_size) > options_.max_file_bytes) {
    unlink(path.c_str());
    *refusal = FetchRefusal::kTooBig;
    return FetchResult::kRefused;
  }
  switch (CheckDebugFile(path, build_id)) {
    case DebugFileCheck::kOk:
      *bytes = static_cast<uint64_t>(st.st_size);
      return FetchResult::kOk;
    case DebugFileCheck::kBuildIdMismatch:
      *refusal = FetchRefusal::kBuildIdMismatch;
      break;
    case DebugFileCheck::kUnreadable:
    case DebugFileCheck::kNotElf:
      *refusal = FetchRefusal::kNotElf;
      break;
  }
  unlink(path.c_str());
  return FetchResult::kRefused;
}

void DebugFileFetcher::Work(DebuginfodTransport* transport) {
  while (true) {
    std::string build_id;
    {
      std::unique_lock lock(mu_);
      work_ready_.wait(lock, [this] { return stopping_.load() || !queue_.empty(); });
      if (stopping_.load()) return;
      build_id = std::move(queue_.front());
      queue_.pop_front();
      ++in_flight_;
      stats_.in_flight_peak = std::max(stats_.in_flight_peak, in_flight_);
    }
    Download download = transport->Fetch(build_id, stopping_);
    FetchResult result = download.result;
    uint64_t bytes = 0;
    std::optional<FetchRefusal> refusal;
    if (result == FetchResult::kOk) {
      result = Adopt(build_id, download, &bytes, &refusal);
    } else if (result == FetchResult::kRefused) {
      refusal = download.too_big ? FetchRefusal::kTooBig : FetchRefusal::kNotElf;
    }
    std::vector<std::string> evicted;
    {
      std::lock_guard lock(mu_);
      --in_flight_;
      pending_.erase(build_id);
      ++stats_.results[static_cast<size_t>(result)];
      if (refusal.has_value()) ++stats_.refusals[static_cast<size_t>(*refusal)];
      if (result == FetchResult::kOk) {
        cached_[build_id] = CachedFile{bytes, ++tick_};
        stats_.cache_bytes += bytes;
        ++stats_.cache_files;
        evicted = EvictLocked(build_id);
        arrived_.push_back(build_id);
        has_arrived_.store(true, std::memory_order_release);
      } else {
        // Not asked again for a while: a build id no server has is asked about once per
        // not_found_retry, however often its frames are sampled.
        const bool missing = result == FetchResult::kNotFound || result == FetchResult::kRefused;
        RememberMissingLocked(build_id, missing ? options_.not_found_retry : options_.error_retry);
      }
    }
    for (const std::string& path : evicted) unlink(path.c_str());
  }
}

}  // namespace ember
