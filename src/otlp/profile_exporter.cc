// The exporter's queue and sending thread: order, the byte bound, retries with backoff, counting,
// and shutdown. The protocols live in grpc_transport.cc and http_transport.cc.
#include "otlp/profile_exporter.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"

namespace ember {
namespace {

using Clock = std::chrono::steady_clock;

// Distinct reasons remembered for "log once"; a receiver that puts per-request details in its
// messages must not grow this without bound.
constexpr size_t kMaxLoggedReasons = 64;
constexpr size_t kMaxReasonLength = 300;

std::string Shorten(std::string text) {
  if (text.size() > kMaxReasonLength) {
    text.resize(kMaxReasonLength);
    text += "...";
  }
  return text;
}

}  // namespace

class ProfileExporter::Sender {
 public:
  Sender(std::unique_ptr<ExportTransport> transport, ExporterLimits limits)
      : transport_(std::move(transport)), limits_(limits), thread_([this] { Run(); }) {}

  void Enqueue(const Request& request) {
    auto entry = std::make_shared<Entry>();
    // Serializing here, on the caller's thread, keeps the caller's request its own.
    request.SerializeToString(&entry->bytes);
    const size_t size = entry->bytes.size();
    {
      std::lock_guard lock(mu_);
      if (!accepting_) {
        ++stats_.dropped_at_shutdown;
        return;
      }
      if (size > limits_.max_queue_bytes) {
        ++stats_.dropped_queue_full;
        LogOnceLocked(absl::StrCat("dropping intervals larger than the whole queue (",
                                   limits_.max_queue_bytes, " bytes)"));
        return;
      }
      MakeRoomLocked(size);
      queue_.push_back(std::move(entry));
      queued_bytes_ += size;
    }
    cv_.notify_all();
  }

  void Shutdown(absl::Duration deadline) {
    std::unique_lock lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    accepting_ = false;
    // A year stands for "forever" without overflowing the clock.
    deadline = std::clamp(deadline, absl::ZeroDuration(), absl::Hours(24 * 365));
    shutdown_deadline_ = Clock::now() + absl::ToChronoNanoseconds(deadline);
    cv_.notify_all();
    cv_.wait_until(lock, shutdown_deadline_, [this] { return finished_; });
    const bool cancel = !finished_;
    stop_ = true;
    lock.unlock();
    if (cancel) transport_->Cancel();  // ends the attempt in flight at once
    cv_.notify_all();
    thread_.join();
    lock.lock();
    if (!queue_.empty()) {
      spdlog::warn("OTLP export: stopped with {} intervals ({} bytes) not sent", queue_.size(),
                   queued_bytes_);
    }
    stats_.dropped_at_shutdown += queue_.size();
    queue_.clear();
    queued_bytes_ = 0;
  }

  ExporterStats stats() const {
    std::lock_guard lock(mu_);
    ExporterStats stats = stats_;
    stats.queued_intervals = queue_.size();
    stats.queued_bytes = queued_bytes_;
    return stats;
  }

 private:
  struct Entry {
    std::string bytes;
    bool in_flight = false;  // the thread is sending it now
    bool evicted = false;    // dropped for room while in flight: counted when its attempt ends
  };

  // With mu_ held: drops queued intervals, oldest first, until `incoming` more bytes fit.
  void MakeRoomLocked(size_t incoming) {
    while (!queue_.empty() && queued_bytes_ + incoming > limits_.max_queue_bytes) {
      std::shared_ptr<Entry>& oldest = queue_.front();
      queued_bytes_ -= oldest->bytes.size();
      if (oldest->in_flight) {
        oldest->evicted = true;
      } else {
        ++stats_.dropped_queue_full;
      }
      queue_.pop_front();
      if (!overflow_logged_) {
        overflow_logged_ = true;
        spdlog::warn(
            "OTLP export: queue full ({} bytes), dropping the oldest intervals until the "
            "receiver takes them again",
            limits_.max_queue_bytes);
      }
    }
  }

  void LogOnceLocked(const std::string& reason) {
    if (logged_reasons_.contains(reason)) return;
    if (logged_reasons_.size() >= kMaxLoggedReasons) {
      if (logged_reasons_.size() == kMaxLoggedReasons) {
        logged_reasons_.insert("");  // remember that the notice was given
        spdlog::warn("OTLP export: too many distinct errors, no longer logging new ones");
      }
      return;
    }
    logged_reasons_.insert(reason);
    spdlog::warn("OTLP export: {}", reason);
  }

  // True when the thread has nothing more it may do: told to stop, drained after shutdown, or its
  // next attempt would come after the shutdown deadline.
  bool DoneLocked(Clock::time_point next_attempt) const {
    if (stop_) return true;
    if (accepting_) return false;
    return queue_.empty() || next_attempt > shutdown_deadline_;
  }

  void Run() {
    absl::BitGen random;
    Clock::time_point next_attempt = Clock::time_point();
    int failures_in_a_row = 0;
    std::string last_retry_reason;
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait_until(lock, next_attempt, [&] {
        return DoneLocked(next_attempt) || (!queue_.empty() && Clock::now() >= next_attempt);
      });
      // wait_until gives up at next_attempt even when the queue is empty: wait for work then.
      if (queue_.empty() && !DoneLocked(next_attempt)) {
        cv_.wait(lock, [&] { return DoneLocked(next_attempt) || !queue_.empty(); });
      }
      if (DoneLocked(next_attempt)) break;
      if (Clock::now() < next_attempt) continue;

      std::shared_ptr<Entry> entry = queue_.front();
      entry->in_flight = true;
      lock.unlock();
      SendResult result = transport_->Send(entry->bytes);
      lock.lock();
      entry->in_flight = false;
      const size_t size = entry->bytes.size();
      // Only this thread pops, and an evicted entry is no longer in the queue: a live one is
      // still at the front.
      auto finish = [&] {
        if (!entry->evicted) {
          queue_.pop_front();
          queued_bytes_ -= size;
        }
      };

      switch (result.outcome) {
        case SendResult::Outcome::kDelivered:
          finish();
          ++stats_.intervals_sent;
          stats_.bytes_sent += size;
          if (failures_in_a_row > 0) {
            spdlog::info("OTLP export: delivered again after {} failed attempts",
                         failures_in_a_row);
          }
          failures_in_a_row = 0;
          last_retry_reason.clear();
          overflow_logged_ = false;
          next_attempt = Clock::time_point();
          if (result.rejected_profiles > 0 || !result.partial_error_message.empty()) {
            ++stats_.partial_successes;
            stats_.rejected_profiles += std::max<int64_t>(result.rejected_profiles, 0);
            LogOnceLocked(Shorten(absl::StrCat("the receiver rejected part of a request: ",
                                               result.partial_error_message.empty()
                                                   ? "(no message)"
                                                   : result.partial_error_message)));
          }
          break;
        case SendResult::Outcome::kFailed:
          finish();
          ++stats_.failed;
          // The receiver answered, so it is there: no reason to wait before the next interval.
          failures_in_a_row = 0;
          next_attempt = Clock::time_point();
          LogOnceLocked(
              Shorten(absl::StrCat("dropping an interval the receiver refused: ", result.reason)));
          break;
        case SendResult::Outcome::kRetryable: {
          if (entry->evicted) {
            ++stats_.dropped_queue_full;
          } else if (!stop_) {
            ++stats_.retries;
          }
          if (stop_) break;  // cancelled by Shutdown, which counts what is still queued
          ++failures_in_a_row;
          absl::Duration delay =
              result.retry_delay
                  ? std::clamp(*result.retry_delay, absl::ZeroDuration(), limits_.max_server_delay)
                  : BackoffDelay(failures_in_a_row, limits_.initial_backoff, limits_.max_backoff,
                                 absl::Uniform(random, 0.0, 1.0));
          next_attempt = Clock::now() + absl::ToChronoNanoseconds(delay);
          std::string reason = Shorten(result.reason);
          if (reason != last_retry_reason) {
            spdlog::warn("OTLP export: {}; retrying in {} ({} intervals, {} bytes queued)", reason,
                         absl::FormatDuration(delay), queue_.size(), queued_bytes_);
            last_retry_reason = reason;
          } else {
            spdlog::debug("OTLP export: {}; retrying in {}", reason, absl::FormatDuration(delay));
          }
          break;
        }
      }
    }
    finished_ = true;
    cv_.notify_all();
  }

  const std::unique_ptr<ExportTransport> transport_;
  const ExporterLimits limits_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Entry>> queue_;
  size_t queued_bytes_ = 0;
  bool accepting_ = true;
  bool stop_ = false;      // the thread must return now
  bool finished_ = false;  // the thread has returned, or is about to
  bool shut_down_ = false;
  Clock::time_point shutdown_deadline_ = Clock::time_point::max();  // compared, never waited on
  ExporterStats stats_;
  absl::flat_hash_set<std::string> logged_reasons_;
  bool overflow_logged_ = false;  // since the last delivery

  std::thread thread_;  // last: starts once everything above is set up
};

absl::StatusOr<std::unique_ptr<ProfileExporter>> ProfileExporter::Create(
    const ExporterConfig& config, ExporterLimits limits) {
  TransportOptions options{.initial_backoff = limits.initial_backoff,
                           .max_backoff = limits.max_backoff};
  absl::StatusOr<std::unique_ptr<ExportTransport>> transport =
      config.protocol == OtlpProtocol::kGrpc ? CreateGrpcTransport(config, options)
                                             : CreateHttpTransport(config, options);
  if (!transport.ok()) return transport.status();
  return CreateWithTransport(*std::move(transport), limits);
}

std::unique_ptr<ProfileExporter> ProfileExporter::CreateWithTransport(
    std::unique_ptr<ExportTransport> transport, ExporterLimits limits) {
  return std::unique_ptr<ProfileExporter>(
      new ProfileExporter(std::make_unique<Sender>(std::move(transport), limits)));
}

ProfileExporter::ProfileExporter(std::unique_ptr<Sender> sender) : sender_(std::move(sender)) {}

ProfileExporter::~ProfileExporter() { sender_->Shutdown(absl::ZeroDuration()); }

void ProfileExporter::Enqueue(const Request& request) { sender_->Enqueue(request); }

void ProfileExporter::Shutdown(absl::Duration deadline) { sender_->Shutdown(deadline); }

ExporterStats ProfileExporter::stats() const { return sender_->stats(); }

void ProfileExporter::LogNewProblems() {
  const ExporterStats now = stats();
  if (now.dropped_queue_full > logged_.dropped_queue_full) {
    spdlog::warn("OTLP: {} interval(s) dropped, the queue was full while the endpoint was away",
                 now.dropped_queue_full - logged_.dropped_queue_full);
  }
  if (now.failed > logged_.failed) {
    spdlog::warn("OTLP: {} interval(s) rejected by the endpoint", now.failed - logged_.failed);
  }
  if (now.rejected_profiles > logged_.rejected_profiles) {
    spdlog::warn("OTLP: the endpoint rejected {} profile(s) in partial successes",
                 now.rejected_profiles - logged_.rejected_profiles);
  }
  logged_ = now;
}

void ProfileExporter::LogSummary() const {
  const ExporterStats sent = stats();
  spdlog::info(
      "OTLP: {} interval(s) sent ({} bytes), {} retried attempt(s), {} dropped with a full "
      "queue, {} rejected, {} unsent at exit",
      sent.intervals_sent, sent.bytes_sent, sent.retries, sent.dropped_queue_full, sent.failed,
      sent.dropped_at_shutdown);
}

}  // namespace ember
