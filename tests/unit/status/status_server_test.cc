// The status server over real HTTP on loopback (libcurl): /metrics read back by the strict
// checker while another thread updates counters, probes following their handlers, 404/405,
// bad addresses, a port in use, and starting and stopping repeatedly.
#include "status/status_server.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "exposition_checker.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "status/metrics_registry.h"
#include "status/process_metrics.h"

namespace ember {
namespace {

// Polls `condition` every few milliseconds until it holds or 10 s pass.
template <typename Condition>
bool WaitFor(Condition condition) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

using ::ember::testing::ParseExposition;
using ::testing::HasSubstr;

struct Reply {
  long status = 0;
  std::string body;
  std::string content_type;
  std::string allow;
  std::string error;  // curl's, when no reply came
};

size_t AppendBody(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

size_t ReadHeader(char* data, size_t size, size_t n, void* out) {
  absl::string_view line(data, size * n);
  if (absl::StartsWithIgnoreCase(line, "allow:")) {
    static_cast<Reply*>(out)->allow = std::string(absl::StripAsciiWhitespace(line.substr(6)));
  }
  return size * n;
}

// `from`: the local address to connect from (127.0.0.2 is loopback too), or empty.
Reply Fetch(const std::string& url, const std::string& method = "GET",
            const std::string& from = "") {
  static const bool initialized = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  EXPECT_TRUE(initialized);
  Reply reply;
  CURL* curl = curl_easy_init();
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &AppendBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &ReadHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &reply);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");
  if (!from.empty()) curl_easy_setopt(curl, CURLOPT_INTERFACE, from.c_str());
  if (method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "x=1");
  } else if (method != "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  }
  CURLcode result = curl_easy_perform(curl);
  if (result == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply.status);
    char* type = nullptr;
    curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &type);
    if (type != nullptr) reply.content_type = type;
  } else {
    reply.error = curl_easy_strerror(result);
  }
  curl_easy_cleanup(curl);
  return reply;
}

std::string Url(const StatusServer& server, absl::string_view path) {
  return absl::StrCat("http://", server.address().ToString(), path);
}

std::unique_ptr<StatusServer> StartOrDie(absl::string_view address, StatusHandlers handlers) {
  auto server = StatusServer::Start(address, std::move(handlers));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(StatusServerTest, ServesMetricsThatParseAndChange) {
  MetricsRegistry registry;
  Counter* samples = *registry.AddCounter("ember_samples_total", "Stack samples read.");
  Counter* stops = *registry.AddCounter("ember_unwind_stops_total", "Unwinds that stopped.",
                                        {{"reason", "quote\"back\\slash"}});
  ASSERT_TRUE(AddProcessMetrics(registry).ok());
  auto server = StartOrDie("127.0.0.1:0", {.metrics = [&] { return registry.Render(); }});
  ASSERT_NE(server, nullptr);
  EXPECT_NE(server->address().port, 0);

  Reply reply = Fetch(Url(*server, "/metrics"));
  ASSERT_EQ(reply.status, 200) << reply.error;
  EXPECT_EQ(reply.content_type, "text/plain; version=0.0.4; charset=utf-8");
  auto parsed = ParseExposition(reply.body);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << reply.body;
  EXPECT_EQ(parsed->samples["ember_samples_total"], 0);
  EXPECT_EQ(parsed->types["process_cpu_seconds_total"], "counter");
  for (const char* name : {"process_resident_memory_bytes", "process_open_fds",
                           "process_start_time_seconds", "process_cpu_seconds_total"}) {
    EXPECT_EQ(parsed->samples.count(name), 1u) << name;
  }
  EXPECT_GT(parsed->samples["process_resident_memory_bytes"], 0);

  samples->Increment(5);
  stops->Increment();
  reply = Fetch(Url(*server, "/metrics"));
  parsed = ParseExposition(reply.body);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->samples["ember_samples_total"], 5);
  EXPECT_EQ(parsed->samples["ember_unwind_stops_total{reason=\"quote\\\"back\\\\slash\"}"], 1);

  // HEAD: the headers of GET, no body.
  reply = Fetch(Url(*server, "/metrics"), "HEAD");
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(reply.body, "");
}

TEST(StatusServerTest, ScrapesWhileAnotherThreadHammersCounters) {
  MetricsRegistry registry;
  Counter* events = *registry.AddCounter("ember_events_total", "Events.");
  DoubleCounter* seconds = *registry.AddDoubleCounter("ember_busy_seconds_total", "Busy time.");
  Gauge* level = *registry.AddGauge("ember_level", "Level.");
  auto server = StartOrDie("127.0.0.1:0", {.metrics = [&] { return registry.Render(); }});
  ASSERT_NE(server, nullptr);
  std::atomic<bool> stop = false;
  std::atomic<uint64_t> done = 0;
  std::thread hammer([&] {
    uint64_t n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      events->Increment();
      seconds->Add(0.001);
      level->Set(static_cast<double>(n % 1000));
      ++n;
    }
    done = n;
  });
  double last_events = 0, last_seconds = 0;
  for (int i = 0; i < 100; ++i) {
    Reply reply = Fetch(Url(*server, "/metrics"));
    ASSERT_EQ(reply.status, 200) << reply.error;
    auto parsed = ParseExposition(reply.body);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << reply.body;
    double now_events = parsed->samples["ember_events_total"];
    double now_seconds = parsed->samples["ember_busy_seconds_total"];
    EXPECT_GE(now_events, last_events);
    EXPECT_GE(now_seconds, last_seconds);
    EXPECT_GE(parsed->samples["ember_level"], 0);
    EXPECT_LT(parsed->samples["ember_level"], 1000);
    last_events = now_events;
    last_seconds = now_seconds;
  }
  stop = true;
  hammer.join();
  EXPECT_GT(last_events, 0);
  auto parsed = ParseExposition(Fetch(Url(*server, "/metrics")).body);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->samples["ember_events_total"], static_cast<double>(done));
}

TEST(StatusServerTest, ProbesFollowTheirHandlers) {
  std::atomic<bool> live = true;
  std::atomic<bool> ready = false;
  auto server = StartOrDie(
      "127.0.0.1:0", {.healthz =
                          [&] {
                            return ProbeResult{live, live ? "" : "no samples for 30s"};
                          },
                      .readyz =
                          [&] {
                            return ProbeResult{ready, ready ? "sampling 2 CPUs" : "attaching BPF"};
                          }});
  ASSERT_NE(server, nullptr);

  Reply reply = Fetch(Url(*server, "/healthz"));
  EXPECT_EQ(reply.status, 200) << reply.error;
  EXPECT_EQ(reply.body, "ok\n");
  EXPECT_EQ(reply.content_type, "text/plain; charset=utf-8");
  reply = Fetch(Url(*server, "/readyz"));
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.body, "attaching BPF\n");

  ready = true;
  reply = Fetch(Url(*server, "/readyz"));
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "ok\nsampling 2 CPUs\n");
  EXPECT_EQ(Fetch(Url(*server, "/readyz"), "HEAD").status, 200);

  live = false;
  reply = Fetch(Url(*server, "/healthz"));
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.body, "no samples for 30s\n");
  EXPECT_EQ(Fetch(Url(*server, "/healthz"), "HEAD").status, 503);
  // Query strings (as some probers add) do not change the path.
  EXPECT_EQ(Fetch(Url(*server, "/healthz?verbose=1")).status, 503);
}

TEST(StatusServerTest, WithoutHandlersProbesAreOkAndMetricsIsNotFound) {
  auto server = StartOrDie("127.0.0.1:0", {});
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(Fetch(Url(*server, "/healthz")).body, "ok\n");
  EXPECT_EQ(Fetch(Url(*server, "/readyz")).status, 200);
  Reply reply = Fetch(Url(*server, "/metrics"));
  EXPECT_EQ(reply.status, 404);
  EXPECT_EQ(reply.body, "not found: the status endpoint serves /healthz and /readyz\n");
}

TEST(StatusServerTest, OtherPathsAndMethods) {
  auto server = StartOrDie("127.0.0.1:0", {.metrics = [] { return std::string(); }});
  ASSERT_NE(server, nullptr);
  for (const char* path : {"/", "/metrics/", "/metricsx", "/healthz/x", "/favicon.ico"}) {
    Reply reply = Fetch(Url(*server, path));
    EXPECT_EQ(reply.status, 404) << path << reply.error;
    EXPECT_THAT(reply.body, HasSubstr("/metrics, /healthz and /readyz")) << path;
  }
  EXPECT_EQ(Fetch(Url(*server, "/nothing"), "POST").status, 404);
  for (const char* method : {"POST", "PUT", "DELETE", "OPTIONS", "PATCH"}) {
    for (const char* path : {"/metrics", "/healthz", "/readyz"}) {
      Reply reply = Fetch(Url(*server, path), method);
      EXPECT_EQ(reply.status, 405) << method << " " << path << reply.error;
      EXPECT_EQ(reply.allow, "GET, HEAD") << method << " " << path;
    }
  }
  // Still serving after all of that.
  EXPECT_EQ(Fetch(Url(*server, "/metrics")).status, 200);
}

TEST(StatusServerTest, AHandlerThatThrowsAnswers500) {
  auto server =
      StartOrDie("127.0.0.1:0",
                 {.metrics = []() -> std::string { throw std::runtime_error("registry broke"); },
                  .healthz = []() -> ProbeResult { throw 42; }});
  ASSERT_NE(server, nullptr);
  Reply reply = Fetch(Url(*server, "/metrics"));
  EXPECT_EQ(reply.status, 500);
  EXPECT_EQ(reply.body, "internal error: registry broke\n");
  EXPECT_EQ(Fetch(Url(*server, "/healthz")).status, 500);
  EXPECT_EQ(Fetch(Url(*server, "/readyz")).status, 200);
}

// Connects to `server` from 127.0.0.1 and sends half a request.
int StalledConnection(const StatusServer& server) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(server.address().port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  EXPECT_EQ(write(fd, "GET /hea", 8), 8);
  return fd;
}

TEST(StatusServerTest, StalledClientsDoNotBlockOthers) {
  auto server = StartOrDie("127.0.0.1:0", {});
  ASSERT_NE(server, nullptr);
  // The one polling thread must not wait on a client that never finishes its request.
  std::vector<int> stalled;
  for (int i = 0; i < 4; ++i) stalled.push_back(StalledConnection(*server));
  EXPECT_EQ(Fetch(Url(*server, "/healthz")).status, 200);
  // One address using up its share of connections leaves the others theirs (the kubelet's
  // probes come from another address than a scraper's).
  while (stalled.size() < StatusServerLimits().max_connections_per_ip) {
    stalled.push_back(StalledConnection(*server));
  }
  EXPECT_NE(Fetch(Url(*server, "/healthz")).status, 200);
  Reply other = Fetch(Url(*server, "/healthz"), "GET", "127.0.0.2");
  EXPECT_EQ(other.status, 200) << other.error;
  for (int fd : stalled) close(fd);
  EXPECT_TRUE(WaitFor([&] { return Fetch(Url(*server, "/healthz")).status == 200; }));
}

TEST(StatusServerTest, IdleConnectionsTimeOut) {
  auto server = StatusServer::Start("127.0.0.1:0", {}, {.connection_timeout_seconds = 1});
  ASSERT_TRUE(server.ok()) << server.status();
  int fd = StalledConnection(**server);
  // The server closes it: read sees the end of the stream (or a reset), not a hang.
  timeval limit{.tv_sec = 10, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  char byte;
  const absl::Time start = absl::Now();
  ssize_t n = read(fd, &byte, 1);
  EXPECT_LE(n, 0);
  EXPECT_TRUE(n == 0 || errno == ECONNRESET) << errno;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(900));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  close(fd);
}

TEST(StatusServerTest, BadAddressesAreOneLineErrors) {
  for (absl::string_view bad : {"localhost:9464", "127.0.0.1", "127.0.0.1:99999", "[::1"}) {
    auto server = StatusServer::Start(bad, {});
    ASSERT_FALSE(server.ok()) << bad;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(server.status().message().find('\n'), absl::string_view::npos);
  }
  // TEST-NET-1 (RFC 5737): well formed, but no host has it.
  auto server = StatusServer::Start("192.0.2.1:0", {});
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().message(),
            "cannot listen on 192.0.2.1:0: address not available (it is not an address of this "
            "host)");
}

TEST(StatusServerTest, APortInUseIsAnError) {
  auto first = StartOrDie("127.0.0.1:0", {});
  ASSERT_NE(first, nullptr);
  const std::string taken = first->address().ToString();
  auto second = StatusServer::Start(taken, {});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(),
            absl::StrCat("cannot listen on ", taken,
                         ": address already in use (another process, perhaps another "
                         "ember-agent, listens there)"));
  // Every address includes 127.0.0.1's port too.
  auto any = StatusServer::Start(absl::StrCat("0.0.0.0:", first->address().port), {});
  EXPECT_FALSE(any.ok());
  // The first one is unharmed.
  EXPECT_EQ(Fetch(Url(*first, "/healthz")).status, 200);
}

TEST(StatusServerTest, StartAndStopRepeatedly) {
  uint16_t port = 0;
  for (int i = 0; i < 20; ++i) {
    // Alternately any port and the previous one: a restarted agent gets its port back even
    // with connections of the previous run in TIME_WAIT.
    auto server = StartOrDie(absl::StrCat("127.0.0.1:", i % 2 == 0 ? 0 : port), {});
    ASSERT_NE(server, nullptr) << i;
    if (i % 2 == 1) {
      EXPECT_EQ(server->address().port, port);
    }
    port = server->address().port;
    ASSERT_EQ(Fetch(Url(*server, "/healthz")).status, 200) << i;
    server->Stop();
    server->Stop();  // idempotent; the destructor stops a third time
    EXPECT_FALSE(Fetch(absl::StrCat("http://127.0.0.1:", port, "/healthz")).error.empty());
  }
}

TEST(StatusServerTest, StopWhileRequestsAreInFlight) {
  std::atomic<int> served = 0;
  auto server = StartOrDie("127.0.0.1:0", {.metrics = [&] {
                             ++served;
                             std::this_thread::sleep_for(std::chrono::milliseconds(20));
                             return std::string("ember_x 1\n");
                           }});
  ASSERT_NE(server, nullptr);
  const std::string url = Url(*server, "/metrics");
  std::thread client([&] {
    for (int i = 0; i < 20; ++i) Fetch(url);  // some fail once stopped; none may hang
  });
  while (served == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  server->Stop();
  client.join();
  EXPECT_GE(served, 1);
}

bool HasIpv6Loopback() {
  std::ifstream in("/proc/net/if_inet6");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "00000000000000000000000000000001")) return true;
  }
  return false;
}

TEST(StatusServerTest, Ipv6) {
  ASSERT_TRUE(HasIpv6Loopback()) << "this host has no IPv6 loopback (::1)";
  auto server = StartOrDie("[::1]:0", {});
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(server->address().ipv6);
  Reply reply = Fetch(Url(*server, "/healthz"));
  EXPECT_EQ(reply.status, 200) << reply.error;
  // [::] takes IPv4 connections too.
  auto dual = StartOrDie("[::]:0", {});
  ASSERT_NE(dual, nullptr);
  EXPECT_EQ(Fetch(absl::StrCat("http://127.0.0.1:", dual->address().port, "/healthz")).status, 200);
}

}  // namespace
}  // namespace ember
