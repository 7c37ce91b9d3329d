// DebugFileFetcher's policy without a network: a transport standing in for the servers answers
// each build id as a test tells it (a file, garbage, not found, an error, held until released),
// and a clock the test moves stands in for time.
#include "debuginfod/debug_file_fetcher.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "elf_variants.h"

namespace ember {
namespace {

using std::chrono::seconds;

// Polls `done` every few ms for at most 10 s.
bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return done();
}

// What the stand-in servers answer, shared by every worker's transport.
struct FakeServers {
  struct Answer {
    FetchResult result = FetchResult::kNotFound;
    std::string bytes;  // for kOk: the file served
    bool too_big = false;
  };
  std::mutex mu;
  std::condition_variable changed;
  std::map<std::string, Answer> answers;
  std::map<std::string, int> calls;
  bool held = false;  // fetches wait until released
  int running = 0;
  int peak = 0;
  std::string staging;  // where downloads land, as libdebuginfod's cache

  int Calls(const std::string& id) {
    std::lock_guard lock(mu);
    return calls[id];
  }
  int Running() {
    std::lock_guard lock(mu);
    return running;
  }
  void Release() {
    {
      std::lock_guard lock(mu);
      held = false;
    }
    changed.notify_all();
  }
};

class FakeTransport : public DebuginfodTransport {
 public:
  explicit FakeTransport(FakeServers* servers) : servers_(servers) {}
  Download Fetch(const std::string& build_id, const std::atomic<bool>& cancel) override {
    FakeServers::Answer answer;
    {
      std::unique_lock lock(servers_->mu);
      ++servers_->calls[build_id];
      servers_->peak = std::max(servers_->peak, ++servers_->running);
      // Cancelling notifies nothing: look at it every few ms, for 20 s at most.
      const auto deadline = std::chrono::steady_clock::now() + seconds(20);
      while (servers_->held && !cancel.load() && std::chrono::steady_clock::now() < deadline) {
        servers_->changed.wait_for(lock, std::chrono::milliseconds(5));
      }
      --servers_->running;
      answer = servers_->answers[build_id];
    }
    Download download;
    download.result = answer.result;
    download.too_big = answer.too_big;
    if (answer.result == FetchResult::kOk) {
      const std::string dir = servers_->staging + "/" + build_id;
      std::filesystem::create_directories(dir);
      download.path = dir + "/debuginfo";
      WriteBytes(download.path, answer.bytes);
    }
    return download;
  }

 private:
  FakeServers* servers_;
};

class DebugFileFetcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(variants_.ok()) << "the fixture program has no build id";
    char dir[] = "/tmp/ember_fetcher_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    root_ = dir;
    cache_dir_ = root_ + "/cache";
    servers_.staging = cache_dir_ + "/client";
  }
  void TearDown() override {
    fetcher_.reset();
    std::filesystem::remove_all(root_);
  }

  void Make(const std::function<void(DebugFileFetcherOptions&)>& configure = nullptr) {
    DebugFileFetcherOptions options;
    options.cache_dir = cache_dir_;
    if (configure) configure(options);
    auto fetcher = DebugFileFetcher::Create(
        options, [this] { return std::make_unique<FakeTransport>(&servers_); },
        [this] {
          return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(now_ns_.load()));
        });
    ASSERT_TRUE(fetcher.ok()) << fetcher.status();
    fetcher_ = std::move(fetcher).value();
    fetcher_->Start();
  }

  void Serve(int variant) {
    std::lock_guard lock(servers_.mu);
    servers_.answers[variants_.BuildId(variant)] = {FetchResult::kOk, variants_.Bytes(variant)};
  }
  void Answer(const std::string& id, FetchResult result, std::string bytes = "",
              bool too_big = false) {
    std::lock_guard lock(servers_.mu);
    servers_.answers[id] = {result, std::move(bytes), too_big};
  }
  uint64_t Results(FetchResult result) {
    return fetcher_->stats().results[static_cast<size_t>(result)];
  }
  uint64_t Refusals(FetchRefusal refusal) {
    return fetcher_->stats().refusals[static_cast<size_t>(refusal)];
  }
  // Asks for `id` and waits until its fetch has ended.
  void FetchAndWait(const std::string& id) {
    const DebugFileFetcherStats before = fetcher_->stats();
    uint64_t done_before = 0;
    for (uint64_t n : before.results) done_before += n;
    EXPECT_FALSE(fetcher_->Find(id).has_value());
    EXPECT_TRUE(Eventually([&] {
      uint64_t done = 0;
      for (uint64_t n : fetcher_->stats().results) done += n;
      return done > done_before;
    })) << "no fetch of "
        << id << " ended";
  }
  void Advance(std::chrono::seconds by) {
    now_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(by).count();
  }

  ElfVariants variants_;
  FakeServers servers_;
  std::string root_;
  std::string cache_dir_;
  std::atomic<int64_t> now_ns_{int64_t{3600} * 1'000'000'000};
  std::unique_ptr<DebugFileFetcher> fetcher_;
};

TEST_F(DebugFileFetcherTest, AFetchedFileIsCheckedKeptAndAnnounced) {
  Make();
  const std::string id = variants_.BuildId(0);
  Serve(0);
  FetchAndWait(id);
  EXPECT_EQ(Results(FetchResult::kOk), 1u);
  ASSERT_TRUE(fetcher_->HasArrived());
  EXPECT_EQ(fetcher_->TakeArrived(), std::vector<std::string>{id});
  EXPECT_FALSE(fetcher_->HasArrived());
  std::optional<std::string> path = fetcher_->Find(id);
  ASSERT_TRUE(path.has_value());
  EXPECT_EQ(*path, cache_dir_ + "/" + id + ".debug");
  EXPECT_EQ(ReadBytes(*path), variants_.Bytes(0));
  EXPECT_EQ(CheckDebugFile(*path, id), DebugFileCheck::kOk);
  EXPECT_EQ(fetcher_->stats().cache_bytes, variants_.size());
  // Served from the cache from now on: the servers are not asked again.
  EXPECT_TRUE(fetcher_->Find(id).has_value());
  EXPECT_EQ(servers_.Calls(id), 1);
  // The transport's per-file directory was emptied by the move and is gone.
  EXPECT_FALSE(std::filesystem::exists(servers_.staging + "/" + id));
}

TEST_F(DebugFileFetcherTest, AFileDeletedFromTheCacheByAnotherIsFetchedAgain) {
  Make();
  const std::string id = variants_.BuildId(0);
  Serve(0);
  FetchAndWait(id);
  fetcher_->TakeArrived();
  std::optional<std::string> path = fetcher_->Find(id);
  ASSERT_TRUE(path.has_value());
  std::filesystem::remove(*path);  // another agent sharing the directory, or a cleaner
  // Not handed out again: asked for, fetched and announced once more.
  FetchAndWait(id);
  EXPECT_EQ(servers_.Calls(id), 2);
  EXPECT_EQ(fetcher_->TakeArrived(), std::vector<std::string>{id});
  path = fetcher_->Find(id);
  ASSERT_TRUE(path.has_value());
  EXPECT_EQ(ReadBytes(*path), variants_.Bytes(0));
  EXPECT_EQ(fetcher_->stats().cache_bytes, variants_.size());
}

TEST_F(DebugFileFetcherTest, ABuildIdTheServersLackIsNotAskedAgainUntilItsRetryTime) {
  Make([](DebugFileFetcherOptions& o) {
    o.not_found_retry = seconds(600);
    o.error_retry = seconds(60);
  });
  const std::string missing = variants_.BuildId(1);
  const std::string failing = variants_.BuildId(2);
  Answer(missing, FetchResult::kNotFound);
  Answer(failing, FetchResult::kError);
  FetchAndWait(missing);
  FetchAndWait(failing);
  EXPECT_EQ(Results(FetchResult::kNotFound), 1u);
  EXPECT_EQ(Results(FetchResult::kError), 1u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_FALSE(fetcher_->Find(missing).has_value());
    EXPECT_FALSE(fetcher_->Find(failing).has_value());
  }
  Advance(seconds(59));
  EXPECT_FALSE(fetcher_->Find(failing).has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(servers_.Calls(missing), 1);
  EXPECT_EQ(servers_.Calls(failing), 1);
  // A failure is asked about again sooner than a miss.
  Advance(seconds(2));
  FetchAndWait(failing);
  EXPECT_EQ(servers_.Calls(failing), 2);
  EXPECT_FALSE(fetcher_->Find(missing).has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(servers_.Calls(missing), 1);
  Advance(seconds(600));
  Serve(1);  // the server has it by now
  FetchAndWait(missing);
  EXPECT_EQ(servers_.Calls(missing), 2);
  EXPECT_TRUE(fetcher_->Find(missing).has_value());
}

TEST_F(DebugFileFetcherTest, NoMoreFetchesRunAtOnceThanTheCapAndTheQueueIsBounded) {
  servers_.held = true;
  Make([](DebugFileFetcherOptions& o) {
    o.max_concurrent = 2;
    o.max_queued = 4;
  });
  std::vector<std::string> ids;
  for (int n = 1; n <= 7; ++n) {
    ids.push_back(variants_.BuildId(n));
    Serve(n);
  }
  for (const std::string& id : ids) EXPECT_FALSE(fetcher_->Find(id).has_value());
  // Two run, four wait, the seventh was not queued (asked again later); asking again while a
  // build id is queued or running does not queue it twice.
  ASSERT_TRUE(Eventually([&] { return servers_.Running() == 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(servers_.Running(), 2);
  for (const std::string& id : ids) fetcher_->Find(id);
  EXPECT_GE(fetcher_->stats().queue_full, 1u);
  servers_.Release();
  ASSERT_TRUE(Eventually([&] { return Results(FetchResult::kOk) == 6; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(Results(FetchResult::kOk), 6u);
  EXPECT_EQ(servers_.peak, 2);
  EXPECT_EQ(fetcher_->stats().in_flight_peak, 2u);
  for (int n = 0; n < 6; ++n) EXPECT_EQ(servers_.Calls(ids[n]), 1) << n;
  // The one left out is fetched when asked again.
  FetchAndWait(ids[6]);
  EXPECT_TRUE(fetcher_->Find(ids[6]).has_value());
}

TEST_F(DebugFileFetcherTest,
       TheLeastRecentlyUsedFilesGoWhenTheCacheIsFullAndTheRestOutlivesTheRun) {
  const size_t file = variants_.size();
  Make([file](DebugFileFetcherOptions& o) {
    o.max_cache_bytes = 2 * file + file / 2;
    o.max_file_bytes = 2 * file;
  });
  for (int n = 1; n <= 3; ++n) Serve(n);
  FetchAndWait(variants_.BuildId(1));
  FetchAndWait(variants_.BuildId(2));
  ASSERT_TRUE(fetcher_->Find(variants_.BuildId(1)).has_value());  // 1 used after 2
  FetchAndWait(variants_.BuildId(3));
  const DebugFileFetcherStats stats = fetcher_->stats();
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_EQ(stats.cache_files, 2u);
  EXPECT_EQ(stats.cache_bytes, 2 * file);
  EXPECT_FALSE(std::filesystem::exists(cache_dir_ + "/" + variants_.BuildId(2) + ".debug"));
  EXPECT_TRUE(std::filesystem::exists(cache_dir_ + "/" + variants_.BuildId(1) + ".debug"));
  EXPECT_TRUE(fetcher_->Find(variants_.BuildId(3)).has_value());

  // A new run finds what the last one kept, and keeps within a smaller cap from the start.
  fetcher_.reset();
  Make([file](DebugFileFetcherOptions& o) {
    o.max_cache_bytes = file + file / 2;
    o.max_file_bytes = 2 * file;
  });
  EXPECT_EQ(fetcher_->stats().cache_files, 1u);
  EXPECT_EQ(fetcher_->stats().cache_bytes, file);
  const bool kept_1 = fetcher_->Find(variants_.BuildId(1)).has_value();
  const bool kept_3 = fetcher_->Find(variants_.BuildId(3)).has_value();
  EXPECT_NE(kept_1, kept_3);
  // The one that went is fetched again when asked for; the one kept is not.
  const std::string kept = variants_.BuildId(kept_1 ? 1 : 3);
  const std::string gone = variants_.BuildId(kept_1 ? 3 : 1);
  EXPECT_TRUE(Eventually([&] { return Results(FetchResult::kOk) == 1; }));
  EXPECT_EQ(servers_.Calls(gone), 2);
  EXPECT_EQ(servers_.Calls(kept), 1);
}

TEST_F(DebugFileFetcherTest, AnswersThatAreNotTheDebugFileAreRefusedCountedAndNotKept) {
  const size_t file = variants_.size();
  Make([file](DebugFileFetcherOptions& o) { o.max_file_bytes = file + 1024; });
  const std::string garbage = variants_.BuildId(1);
  const std::string wrong = variants_.BuildId(2);
  const std::string huge = variants_.BuildId(3);
  const std::string cut_off = variants_.BuildId(4);
  Answer(garbage, FetchResult::kOk, "<html>502 Bad Gateway</html>");
  Answer(wrong, FetchResult::kOk, variants_.Bytes(5));  // a real debug file of another build
  Answer(huge, FetchResult::kOk, variants_.Bytes(3) + std::string(2048, '\0'));
  Answer(cut_off, FetchResult::kRefused, "", /*too_big=*/true);
  for (const std::string& id : {garbage, wrong, huge, cut_off}) FetchAndWait(id);
  EXPECT_EQ(Results(FetchResult::kRefused), 4u);
  EXPECT_EQ(Results(FetchResult::kOk), 0u);
  EXPECT_EQ(Refusals(FetchRefusal::kNotElf), 1u);
  EXPECT_EQ(Refusals(FetchRefusal::kBuildIdMismatch), 1u);
  EXPECT_EQ(Refusals(FetchRefusal::kTooBig), 2u);
  EXPECT_FALSE(fetcher_->HasArrived());
  EXPECT_EQ(fetcher_->stats().cache_bytes, 0u);
  for (const auto& entry : std::filesystem::directory_iterator(cache_dir_)) {
    EXPECT_TRUE(entry.is_directory()) << entry.path() << " was kept";
  }
  // A refused answer counts as a miss: not asked again at once.
  for (const std::string& id : {garbage, wrong, huge, cut_off}) {
    EXPECT_FALSE(fetcher_->Find(id).has_value());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(servers_.Calls(garbage), 1);
  // Not build ids: never asked.
  for (const char* bad : {"", "abc", "../../etc/passwd", "ABCDEF", "0g"}) {
    EXPECT_FALSE(fetcher_->Find(bad).has_value());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::lock_guard lock(servers_.mu);
  EXPECT_EQ(servers_.calls.size(), 4u);
}

TEST_F(DebugFileFetcherTest, StoppingCancelsAFetchUnderWay) {
  servers_.held = true;
  Make([](DebugFileFetcherOptions& o) { o.max_concurrent = 1; });
  Serve(1);
  fetcher_->Find(variants_.BuildId(1));
  ASSERT_TRUE(Eventually([&] { return servers_.Running() == 1; }));
  const auto start = std::chrono::steady_clock::now();
  fetcher_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(5));
}

}  // namespace
}  // namespace ember
