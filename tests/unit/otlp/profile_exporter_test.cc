// The exporter's queue and sending thread over a scripted transport: order, the byte bound and
// which interval it drops, retries and the delays between them, counting, and shutdown. The
// protocols themselves are tested against real receivers in grpc_exporter_test.cc and
// http_exporter_test.cc.
#include "otlp/profile_exporter.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "unit/otlp/test_requests.h"
#include "unit/otlp/wait_for.h"

namespace ember {
namespace {

using ::ember::testing::IntervalId;
using ::ember::testing::MakeTestRequest;
using ::ember::testing::WaitFor;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

SendResult Delivered(int64_t rejected = 0, std::string message = "") {
  SendResult result;
  result.rejected_profiles = rejected;
  result.partial_error_message = std::move(message);
  return result;
}

SendResult Retryable(std::optional<absl::Duration> delay = std::nullopt) {
  SendResult result;
  result.outcome = SendResult::Outcome::kRetryable;
  result.reason = "UNAVAILABLE: scripted";
  result.retry_delay = delay;
  return result;
}

SendResult Failed() {
  SendResult result;
  result.outcome = SendResult::Outcome::kFailed;
  result.reason = "INVALID_ARGUMENT: scripted";
  return result;
}

// What the transport saw and will answer; shared between the test and the transport, which the
// exporter owns.
struct TransportState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<SendResult> script;  // answers for the next attempts; delivered when empty
  std::vector<int> attempts;      // interval ids, in attempt order
  std::vector<absl::Time> attempt_times;
  bool hold = false;  // Send waits while set, until released or cancelled
  bool in_send = false;
  bool cancelled = false;

  void Release() {
    std::lock_guard lock(mu);
    hold = false;
    cv.notify_all();
  }
  std::vector<int> Attempts() {
    std::lock_guard lock(mu);
    return attempts;
  }
  bool InSend() {
    std::lock_guard lock(mu);
    return in_send;
  }
};

class ScriptedTransport : public ExportTransport {
 public:
  explicit ScriptedTransport(std::shared_ptr<TransportState> state) : state_(std::move(state)) {}

  SendResult Send(const std::string& request) override {
    std::unique_lock lock(state_->mu);
    state_->attempts.push_back(IntervalId(request));
    state_->attempt_times.push_back(absl::Now());
    state_->in_send = true;
    state_->cv.wait(lock, [&] { return !state_->hold || state_->cancelled; });
    state_->in_send = false;
    if (state_->cancelled) return Retryable();
    if (state_->script.empty()) return Delivered();
    SendResult result = state_->script.front();
    state_->script.pop_front();
    return result;
  }

  void Cancel() override {
    std::lock_guard lock(state_->mu);
    state_->cancelled = true;
    state_->cv.notify_all();
  }

 private:
  std::shared_ptr<TransportState> state_;
};

ExporterLimits FastLimits() {
  ExporterLimits limits;
  limits.initial_backoff = absl::Milliseconds(10);
  limits.max_backoff = absl::Milliseconds(40);
  return limits;
}

struct Harness {
  std::shared_ptr<TransportState> state = std::make_shared<TransportState>();
  std::unique_ptr<ProfileExporter> exporter;

  explicit Harness(ExporterLimits limits = FastLimits()) {
    exporter =
        ProfileExporter::CreateWithTransport(std::make_unique<ScriptedTransport>(state), limits);
  }
  ExporterStats Stats() const { return exporter->stats(); }
};

// Every interval enqueued is counted in exactly one outcome, or is still queued.
void ExpectAccounted(const ExporterStats& stats, uint64_t enqueued) {
  EXPECT_EQ(stats.intervals_sent + stats.dropped_queue_full + stats.failed +
                stats.dropped_at_shutdown + stats.queued_intervals,
            enqueued);
}

TEST(BackoffDelayTest, DoublesFromInitialUpToMaxWithJitter) {
  const absl::Duration initial = absl::Seconds(1);
  const absl::Duration max = absl::Seconds(30);
  EXPECT_EQ(BackoffDelay(1, initial, max, 0.5), absl::Seconds(1));
  EXPECT_EQ(BackoffDelay(2, initial, max, 0.5), absl::Seconds(2));
  EXPECT_EQ(BackoffDelay(5, initial, max, 0.5), absl::Seconds(16));
  EXPECT_EQ(BackoffDelay(6, initial, max, 0.5), absl::Seconds(30));
  EXPECT_EQ(BackoffDelay(1000, initial, max, 0.5), absl::Seconds(30));
  EXPECT_EQ(BackoffDelay(1, initial, max, 0.0), absl::Milliseconds(800));
  EXPECT_NEAR(absl::ToDoubleSeconds(BackoffDelay(3, initial, max, 0.999)), 4 * 1.1996, 1e-9);
  EXPECT_EQ(BackoffDelay(6, initial, max, 0.999), absl::Seconds(30));  // 30 s * 1.2 > max
  EXPECT_EQ(BackoffDelay(6, initial, max, 0.0), absl::Seconds(24));
}

TEST(ProfileExporterTest, SendsEveryIntervalInOrderAndCountsBytes) {
  Harness h;
  uint64_t bytes = 0;
  for (int id = 0; id < 5; ++id) {
    ProfileExporter::Request request = MakeTestRequest(id);
    bytes += request.ByteSizeLong();
    h.exporter->Enqueue(request);
  }
  ASSERT_TRUE(WaitFor([&] { return h.Stats().intervals_sent == 5; }));
  EXPECT_THAT(h.state->Attempts(), ElementsAre(0, 1, 2, 3, 4));
  ExporterStats stats = h.Stats();
  EXPECT_EQ(stats.bytes_sent, bytes);
  EXPECT_EQ(stats.queued_bytes, 0u);
  EXPECT_EQ(stats.retries, 0u);
  ExpectAccounted(stats, 5);
}

TEST(ProfileExporterTest, EnqueueDoesNotWaitForTheTransport) {
  Harness h;
  h.state->hold = true;  // the first Send never returns on its own
  h.exporter->Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return h.state->InSend(); }));
  absl::Time start = absl::Now();
  for (int id = 1; id <= 50; ++id) h.exporter->Enqueue(MakeTestRequest(id));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(h.Stats().queued_intervals, 51u);
  h.state->Release();
  ASSERT_TRUE(WaitFor([&] { return h.Stats().intervals_sent == 51; }));
}

// The bound counts serialized bytes; the oldest intervals make room, including the one being sent
// (it is not retried once evicted, and counted dropped when its attempt fails).
TEST(ProfileExporterTest, FullQueueDropsTheOldestIntervals) {
  const size_t size = MakeTestRequest(0, 1000).ByteSizeLong();
  ExporterLimits limits = FastLimits();
  limits.max_queue_bytes = size * 3 + size / 2;  // room for three
  Harness h(limits);
  h.state->hold = true;
  h.state->script = {Retryable()};  // the interval in flight fails
  h.exporter->Enqueue(MakeTestRequest(0, 1000));
  ASSERT_TRUE(WaitFor([&] { return h.state->InSend(); }));
  for (int id = 1; id < 10; ++id) h.exporter->Enqueue(MakeTestRequest(id, 1000));

  ExporterStats stats = h.Stats();
  EXPECT_EQ(stats.queued_intervals, 3u);
  EXPECT_LE(stats.queued_bytes, limits.max_queue_bytes);
  EXPECT_EQ(stats.dropped_queue_full, 6u);  // 1..6; interval 0 is still in flight

  h.state->Release();
  ASSERT_TRUE(WaitFor([&] { return h.Stats().intervals_sent == 3; }));
  EXPECT_THAT(h.state->Attempts(), ElementsAre(0, 7, 8, 9));
  stats = h.Stats();
  EXPECT_EQ(stats.dropped_queue_full, 7u);
  EXPECT_EQ(stats.retries, 0u);
  ExpectAccounted(stats, 10);
}

TEST(ProfileExporterTest, EvictedIntervalThatArrivesAnywayCountsAsSent) {
  const size_t size = MakeTestRequest(0).ByteSizeLong();
  ExporterLimits limits = FastLimits();
  limits.max_queue_bytes = size * 2 + size / 2;
  Harness h(limits);
  h.state->hold = true;
  h.exporter->Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return h.state->InSend(); }));
  for (int id = 1; id < 4; ++id) h.exporter->Enqueue(MakeTestRequest(id));
  h.state->Release();
  ASSERT_TRUE(WaitFor([&] { return h.Stats().intervals_sent == 3; }));
  EXPECT_THAT(h.state->Attempts(), ElementsAre(0, 2, 3));
  ExporterStats stats = h.Stats();
  EXPECT_EQ(stats.dropped_queue_full, 1u);  // interval 1
  ExpectAccounted(stats, 4);
}

TEST(ProfileExporterTest, IntervalLargerThanTheQueueIsDropped) {
  ExporterLimits limits = FastLimits();
  limits.max_queue_bytes = MakeTestRequest(0).ByteSizeLong() * 2;
  Harness h(limits);
  h.exporter->Enqueue(MakeTestRequest(0, limits.max_queue_bytes));
  h.exporter->Enqueue(MakeTestRequest(1));
  ASSERT_TRUE(WaitFor([&] { return h.Stats().intervals_sent == 1; }));
  EXPECT_THAT(h.state->Attempts(), ElementsAre(1));
  EXPECT_EQ(h.Stats().dropped_queue_full, 1u);
}

// A retrying interval holds back the later ones: the receiver sees them in order.
TEST(ProfileExporterTest, RetriesKeepOrder) {
  Harness h;
  h.state->script = {Retryable(), Retryable(), Retryable()};
  for (int id = 0; id < 3; ++id) h.exporter->Enqueue(MakeTestRequest(id));
  ASSERT_TRUE(WaitFor([&] { return h.Stats().intervals_sent == 3; }));
  EXPECT_THAT(h.state->Attempts(), ElementsAre(0, 0, 0, 0, 1, 2));
  ExporterStats stats = h.Stats();
  EXPECT_EQ(stats.retries, 3u);
  ExpectAccounted(stats, 3);
}

TEST(ProfileExporterTest, BackoffGrowsBetweenAttempts) {
  ExporterLimits limits;
  limits.initial_backoff = absl::Milliseconds(50);
  limits.max_backoff = absl::Milliseconds(200);
  Harness h(limits);
  h.state->script = {Retryable(), Retryable(), Retryable(), Retryable()};
  h.exporter->Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return h.Stats().intervals_sent == 1; }));
  std::lock_guard lock(h.state->mu);
  const std::vector<absl::Time>& t = h.state->attempt_times;
  ASSERT_EQ(t.size(), 5u);
  // Nominal waits 50, 100, 200, 200 ms, each times [0.8, 1.2) and at most 200 ms.
  EXPECT_GE(t[1] - t[0], absl::Milliseconds(40));
  EXPECT_GE(t[2] - t[1], absl::Milliseconds(80));
  EXPECT_GE(t[3] - t[2], absl::Milliseconds(160));
  EXPECT_GE(t[4] - t[3], absl::Milliseconds(160));
  EXPECT_LT(t[4] - t[0], absl::Seconds(2));
}

TEST(ProfileExporterTest, HonoursTheDelayTheReceiverAsksFor) {
  Harness h;  // backoff 10-40 ms
  h.state->script = {Retryable(absl::Milliseconds(400))};
  h.exporter->Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return h.Stats().intervals_sent == 1; }));
  std::lock_guard lock(h.state->mu);
  ASSERT_EQ(h.state->attempt_times.size(), 2u);
  EXPECT_GE(h.state->attempt_times[1] - h.state->attempt_times[0], absl::Milliseconds(400));
}

TEST(ProfileExporterTest, CapsTheDelayTheReceiverAsksFor) {
  ExporterLimits limits = FastLimits();
  limits.max_server_delay = absl::Milliseconds(100);
  Harness h(limits);
  h.state->script = {Retryable(absl::Hours(1))};
  h.exporter->Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return h.Stats().intervals_sent == 1; }, absl::Seconds(5)));
}

TEST(ProfileExporterTest, NonRetryableFailureDropsOnlyThatInterval) {
  Harness h;
  h.state->script = {Failed(), Failed()};
  for (int id = 0; id < 4; ++id) h.exporter->Enqueue(MakeTestRequest(id));
  ASSERT_TRUE(WaitFor([&] { return h.Stats().intervals_sent == 2; }));
  EXPECT_THAT(h.state->Attempts(), ElementsAre(0, 1, 2, 3));
  ExporterStats stats = h.Stats();
  EXPECT_EQ(stats.failed, 2u);
  EXPECT_EQ(stats.retries, 0u);
  ExpectAccounted(stats, 4);
}

TEST(ProfileExporterTest, CountsPartialSuccess) {
  Harness h;
  h.state->script = {Delivered(3, "3 profiles had no samples"), Delivered(0, "warning only")};
  for (int id = 0; id < 3; ++id) h.exporter->Enqueue(MakeTestRequest(id));
  ASSERT_TRUE(WaitFor([&] { return h.Stats().intervals_sent == 3; }));
  ExporterStats stats = h.Stats();
  EXPECT_EQ(stats.partial_successes, 2u);
  EXPECT_EQ(stats.rejected_profiles, 3u);
}

TEST(ProfileExporterTest, ShutdownDrainsTheQueue) {
  Harness h;
  h.state->script = {Retryable(), Retryable()};
  for (int id = 0; id < 5; ++id) h.exporter->Enqueue(MakeTestRequest(id));
  h.exporter->Shutdown(absl::Seconds(10));
  ExporterStats stats = h.Stats();
  EXPECT_EQ(stats.intervals_sent, 5u);
  EXPECT_EQ(stats.dropped_at_shutdown, 0u);
  EXPECT_THAT(h.state->Attempts(), ElementsAre(0, 0, 0, 1, 2, 3, 4));
  // Closed: later intervals are counted, not sent.
  h.exporter->Enqueue(MakeTestRequest(5));
  EXPECT_EQ(h.Stats().dropped_at_shutdown, 1u);
  ExpectAccounted(h.Stats(), 6);
}

TEST(ProfileExporterTest, ShutdownDeadlineCancelsTheRequestInFlight) {
  Harness h;
  h.state->hold = true;
  for (int id = 0; id < 3; ++id) h.exporter->Enqueue(MakeTestRequest(id));
  ASSERT_TRUE(WaitFor([&] { return h.state->InSend(); }));
  absl::Time start = absl::Now();
  h.exporter->Shutdown(absl::Milliseconds(100));
  absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(100));
  EXPECT_LT(took, absl::Seconds(2));
  ExporterStats stats = h.Stats();
  EXPECT_EQ(stats.intervals_sent, 0u);
  EXPECT_EQ(stats.dropped_at_shutdown, 3u);
  EXPECT_EQ(stats.queued_intervals, 0u);
  EXPECT_EQ(stats.retries, 0u);  // the cancelled attempt is not a retry
}

// Nothing can be sent before the deadline when the receiver asked for a longer wait: Shutdown
// returns at once instead of sleeping until its deadline.
TEST(ProfileExporterTest, ShutdownDoesNotWaitForARetryPastItsDeadline) {
  Harness h;
  h.state->script = {Retryable(absl::Minutes(1))};
  h.exporter->Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return h.Stats().retries == 1; }));
  absl::Time start = absl::Now();
  h.exporter->Shutdown(absl::Seconds(20));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(h.Stats().dropped_at_shutdown, 1u);
}

TEST(ProfileExporterTest, DestructorStopsWithoutWaiting) {
  auto state = std::make_shared<TransportState>();
  state->hold = true;
  {
    auto exporter = ProfileExporter::CreateWithTransport(std::make_unique<ScriptedTransport>(state),
                                                         FastLimits());
    exporter->Enqueue(MakeTestRequest(0));
    ASSERT_TRUE(WaitFor([&] { return state->InSend(); }));
  }
  std::lock_guard lock(state->mu);
  EXPECT_TRUE(state->cancelled);
}

TEST(ProfileExporterTest, ManyProducersKeepEachOnesOrder) {
  Harness h;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) h.exporter->Enqueue(MakeTestRequest(t * 1000 + i));
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_TRUE(WaitFor([&] { return h.Stats().intervals_sent == kThreads * kPerThread; }));
  std::vector<int> attempts = h.state->Attempts();
  for (int t = 0; t < kThreads; ++t) {
    std::vector<int> mine;
    for (int id : attempts) {
      if (id / 1000 == t) mine.push_back(id % 1000);
    }
    std::vector<int> expected(kPerThread);
    for (int i = 0; i < kPerThread; ++i) expected[i] = i;
    EXPECT_THAT(mine, ElementsAreArray(expected));
  }
}

}  // namespace
}  // namespace ember
