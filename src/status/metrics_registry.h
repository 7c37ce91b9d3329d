// The agent's self-metrics: counters and gauges its threads update with relaxed atomics, rendered
// for Prometheus (text exposition format 0.0.4) by the status server's thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ember {

// Constant labels of one series, e.g. {{"reason", "no_cfi"}}. Order does not matter.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { kCounter, kGauge };

// A count of events. Increment is one relaxed atomic add: cheap enough for per-sample code.
class Counter {
 public:
  void Increment(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// A total that is not a whole number, such as seconds spent. Negative or NaN additions are
// dropped: a counter never goes down.
class DoubleCounter {
 public:
  void Add(double v) {
    if (v > 0) value_.fetch_add(v, std::memory_order_relaxed);
  }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down (queue length, bytes held). Base units: bytes, seconds.
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A counter that follows a total kept elsewhere in plain integers (a cache's own statistics, kept
// by the thread that owns it): Publish adds what the total grew by since the last call.
class CounterMirror {
 public:
  CounterMirror() = default;
  explicit CounterMirror(Counter* metric) : metric_(metric) {}
  void Publish(uint64_t total) {
    if (total > published_) metric_->Increment(total - published_);
    published_ = total;
  }

 private:
  Counter* metric_ = nullptr;
  uint64_t published_ = 0;
};

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<double>::is_always_lock_free);

// Computed when scraped, on the scraping thread; nullopt leaves the series out of that scrape
// (e.g. /proc could not be read).
using MetricCallback = std::function<std::optional<double>()>;

// Series are registered once (usually at start-up) and live as long as the registry; the returned
// pointers stay valid until then and may be updated from any thread without locking. Registering
// and rendering may run concurrently. Registration errors are programming errors (a bad name, a
// counter not named *_total, the same series twice, one name with two types or helps).
class MetricsRegistry {
 public:
  // Content-Type of Render()'s output.
  static constexpr absl::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  absl::StatusOr<Counter*> AddCounter(absl::string_view name, absl::string_view help,
                                      MetricLabels labels = {});
  absl::StatusOr<DoubleCounter*> AddDoubleCounter(absl::string_view name, absl::string_view help,
                                                  MetricLabels labels = {});
  absl::StatusOr<Gauge*> AddGauge(absl::string_view name, absl::string_view help,
                                  MetricLabels labels = {});
  // The callback runs on the scraping thread with the registry's lock held: it must be
  // thread-safe, quick, and must not call back into this registry.
  absl::Status AddCallbackGauge(absl::string_view name, absl::string_view help, MetricLabels labels,
                                MetricCallback callback);
  // For totals kept elsewhere (e.g. process_cpu_seconds_total from /proc).
  absl::Status AddCallbackCounter(absl::string_view name, absl::string_view help,
                                  MetricLabels labels, MetricCallback callback);

  // Every family in registration order: "# HELP", "# TYPE", then one line per series.
  std::string Render() const;

 private:
  struct Series;
  struct Family;

  // Takes `series` with its value set; fills in its label text.
  absl::Status AddSeries(MetricType type, absl::string_view name, absl::string_view help,
                         MetricLabels labels, std::unique_ptr<Series> series);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family>> families_;  // registration order
  std::map<std::string, Family*, std::less<>> by_name_;
};

// Checks used by the registry, exposed for tests: [a-zA-Z_:][a-zA-Z0-9_:]* and
// [a-zA-Z_][a-zA-Z0-9_]* (names starting "__" are reserved by Prometheus).
bool IsValidMetricName(absl::string_view name);
bool IsValidLabelName(absl::string_view name);

// Escaping of the text format: HELP text escapes '\' and newline; label values also '"'.
std::string EscapeHelp(absl::string_view help);
std::string EscapeLabelValue(absl::string_view value);
// Go's ParseFloat reads this back exactly: shortest round-trip digits, NaN, +Inf, -Inf.
std::string FormatMetricValue(double value);

}  // namespace ember
