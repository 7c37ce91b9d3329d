// http::Client against a small HTTP/1.1 server on 127.0.0.1 (libmicrohttpd, a thread per
// connection): what the pod watcher and the OTLP/HTTP exporter both rely on.
#include "http/client.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ember::http {
namespace {

using ::testing::HasSubstr;

struct SeenRequest {
  std::string method = {};
  std::string path = {};
  std::string body = {};
  std::string test_header = {};  // X-Test, "" when absent
  uint16_t client_port = 0;
};

// Paths: /echo (200, the request's body back, its X-Test as X-Echo), /status/N (N with a body of
// "status N" padded to 100 bytes), /big (200, 5000 'x'), /stream (200, "piece-1\n", then
// "piece-2\n" once Release is called), /quiet (200, then nothing until the server stops).
class LoopbackServer {
 public:
  LoopbackServer() {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    daemon_ = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
                               nullptr, nullptr, &LoopbackServer::OnRequest, this,
                               MHD_OPTION_SOCK_ADDR, reinterpret_cast<const sockaddr*>(&address),
                               MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
    if (daemon_ == nullptr) return;
    const MHD_DaemonInfo* info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
    port_ = info != nullptr ? info->port : 0;
  }
  ~LoopbackServer() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    changed_.notify_all();
    if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
  }

  bool ok() const { return daemon_ != nullptr && port_ != 0; }
  std::string Url(const std::string& path) const {
    return absl::StrCat("http://127.0.0.1:", port_, path);
  }
  void Release() {
    {
      std::lock_guard lock(mu_);
      released_ = true;
    }
    changed_.notify_all();
  }
  std::vector<SeenRequest> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  struct Upload {
    std::string body = {};
  };
  struct Stream {
    LoopbackServer* server;
    bool quiet;
    int sent = 0;
  };

  static MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url,
                              const char* method, const char* version, const char* upload_data,
                              size_t* upload_data_size, void** con_cls) {
    auto* server = static_cast<LoopbackServer*>(cls);
    if (*con_cls == nullptr) {
      *con_cls = new Upload();
      return MHD_YES;
    }
    std::unique_ptr<Upload> upload;
    if (*upload_data_size != 0) {
      static_cast<Upload*>(*con_cls)->body.append(upload_data, *upload_data_size);
      *upload_data_size = 0;
      return MHD_YES;
    }
    upload.reset(static_cast<Upload*>(*con_cls));
    *con_cls = nullptr;
    SeenRequest seen{.method = method, .path = url, .body = upload->body};
    if (const char* test = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "X-Test")) {
      seen.test_header = test;
    }
    if (const MHD_ConnectionInfo* info =
            MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS)) {
      seen.client_port = ntohs(reinterpret_cast<const sockaddr_in*>(info->client_addr)->sin_port);
    }
    {
      std::lock_guard lock(server->mu_);
      server->requests_.push_back(seen);
    }
    std::string path = url;
    int status = 200;
    std::string body = {};
    MHD_Response* response = nullptr;
    if (path == "/echo") {
      body = seen.body;
    } else if (absl::StartsWith(path, "/status/") && absl::SimpleAtoi(path.substr(8), &status)) {
      body = absl::StrCat("status ", status);
      body.resize(100, '.');
    } else if (path == "/big") {
      body.assign(5000, 'x');
    } else if (path == "/stream" || path == "/quiet") {
      response = MHD_create_response_from_callback(
          MHD_SIZE_UNKNOWN, 1024, &LoopbackServer::ReadStream,
          new Stream{.server = server, .quiet = path == "/quiet"},
          [](void* stream) { delete static_cast<Stream*>(stream); });
    } else {
      status = 404;
    }
    if (response == nullptr) {
      response = MHD_create_response_from_buffer(body.size(), body.data(), MHD_RESPMEM_MUST_COPY);
    }
    if (!seen.test_header.empty()) {
      MHD_add_response_header(response, "X-Echo", seen.test_header.c_str());
    }
    MHD_Result queued = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return queued;
  }

  // Waits in slices, for at most 10 s: a client that does not stream never releases the rest.
  static ssize_t ReadStream(void* cls, uint64_t pos, char* buf, size_t max) {
    auto* stream = static_cast<Stream*>(cls);
    LoopbackServer* server = stream->server;
    if (stream->sent == 0 && !stream->quiet) {
      stream->sent = 1;
      return static_cast<ssize_t>(std::string_view("piece-1\n").copy(buf, max));
    }
    std::unique_lock lock(server->mu_);
    bool woken = server->changed_.wait_for(lock, std::chrono::seconds(10), [&] {
      return server->stopping_ || (!stream->quiet && server->released_);
    });
    if (!woken || server->stopping_) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (stream->sent == 1) {
      stream->sent = 2;
      return static_cast<ssize_t>(std::string_view("piece-2\n").copy(buf, max));
    }
    return MHD_CONTENT_READER_END_OF_STREAM;
  }

  MHD_Daemon* daemon_ = nullptr;
  uint16_t port_ = 0;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  bool stopping_ = false;
  bool released_ = false;
  std::vector<SeenRequest> requests_;
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok()) << "the loopback server did not start";
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Create({.what = "test", .user_agent = "ember-test"});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  LoopbackServer server_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientTest, StreamsA2xxBodyAsItArrivesAfterTheAnswer) {
  std::vector<std::string> events;
  Response response = client_->Perform({
      .url = server_.Url("/stream"),
      .on_body =
          [&](absl::string_view piece) {
            events.push_back(absl::StrCat("body:", piece));
            // The rest comes only once the first piece is here: a client that waits for the
            // whole body never sees it.
            server_.Release();
            return true;
          },
      .on_answer = [&](long status) { events.push_back(absl::StrCat("answer:", status)); },
  });
  EXPECT_EQ(response.outcome, Response::Outcome::kCompleted) << response.detail;
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, "");
  EXPECT_THAT(events, ::testing::ElementsAre("answer:200", "body:piece-1\n", "body:piece-2\n"));
}

TEST_F(ClientTest, PostsTheBodyAndHeadersThenGetsAgainWithoutThem) {
  const std::string body("binary\0body\n", 12);
  std::vector<std::string> header_lines;
  Response post = client_->Perform({
      .url = server_.Url("/echo"),
      .headers = {"X-Test: first"},
      .post_body = &body,
      .on_header = [&](absl::string_view line) { header_lines.emplace_back(line); },
  });
  EXPECT_EQ(post.outcome, Response::Outcome::kCompleted) << post.detail;
  EXPECT_EQ(post.status, 200);
  EXPECT_EQ(post.body, body);
  EXPECT_THAT(header_lines, ::testing::Contains(HasSubstr("X-Echo: first")));
  EXPECT_THAT(header_lines, ::testing::Contains(HasSubstr("HTTP/1.1 200")));

  Response get = client_->Perform({.url = server_.Url("/echo")});
  EXPECT_EQ(get.outcome, Response::Outcome::kCompleted) << get.detail;
  std::vector<SeenRequest> seen = server_.requests();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].body, body);
  EXPECT_EQ(seen[0].test_header, "first");
  // A request's headers (a bearer token, say) end with it, and a POST does not stick.
  EXPECT_EQ(seen[1].method, "GET");
  EXPECT_EQ(seen[1].body, "");
  EXPECT_EQ(seen[1].test_header, "");
  // One connection for both.
  EXPECT_EQ(seen[0].client_port, seen[1].client_port);
}

TEST_F(ClientTest, KeepsANon2xxBodyUpToTheLimitInsteadOfStreamingIt) {
  bool streamed = false;
  Response response = client_->Perform({
      .url = server_.Url("/status/503"),
      .on_body =
          [&](absl::string_view) {
            streamed = true;
            return true;
          },
      .max_kept_body = 10,
  });
  EXPECT_EQ(response.outcome, Response::Outcome::kCompleted) << response.detail;
  EXPECT_EQ(response.status, 503);
  EXPECT_EQ(response.body, "status 503");
  EXPECT_FALSE(streamed);
}

TEST_F(ClientTest, KeepsA2xxBodyNobodyStreamsUpToTheLimitAndReadsTheRest) {
  Response response = client_->Perform({.url = server_.Url("/big"), .max_kept_body = 1000});
  EXPECT_EQ(response.outcome, Response::Outcome::kCompleted) << response.detail;
  EXPECT_EQ(response.body, std::string(1000, 'x'));
  // The connection is still good for the next request.
  Response next = client_->Perform({.url = server_.Url("/status/201")});
  EXPECT_EQ(next.outcome, Response::Outcome::kCompleted) << next.detail;
  EXPECT_EQ(next.status, 201);
  EXPECT_EQ(next.body.substr(0, 10), "status 201");
}

TEST_F(ClientTest, OnBodyReturningFalseAborts) {
  Response response = client_->Perform({
      .url = server_.Url("/stream"),
      .on_body = [](absl::string_view) { return false; },
  });
  EXPECT_EQ(response.outcome, Response::Outcome::kAborted);
  EXPECT_EQ(response.status, 200);
}

TEST_F(ClientTest, CancelEndsAQuietTransferAndEveryLaterOne) {
  std::atomic<bool> answered = false;
  std::thread canceller([&] {
    for (int i = 0; i < 1000 && !answered; ++i) absl::SleepFor(absl::Milliseconds(10));
    client_->Cancel();
  });
  Response response = client_->Perform({
      .url = server_.Url("/quiet"),
      .timeout = absl::Seconds(20),
      .on_body = [](absl::string_view) { return true; },
      .on_answer = [&](long) { answered = true; },
  });
  canceller.join();
  EXPECT_TRUE(answered);
  EXPECT_EQ(response.outcome, Response::Outcome::kCancelled);
  EXPECT_EQ(response.status, 200);

  Response later = client_->Perform({.url = server_.Url("/echo")});
  EXPECT_EQ(later.outcome, Response::Outcome::kCancelled);
  EXPECT_EQ(server_.requests().size(), 1u);
}

TEST_F(ClientTest, CancelledBeforeARequestConnectsNowhere) {
  // A listener nobody accepts from: a connection attempt would wait in its queue.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  client_->Cancel();
  Response response = client_->Perform(
      {.url = absl::StrCat("http://127.0.0.1:", ntohs(address.sin_port), "/echo")});
  EXPECT_EQ(response.outcome, Response::Outcome::kCancelled);
  pollfd waiting{.fd = fd, .events = POLLIN, .revents = 0};
  EXPECT_EQ(poll(&waiting, 1, 200), 0) << "a cancelled client connected";
  close(fd);
}

TEST_F(ClientTest, TheTimeoutEndsAQuietTransfer) {
  Response response = client_->Perform({
      .url = server_.Url("/quiet"),
      .timeout = absl::Milliseconds(300),
      .on_body = [](absl::string_view) { return true; },
  });
  EXPECT_EQ(response.outcome, Response::Outcome::kTransportError);
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.curl_code, 28);  // CURLE_OPERATION_TIMEDOUT
  EXPECT_EQ(response.curl_error, "Timeout was reached");
  EXPECT_THAT(response.detail, HasSubstr("timed out after"));
  EXPECT_FALSE(IsPermanentTransportError(response.curl_code));
}

TEST_F(ClientTest, ARefusedConnectionMayPass) {
  // A port that was just free on loopback, with nobody listening.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  close(fd);
  Response response = client_->Perform(
      {.url = absl::StrCat("http://127.0.0.1:", ntohs(address.sin_port), "/echo")});
  EXPECT_EQ(response.outcome, Response::Outcome::kTransportError);
  EXPECT_EQ(response.status, 0);
  EXPECT_EQ(response.curl_code, 7);  // CURLE_COULDNT_CONNECT
  EXPECT_THAT(response.detail, HasSubstr("127.0.0.1"));
  EXPECT_FALSE(IsPermanentTransportError(response.curl_code));
}

TEST_F(ClientTest, OnlyTheConfiguredSchemeIsSpoken) {
  absl::StatusOr<std::unique_ptr<Client>> https =
      Client::Create({.what = "test", .user_agent = "ember-test", .https = true});
  ASSERT_TRUE(https.ok()) << https.status();
  Response response = (*https)->Perform({.url = server_.Url("/echo")});
  EXPECT_EQ(response.outcome, Response::Outcome::kTransportError);
  EXPECT_EQ(response.curl_code, 1);  // CURLE_UNSUPPORTED_PROTOCOL
  EXPECT_TRUE(IsPermanentTransportError(response.curl_code));
  EXPECT_TRUE(server_.requests().empty());
}

}  // namespace
}  // namespace ember::http
