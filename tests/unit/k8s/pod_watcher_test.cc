// The pod watcher against the in-test API server over HTTPS on loopback: list pages, watch
// events, bookmarks, 410 in both forms, clean ends, dropped connections, 401/403 with a rotating
// token, malformed lines and bodies, and a prompt Stop; and the configuration from the
// environment.
#include "k8s/pod_watcher.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/kube_api_config.h"
#include "k8s/pod_index.h"
#include "support/kube_api_server.h"
#include "unit/otlp/log_capture.h"
#include "unit/otlp/wait_for.h"

namespace ember {
namespace {

using ::ember::testing::KubeApiRequest;
using ::ember::testing::KubeApiServer;
using ::ember::testing::KubeRequestKind;
using ::ember::testing::TestContainerId;
using ::ember::testing::TestPod;
using ::ember::testing::WaitFor;
using ::testing::HasSubstr;

constexpr char kNode[] = "node-a";

size_t ErrorCount(const PodWatcherStats& stats, KubeWatchError kind) {
  return stats.errors[static_cast<size_t>(kind)];
}

class PodWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = KubeApiServer::Start();
    ASSERT_NE(server_, nullptr);
    std::string pattern =
        (std::filesystem::temp_directory_path() / "ember-watch-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    WriteToken("token-1");
    config_.server = server_->url();
    config_.ca_file = server_->ca_file();
    config_.token_file = dir_ + "/token";
    config_.node_name = kNode;
    config_.connect_timeout = absl::Seconds(2);
    config_.request_timeout = absl::Seconds(5);
    config_.backoff_min = absl::Milliseconds(10);
    config_.backoff_max = absl::Milliseconds(50);
  }

  void TearDown() override {
    if (watcher_) watcher_->Stop();
    watcher_.reset();
    server_.reset();
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }

  void WriteToken(const std::string& token) {
    // Renamed into place, as the kubelet swaps the projected volume's files.
    std::ofstream(dir_ + "/token.new") << token << "\n";
    std::filesystem::rename(dir_ + "/token.new", dir_ + "/token");
  }

  void StartWatcher() {
    absl::StatusOr<std::unique_ptr<PodWatcher>> watcher = PodWatcher::Create(config_, &index_);
    ASSERT_TRUE(watcher.ok()) << watcher.status();
    watcher_ = *std::move(watcher);
    watcher_->Start();
  }

  // Starts the watcher and waits for its first list and watch.
  void StartAndSync() {
    ASSERT_NO_FATAL_FAILURE(StartWatcher());
    ASSERT_TRUE(WaitFor([&] { return watcher_->synced(); })) << watcher_->stats().last_error;
    ASSERT_TRUE(server_->WaitForRequests(KubeRequestKind::kWatch, 1));
  }

  bool HasPod(const std::string& uid) const {
    return index_.Lookup(TestContainerId(uid)).has_value();
  }

  std::vector<KubeApiRequest> Requests(KubeRequestKind kind) const {
    std::vector<KubeApiRequest> matching;
    for (const KubeApiRequest& request : server_->requests()) {
      if (request.watch == (kind == KubeRequestKind::kWatch)) matching.push_back(request);
    }
    return matching;
  }

  std::unique_ptr<KubeApiServer> server_;
  std::string dir_;
  KubeApiConfig config_;
  PodIndex index_;
  std::unique_ptr<PodWatcher> watcher_;
};

TEST_F(PodWatcherTest, ListsThisNodesPodsPageByPageThenWatchesFromTheListVersion) {
  for (int i = 0; i < 5; ++i) server_->AddPod(TestPod("uid-a" + std::to_string(i), "a", kNode));
  server_->AddPod(TestPod("uid-b0", "b", "node-b"));
  server_->AddPod(TestPod("uid-b1", "b", "node-b"));
  server_->set_page_size(2);
  std::string list_version = server_->resource_version();
  ASSERT_NO_FATAL_FAILURE(StartAndSync());

  for (int i = 0; i < 5; ++i) EXPECT_TRUE(HasPod("uid-a" + std::to_string(i))) << i;
  EXPECT_FALSE(HasPod("uid-b0"));
  EXPECT_EQ(index_.stats().pods, 5u);
  std::optional<ContainerMetadata> metadata = index_.Lookup(TestContainerId("uid-a3"));
  ASSERT_TRUE(metadata.has_value());
  EXPECT_EQ(metadata->pod_name, "a");
  EXPECT_EQ(metadata->namespace_name, "default");
  EXPECT_EQ(metadata->container_name, "app");

  std::vector<KubeApiRequest> lists = Requests(KubeRequestKind::kList);
  ASSERT_EQ(lists.size(), 3u);  // 2 + 2 + 1
  for (const KubeApiRequest& list : lists) {
    EXPECT_EQ(list.path, "/api/v1/pods");
    EXPECT_EQ(list.Query("fieldSelector"), "spec.nodeName=node-a");
    EXPECT_EQ(list.Query("limit"), "500");
    EXPECT_EQ(list.authorization, "Bearer token-1");
    EXPECT_EQ(list.status, 200);
  }
  EXPECT_EQ(lists[0].Query("continue"), "");
  EXPECT_NE(lists[1].Query("continue"), "");
  EXPECT_NE(lists[2].Query("continue"), lists[1].Query("continue"));

  KubeApiRequest watch = Requests(KubeRequestKind::kWatch).at(0);
  EXPECT_EQ(watch.Query("resourceVersion"), list_version);
  EXPECT_EQ(watch.Query("fieldSelector"), "spec.nodeName=node-a");
  EXPECT_EQ(watch.Query("allowWatchBookmarks"), "true");
  int timeout = std::stoi(watch.Query("timeoutSeconds"));
  EXPECT_GE(timeout, 300);
  EXPECT_LE(timeout, 375);

  PodWatcherStats stats = watcher_->stats();
  EXPECT_TRUE(stats.synced);
  EXPECT_EQ(stats.lists, 1u);
  EXPECT_EQ(stats.relists, 0u);
  EXPECT_EQ(stats.resource_version, list_version);
  EXPECT_TRUE(WaitFor([&] { return watcher_->stats().watching; }));
}

TEST_F(PodWatcherTest, AppliesAddedModifiedAndDeletedEvents) {
  server_->AddPod(TestPod("uid-1", "one", kNode));
  ASSERT_NO_FATAL_FAILURE(StartAndSync());

  server_->AddPod(TestPod("uid-2", "two", kNode));
  ASSERT_TRUE(WaitFor([&] { return HasPod("uid-2"); }));

  nlohmann::json relabelled = TestPod("uid-2", "two", kNode);
  relabelled["metadata"]["labels"] = {{"app.kubernetes.io/name", "checkout"}};
  std::string modified_version = server_->UpdatePod(relabelled);
  ASSERT_TRUE(WaitFor([&] {
    std::optional<ContainerMetadata> metadata = index_.Lookup(TestContainerId("uid-2"));
    return metadata && metadata->service_name == "checkout";
  }));

  std::string deleted_version = server_->DeletePod("uid-1");
  ASSERT_TRUE(WaitFor([&] { return !HasPod("uid-1"); }));
  EXPECT_TRUE(HasPod("uid-2"));

  PodWatcherStats stats = watcher_->stats();
  EXPECT_EQ(stats.added, 1u);
  EXPECT_EQ(stats.modified, 1u);
  EXPECT_EQ(stats.deleted, 1u);
  EXPECT_EQ(stats.resource_version, deleted_version);
  EXPECT_EQ(stats.watches, 1u);
  EXPECT_EQ(stats.lists, 1u);
}

TEST_F(PodWatcherTest, BookmarkAdvancesTheVersionTheNextWatchStartsFrom) {
  ASSERT_NO_FATAL_FAILURE(StartAndSync());
  std::string bookmark = server_->SendBookmark();
  ASSERT_TRUE(WaitFor([&] { return watcher_->stats().bookmarks == 1; }));
  EXPECT_EQ(watcher_->stats().resource_version, bookmark);
  EXPECT_EQ(index_.stats().pods, 0u);

  server_->EndWatches();
  ASSERT_TRUE(server_->WaitForRequests(KubeRequestKind::kWatch, 2));
  EXPECT_EQ(Requests(KubeRequestKind::kWatch).at(1).Query("resourceVersion"), bookmark);
  EXPECT_EQ(server_->CountRequests(KubeRequestKind::kList), 1u);
}

TEST_F(PodWatcherTest, CleanEndOfTheStreamRewatchesFromTheLastVersionWithoutRelisting) {
  server_->AddPod(TestPod("uid-1", "one", kNode));
  ASSERT_NO_FATAL_FAILURE(StartAndSync());
  std::string version = server_->AddPod(TestPod("uid-2", "two", kNode));
  ASSERT_TRUE(WaitFor([&] { return HasPod("uid-2"); }));

  server_->EndWatches();
  ASSERT_TRUE(server_->WaitForRequests(KubeRequestKind::kWatch, 2));
  EXPECT_EQ(Requests(KubeRequestKind::kWatch).at(1).Query("resourceVersion"), version);
  ASSERT_TRUE(WaitFor([&] { return watcher_->stats().watch_restarts == 1; }));

  // The new stream works: events after the re-watch arrive.
  server_->AddPod(TestPod("uid-3", "three", kNode));
  ASSERT_TRUE(WaitFor([&] { return HasPod("uid-3"); }));
  EXPECT_EQ(server_->CountRequests(KubeRequestKind::kList), 1u);
  PodWatcherStats stats = watcher_->stats();
  EXPECT_EQ(stats.relists, 0u);
  EXPECT_EQ(stats.lists, 1u);
  EXPECT_EQ(std::accumulate(stats.errors.begin(), stats.errors.end(), uint64_t{0}), 0u);
}

TEST_F(PodWatcherTest, ExpiredErrorEventRelists) {
  server_->AddPod(TestPod("uid-1", "one", kNode));
  ASSERT_NO_FATAL_FAILURE(StartAndSync());

  server_->SendExpired();
  ASSERT_TRUE(server_->WaitForRequests(KubeRequestKind::kList, 2));
  ASSERT_TRUE(server_->WaitForRequests(KubeRequestKind::kWatch, 2));
  ASSERT_TRUE(WaitFor([&] { return watcher_->stats().relists == 1; }));
  PodWatcherStats stats = watcher_->stats();
  EXPECT_EQ(stats.expired, 1u);
  EXPECT_EQ(stats.error_events, 1u);
  EXPECT_EQ(stats.lists, 2u);
  EXPECT_EQ(Requests(KubeRequestKind::kWatch).at(1).Query("resourceVersion"),
            server_->resource_version());
  EXPECT_TRUE(HasPod("uid-1"));
  EXPECT_EQ(index_.stats().replaced, 2u);
}

TEST_F(PodWatcherTest, HttpGoneOnTheWatchRelists) {
  ASSERT_NO_FATAL_FAILURE(StartAndSync());
  server_->FailNext(KubeRequestKind::kWatch, 410);
  server_->AddPod(TestPod("uid-1", "one", kNode));
  ASSERT_TRUE(WaitFor([&] { return HasPod("uid-1"); }));
  server_->EndWatches();  // the re-watch gets 410

  ASSERT_TRUE(server_->WaitForRequests(KubeRequestKind::kList, 2));
  ASSERT_TRUE(server_->WaitForRequests(KubeRequestKind::kWatch, 3));
  EXPECT_EQ(Requests(KubeRequestKind::kWatch).at(1).status, 410);
  PodWatcherStats stats = watcher_->stats();
  EXPECT_EQ(stats.expired, 1u);
  EXPECT_EQ(stats.relists, 1u);
  EXPECT_TRUE(HasPod("uid-1"));
}

TEST_F(PodWatcherTest, DroppedConnectionIsRetriedFromTheLastVersionKeepingThePods) {
  server_->AddPod(TestPod("uid-1", "one", kNode));
  ASSERT_NO_FATAL_FAILURE(StartAndSync());
  std::string version = server_->AddPod(TestPod("uid-2", "two", kNode));
  ASSERT_TRUE(WaitFor([&] { return HasPod("uid-2"); }));

  // Refuse the reconnection a few times, so the watcher is seen holding its pods meanwhile.
  server_->FailNext(KubeRequestKind::kWatch, 503, 3);
  server_->DropWatches();
  ASSERT_TRUE(WaitFor([&] {
    return ErrorCount(watcher_->stats(), KubeWatchError::kTransport) >= 1 &&
           ErrorCount(watcher_->stats(), KubeWatchError::kHttp) >= 1;
  }));
  EXPECT_TRUE(HasPod("uid-1"));
  EXPECT_TRUE(HasPod("uid-2"));
  EXPECT_TRUE(watcher_->synced());
  EXPECT_THAT(watcher_->stats().last_error, HasSubstr("WATCH"));

  // Changed while the watcher was away: the server replays it from the version asked for.
  server_->DeletePod("uid-1");
  ASSERT_TRUE(server_->WaitForRequests(KubeRequestKind::kWatch, 5));
  ASSERT_TRUE(WaitFor([&] { return !HasPod("uid-1"); }));
  std::vector<KubeApiRequest> watches = Requests(KubeRequestKind::kWatch);
  for (size_t i = 1; i < watches.size(); ++i) {
    EXPECT_EQ(watches[i].Query("resourceVersion"), version) << i;
  }
  EXPECT_EQ(server_->CountRequests(KubeRequestKind::kList), 1u);
  EXPECT_EQ(watcher_->stats().relists, 0u);
}

TEST_F(PodWatcherTest, UnauthorizedIsRetriedKeepingThePodsAndARotatedTokenIsSent) {
  server_->AddPod(TestPod("uid-1", "one", kNode));
  server_->set_required_token("token-1");
  ASSERT_NO_FATAL_FAILURE(StartAndSync());

  // The token rotates on the server's side first: the watcher's requests fail until the file
  // catches up.
  server_->set_required_token("token-2");
  server_->EndWatches();
  ASSERT_TRUE(
      WaitFor([&] { return ErrorCount(watcher_->stats(), KubeWatchError::kUnauthorized) >= 2; }));
  EXPECT_TRUE(HasPod("uid-1"));
  EXPECT_THAT(watcher_->stats().last_error, HasSubstr("HTTP 401"));

  WriteToken("token-2");
  size_t before = server_->requests().size();
  ASSERT_TRUE(WaitFor([&] { return watcher_->stats().watching; }));
  std::vector<KubeApiRequest> requests = server_->requests();
  ASSERT_GT(requests.size(), before);
  EXPECT_EQ(requests.back().authorization, "Bearer token-2");
  EXPECT_EQ(requests.back().status, 200);
  server_->AddPod(TestPod("uid-2", "two", kNode));
  ASSERT_TRUE(WaitFor([&] { return HasPod("uid-2"); }));
  EXPECT_EQ(server_->CountRequests(KubeRequestKind::kList), 1u);
}

TEST_F(PodWatcherTest, MissingTokenFileIsRetriedWithoutSendingARequest) {
  server_->AddPod(TestPod("uid-1", "one", kNode));
  ASSERT_NO_FATAL_FAILURE(StartAndSync());
  std::filesystem::remove(dir_ + "/token");
  server_->EndWatches();
  ASSERT_TRUE(WaitFor([&] { return ErrorCount(watcher_->stats(), KubeWatchError::kToken) >= 2; }));
  EXPECT_EQ(server_->CountRequests(KubeRequestKind::kWatch), 1u);
  EXPECT_TRUE(HasPod("uid-1"));
  EXPECT_THAT(watcher_->stats().last_error, HasSubstr("token"));

  WriteToken("token-3");
  ASSERT_TRUE(server_->WaitForRequests(KubeRequestKind::kWatch, 2));
  EXPECT_EQ(Requests(KubeRequestKind::kWatch).at(1).authorization, "Bearer token-3");
}

TEST_F(PodWatcherTest, ForbiddenListIsRetriedWithBackoffAndLoggedOnce) {
  ember::testing::LogCapture log;
  server_->AddPod(TestPod("uid-1", "one", kNode));
  server_->FailNext(KubeRequestKind::kList, 403, 4);
  absl::Time start = absl::Now();
  ASSERT_NO_FATAL_FAILURE(StartAndSync());
  absl::Duration took = absl::Now() - start;

  PodWatcherStats stats = watcher_->stats();
  EXPECT_EQ(ErrorCount(stats, KubeWatchError::kUnauthorized), 4u);
  EXPECT_EQ(server_->CountRequests(KubeRequestKind::kList), 5u);
  EXPECT_TRUE(HasPod("uid-1"));
  // Four waits of at least half of 10, 20, 40, 50 ms.
  EXPECT_GE(took, absl::Milliseconds(60));
  int failures = 0;
  int recoveries = 0;
  for (const std::string& line : log.lines()) {
    if (absl::StrContains(line, "retrying with backoff")) ++failures;  // the warning, not debug
    if (absl::StrContains(line, "answers again")) ++recoveries;
  }
  EXPECT_EQ(failures, 1) << log.text();
  EXPECT_EQ(recoveries, 1) << log.text();
  EXPECT_THAT(log.text(), HasSubstr("HTTP 403: pods is forbidden"));
  EXPECT_THAT(log.text(), ::testing::Not(HasSubstr("token-1")));
}

TEST_F(PodWatcherTest, MalformedEventLinesAreSkippedAndCounted) {
  ASSERT_NO_FATAL_FAILURE(StartAndSync());
  server_->SendRaw("{this is not json");
  server_->SendRaw(R"({"type":"ADDED"})");
  server_->SendRaw(R"({"type":"SURPRISE","object":{}})");
  // An object ParsePod refuses (no uid) is skipped too, and counted apart.
  server_->SendRaw(R"({"type":"ADDED","object":{"metadata":{"name":"x","namespace":"y"}}})");
  server_->AddPod(TestPod("uid-1", "one", kNode));
  ASSERT_TRUE(WaitFor([&] { return HasPod("uid-1"); }));
  PodWatcherStats stats = watcher_->stats();
  EXPECT_EQ(stats.malformed_events, 3u);
  EXPECT_EQ(stats.rejected_pods, 1u);
  EXPECT_EQ(stats.watches, 1u);  // the stream stayed open
}

TEST_F(PodWatcherTest, EventSplitAcrossChunksAndALastLineWithoutNewlineAreApplied) {
  ASSERT_NO_FATAL_FAILURE(StartAndSync());
  nlohmann::json pod = TestPod("uid-1", "one", kNode);
  pod["metadata"]["resourceVersion"] = "2001";
  std::string line = KubeApiServer::EventLine("ADDED", pod);
  server_->SendRaw(line.substr(0, 40), /*newline=*/false);
  // Not an assertion: only makes the two halves likely to travel in two chunks.
  absl::SleepFor(absl::Milliseconds(20));
  server_->SendRaw(line.substr(40));
  ASSERT_TRUE(WaitFor([&] { return HasPod("uid-1"); }));

  // The server's last event before a clean end may lack its newline.
  pod = TestPod("uid-2", "two", kNode);
  pod["metadata"]["resourceVersion"] = "2002";
  server_->SendRaw(KubeApiServer::EventLine("ADDED", pod), /*newline=*/false);
  absl::SleepFor(absl::Milliseconds(20));
  server_->EndWatches();
  ASSERT_TRUE(server_->WaitForRequests(KubeRequestKind::kWatch, 2));
  EXPECT_TRUE(HasPod("uid-2"));
  EXPECT_EQ(Requests(KubeRequestKind::kWatch).at(1).Query("resourceVersion"), "2002");
  EXPECT_EQ(watcher_->stats().malformed_events, 0u);
}

TEST_F(PodWatcherTest, ErrorEventOtherThanGoneRewatchesAfterBackoffWithoutRelisting) {
  server_->AddPod(TestPod("uid-1", "one", kNode));
  ASSERT_NO_FATAL_FAILURE(StartAndSync());
  std::string version = server_->resource_version();
  server_->SendRaw(
      R"({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure",)"
      R"("message":"etcdserver: request timed out","reason":"InternalError","code":500}})");
  ASSERT_TRUE(server_->WaitForRequests(KubeRequestKind::kWatch, 2));
  EXPECT_EQ(Requests(KubeRequestKind::kWatch).at(1).Query("resourceVersion"), version);
  PodWatcherStats stats = watcher_->stats();
  EXPECT_EQ(ErrorCount(stats, KubeWatchError::kWatchError), 1u);
  EXPECT_EQ(stats.error_events, 1u);
  EXPECT_EQ(stats.expired, 0u);
  EXPECT_THAT(stats.last_error, HasSubstr("etcdserver: request timed out"));
  EXPECT_EQ(server_->CountRequests(KubeRequestKind::kList), 1u);
  EXPECT_TRUE(HasPod("uid-1"));
}

TEST_F(PodWatcherTest, OddlyTypedFieldsAreNoCrash) {
  ASSERT_NO_FATAL_FAILURE(StartAndSync());
  server_->SendRaw(R"({"type":"ADDED","object":{"metadata":{"uid":7,"resourceVersion":8}}})");
  server_->SendRaw(R"({"type":"DELETED","object":{"metadata":"gone"}})");
  server_->SendRaw(R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":9}}})");
  server_->SendRaw(R"({"type":7,"object":[]})");
  server_->SendRaw(R"({"type":"ERROR","object":{"code":"410","reason":5,"message":[]}})");
  ASSERT_TRUE(server_->WaitForRequests(KubeRequestKind::kWatch, 2));
  PodWatcherStats stats = watcher_->stats();
  EXPECT_EQ(stats.rejected_pods, 2u);     // the ADDED and the DELETED
  EXPECT_EQ(stats.malformed_events, 2u);  // the BOOKMARK without a version, the numeric type
  EXPECT_EQ(ErrorCount(stats, KubeWatchError::kWatchError), 1u);
  server_->AddPod(TestPod("uid-1", "one", kNode));
  ASSERT_TRUE(WaitFor([&] { return HasPod("uid-1"); }));
}

TEST_F(PodWatcherTest, GarbageListBodyIsAnErrorAndTheListIsRetried) {
  server_->AddPod(TestPod("uid-1", "one", kNode));
  server_->FailNext(KubeRequestKind::kList, 200, 1, "<html>proxy error</html>");
  server_->FailNext(KubeRequestKind::kList, 200, 1, R"({"kind":"PodList","items":[]})");
  ASSERT_NO_FATAL_FAILURE(StartAndSync());
  PodWatcherStats stats = watcher_->stats();
  EXPECT_EQ(ErrorCount(stats, KubeWatchError::kBadList), 2u);
  EXPECT_EQ(server_->CountRequests(KubeRequestKind::kList), 3u);
  EXPECT_TRUE(HasPod("uid-1"));
}

TEST_F(PodWatcherTest, FailedRelistKeepsTheLastKnownPods) {
  server_->AddPod(TestPod("uid-1", "one", kNode));
  ASSERT_NO_FATAL_FAILURE(StartAndSync());
  server_->FailNext(KubeRequestKind::kList, 500, 3);
  server_->SendExpired();
  ASSERT_TRUE(WaitFor([&] { return ErrorCount(watcher_->stats(), KubeWatchError::kHttp) >= 2; }));
  EXPECT_TRUE(HasPod("uid-1"));
  ASSERT_TRUE(WaitFor([&] { return watcher_->stats().relists == 1; }));
  EXPECT_TRUE(HasPod("uid-1"));
}

TEST_F(PodWatcherTest, StopIsPromptMidStream) {
  ASSERT_NO_FATAL_FAILURE(StartAndSync());
  ASSERT_TRUE(WaitFor([&] { return watcher_->stats().watching; }));
  absl::Time start = absl::Now();
  watcher_->Stop();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  EXPECT_FALSE(watcher_->stats().watching);
}

TEST_F(PodWatcherTest, StopIsPromptMidBackoff) {
  config_.backoff_min = absl::Seconds(60);
  config_.backoff_max = absl::Seconds(60);
  server_->FailNext(KubeRequestKind::kList, 500);
  ASSERT_NO_FATAL_FAILURE(StartWatcher());
  ASSERT_TRUE(server_->WaitForRequests(KubeRequestKind::kList, 1));
  ASSERT_TRUE(WaitFor([&] { return ErrorCount(watcher_->stats(), KubeWatchError::kHttp) == 1; }));
  absl::Time start = absl::Now();
  watcher_->Stop();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  EXPECT_FALSE(watcher_->synced());
}

TEST_F(PodWatcherTest, UnreachableServerIsRetriedAndStopIsPrompt) {
  config_.server = server_->url();
  server_.reset();  // nothing listens there now
  ASSERT_NO_FATAL_FAILURE(StartWatcher());
  ASSERT_TRUE(
      WaitFor([&] { return ErrorCount(watcher_->stats(), KubeWatchError::kTransport) >= 3; }));
  EXPECT_FALSE(watcher_->synced());
  absl::Time start = absl::Now();
  watcher_->Stop();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
}

TEST_F(PodWatcherTest, ServerCertificateIsVerified) {
  config_.ca_file = "";  // the system roots do not know the test CA
  ASSERT_NO_FATAL_FAILURE(StartWatcher());
  ASSERT_TRUE(
      WaitFor([&] { return ErrorCount(watcher_->stats(), KubeWatchError::kTransport) >= 1; }));
  EXPECT_FALSE(watcher_->synced());
  EXPECT_EQ(server_->requests().size(), 0u);
}

TEST_F(PodWatcherTest, CreateRefusesUnreadableFiles) {
  config_.token_file = dir_ + "/missing-token";
  absl::StatusOr<std::unique_ptr<PodWatcher>> watcher = PodWatcher::Create(config_, &index_);
  ASSERT_FALSE(watcher.ok());
  EXPECT_THAT(watcher.status().message(), HasSubstr("missing-token"));

  config_.token_file = dir_ + "/token";
  config_.ca_file = dir_ + "/missing-ca.crt";
  watcher = PodWatcher::Create(config_, &index_);
  ASSERT_FALSE(watcher.ok());
  EXPECT_THAT(watcher.status().message(), HasSubstr("missing-ca.crt"));
}

// The environment of a pod, as a map.
struct FakeEnv {
  std::map<std::string, std::string> values;
  std::optional<std::string> operator()(const char* name) const {
    auto found = values.find(name);
    if (found == values.end()) return std::nullopt;
    return found->second;
  }
};

TEST(KubeApiConfigTest, InClusterFromTheServiceEnvironment) {
  FakeEnv env{{{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
               {"KUBERNETES_SERVICE_PORT", "443"},
               {"NODE_NAME", "worker-3"}}};
  absl::StatusOr<KubeApiConfig> config = InClusterConfig(env);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->node_name, "worker-3");
  EXPECT_EQ(config->token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token");
  EXPECT_EQ(config->ca_file, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt");
}

TEST(KubeApiConfigTest, Ipv6HostIsBracketed) {
  FakeEnv env{{{"KUBERNETES_SERVICE_HOST", "fd00:10:96::1"},
               {"KUBERNETES_SERVICE_PORT", "6443"},
               {"NODE_NAME", "worker-3"}}};
  absl::StatusOr<KubeApiConfig> config = InClusterConfig(env);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://[fd00:10:96::1]:6443");
}

TEST(KubeApiConfigTest, MissingPiecesAreNamed) {
  absl::StatusOr<KubeApiConfig> config = InClusterConfig(FakeEnv{{{"NODE_NAME", "n"}}});
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("KUBERNETES_SERVICE_HOST"));
  EXPECT_THAT(config.status().message(), HasSubstr("--kube-api-server"));

  config = InClusterConfig(FakeEnv{{{"KUBERNETES_SERVICE_HOST", "10.0.0.1"}, {"NODE_NAME", "n"}}});
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("KUBERNETES_SERVICE_PORT"));

  config = InClusterConfig(FakeEnv{{{"KUBERNETES_SERVICE_HOST", "10.0.0.1"},
                                    {"KUBERNETES_SERVICE_PORT", "https"},
                                    {"NODE_NAME", "n"}}});
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("'https'"));

  config = InClusterConfig(
      FakeEnv{{{"KUBERNETES_SERVICE_HOST", "10.0.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}}});
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("NODE_NAME"));
  EXPECT_THAT(config.status().message(), HasSubstr("spec.nodeName"));
}

TEST(KubeApiConfigTest, FlagsWinOverTheEnvironment) {
  KubeApiFlags flags{.server = "http://127.0.0.1:8001",
                     .token_file = "",
                     .ca_file = "/etc/ca.pem",
                     .node_name = "laptop"};
  absl::StatusOr<KubeApiConfig> config = ResolveKubeApiConfig(flags, FakeEnv{});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "http://127.0.0.1:8001");
  EXPECT_EQ(config->token_file, "");
  EXPECT_EQ(config->ca_file, "/etc/ca.pem");
  EXPECT_EQ(config->node_name, "laptop");

  flags.server = "10.0.0.1:443";
  config = ResolveKubeApiConfig(flags, FakeEnv{});
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("not an http(s) URL"));
}

TEST(KubeApiConfigTest, ValidationCatchesHandMadeMistakes) {
  KubeApiConfig config;
  config.server = "https://10.0.0.1";
  config.node_name = "n";
  EXPECT_TRUE(ValidateKubeApiConfig(config).ok());
  config.backoff_max = absl::Milliseconds(1);
  EXPECT_FALSE(ValidateKubeApiConfig(config).ok());
  config.backoff_max = absl::Seconds(30);
  config.list_page_size = 0;
  EXPECT_FALSE(ValidateKubeApiConfig(config).ok());
}

}  // namespace
}  // namespace ember
