// The fetcher through libdebuginfod against an HTTP server on 127.0.0.1 that answers as a test
// tells it: the debug file, 404, garbage, another build's debug file, an announced length over
// the limit, an endless stream of unannounced length, and silence. Each is a counted result or
// refusal within the time limit, and only the right file is kept. libdebuginfod reads its
// settings from the environment, so this binary sets them once, before any thread starts.
#include "debuginfod/libdebuginfod_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "debuginfod/debug_file_fetcher.h"
#include "elf_variants.h"

namespace ember {
namespace {

using std::chrono::seconds;

enum class Behaviour {
  kServe,
  kServeChunked,
  kNotFound,
  kGarbage,
  kLengthTooBig,
  kEndless,
  kSilent
};

constexpr size_t kMaxFileBytes = size_t{1} << 20;

// One server for the whole binary: its port goes into DEBUGINFOD_URLS before any thread exists.
class DebuginfodStandIn {
 public:
  // Listens on 127.0.0.1 at a port of the kernel's choosing; -1 on failure.
  int Listen() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        listen(listen_fd_, 16) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      return -1;
    }
    return ntohs(address.sin_port);
  }
  bool Start() {
    daemon_ = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
                               nullptr, nullptr, &DebuginfodStandIn::OnRequest, this,
                               MHD_OPTION_LISTEN_SOCKET, listen_fd_, MHD_OPTION_END);
    return daemon_ != nullptr;
  }
  void Stop() {
    if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
    daemon_ = nullptr;
  }
  void Answer(const std::string& build_id, Behaviour behaviour, std::string bytes = "") {
    std::lock_guard lock(mu_);
    answers_[build_id] = {behaviour, std::move(bytes)};
  }

 private:
  struct Answered {
    Behaviour behaviour = Behaviour::kNotFound;
    std::string bytes;
  };

  // The answer's bytes in chunks of unannounced length.
  static ssize_t Chunked(void* bytes, uint64_t position, char* buffer, size_t max) {
    const auto* text = static_cast<const std::string*>(bytes);
    if (position >= text->size()) return MHD_CONTENT_READER_END_OF_STREAM;
    const size_t n = std::min<size_t>({max, text->size() - position, 4096});
    std::memcpy(buffer, text->data() + position, n);
    return static_cast<ssize_t>(n);
  }
  static void FreeBytes(void* bytes) { delete static_cast<std::string*>(bytes); }

  static ssize_t Endless(void*, uint64_t, char* buffer, size_t max) {
    std::memset(buffer, 0x7f, max);
    return static_cast<ssize_t>(max);
  }

  static MHD_Result OnRequest(void* self, MHD_Connection* connection, const char* url, const char*,
                              const char*, const char*, size_t*, void** state) {
    // The first call of a request only announces it.
    if (*state == nullptr) {
      *state = self;
      return MHD_YES;
    }
    auto* server = static_cast<DebuginfodStandIn*>(self);
    Answered answer;
    const std::string path = url;
    const std::string prefix = "/buildid/";
    if (path.rfind(prefix, 0) == 0) {
      const std::string id =
          path.substr(prefix.size(), path.find('/', prefix.size()) - prefix.size());
      std::lock_guard lock(server->mu_);
      answer = server->answers_[id];
    }
    MHD_Response* response = nullptr;
    unsigned status = 200;
    switch (answer.behaviour) {
      case Behaviour::kServe:
      case Behaviour::kGarbage:
        response = MHD_create_response_from_buffer(answer.bytes.size(), answer.bytes.data(),
                                                   MHD_RESPMEM_MUST_COPY);
        break;
      case Behaviour::kServeChunked:
        response = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, &Chunked,
                                                     new std::string(answer.bytes), &FreeBytes);
        break;
      case Behaviour::kNotFound:
        status = 404;
        response = MHD_create_response_from_buffer(0, nullptr, MHD_RESPMEM_PERSISTENT);
        break;
      case Behaviour::kLengthTooBig:
        response = MHD_create_response_from_callback(2 * kMaxFileBytes, 64 * 1024, &Endless,
                                                     nullptr, nullptr);
        break;
      case Behaviour::kEndless:
        response = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, &Endless, nullptr,
                                                     nullptr);
        break;
      case Behaviour::kSilent:
        // Nothing for longer than the client waits (its thread alone: one per connection).
        std::this_thread::sleep_for(seconds(4));
        status = 404;
        response = MHD_create_response_from_buffer(0, nullptr, MHD_RESPMEM_PERSISTENT);
        break;
    }
    const MHD_Result queued = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return queued;
  }

  int listen_fd_ = -1;
  MHD_Daemon* daemon_ = nullptr;
  std::mutex mu_;
  std::map<std::string, Answered> answers_;
};

DebuginfodStandIn* server = nullptr;
std::string* cache_root = nullptr;

class Environment : public ::testing::Environment {
 public:
  void SetUp() override {
    char dir[] = "/tmp/ember_libdebuginfod_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    cache_root = new std::string(dir);
    server = new DebuginfodStandIn;
    const int port = server->Listen();
    ASSERT_GT(port, 0);
    config_.urls = absl::StrCat("http://127.0.0.1:", port);
    config_.staging_dir = *cache_root + "/cache/client";
    config_.timeout = seconds(1);
    config_.max_file_bytes = kMaxFileBytes;
    std::filesystem::create_directories(*cache_root + "/cache");
    ASSERT_TRUE(ConfigureLibdebuginfod(config_).ok());
    ASSERT_TRUE(server->Start());
  }
  void TearDown() override {
    server->Stop();
    std::filesystem::remove_all(*cache_root);
  }
  static LibdebuginfodConfig config_;
};
LibdebuginfodConfig Environment::config_;

const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new Environment);

class LibdebuginfodTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(variants_.ok());
    DebugFileFetcherOptions options;
    options.cache_dir = *cache_root + "/cache";
    options.max_cache_bytes = 8 * kMaxFileBytes;
    options.max_file_bytes = kMaxFileBytes;
    options.max_concurrent = 2;
    auto fetcher = DebugFileFetcher::Create(options, [] {
      auto transport = LibdebuginfodTransport::Create(Environment::config_);
      return transport.ok() ? std::unique_ptr<DebuginfodTransport>(std::move(transport).value())
                            : nullptr;
    });
    ASSERT_TRUE(fetcher.ok()) << fetcher.status();
    fetcher_ = std::move(fetcher).value();
    fetcher_->Start();
  }

  // Asks for `id` and waits for the fetch to end, at most 20 s: the result.
  std::optional<FetchResult> Fetch(const std::string& id) {
    EXPECT_FALSE(fetcher_->Find(id).has_value());
    const auto deadline = std::chrono::steady_clock::now() + seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      const DebugFileFetcherStats stats = fetcher_->stats();
      for (size_t r = 0; r < kFetchResults; ++r) {
        if (stats.results[r] > 0) return static_cast<FetchResult>(r);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return std::nullopt;
  }
  uint64_t Refusals(FetchRefusal refusal) {
    return fetcher_->stats().refusals[static_cast<size_t>(refusal)];
  }

  ElfVariants variants_;
  std::unique_ptr<DebugFileFetcher> fetcher_;
};

TEST_F(LibdebuginfodTransportTest, TheDebugFileIsFetchedAndKept) {
  const std::string id = variants_.BuildId(1);
  server->Answer(id, Behaviour::kServe, variants_.Bytes(1));
  EXPECT_EQ(Fetch(id), FetchResult::kOk);
  std::optional<std::string> path = fetcher_->Find(id);
  ASSERT_TRUE(path.has_value());
  EXPECT_EQ(ReadBytes(*path), variants_.Bytes(1));
}

TEST_F(LibdebuginfodTransportTest, AFileOfUnannouncedLengthIsFetched) {
  const std::string id = variants_.BuildId(9);
  server->Answer(id, Behaviour::kServeChunked, variants_.Bytes(9));
  EXPECT_EQ(Fetch(id), FetchResult::kOk);
  std::optional<std::string> path = fetcher_->Find(id);
  ASSERT_TRUE(path.has_value());
  EXPECT_EQ(ReadBytes(*path), variants_.Bytes(9));
}

TEST_F(LibdebuginfodTransportTest, A404IsNotFound) {
  const std::string id = variants_.BuildId(2);
  server->Answer(id, Behaviour::kNotFound);
  EXPECT_EQ(Fetch(id), FetchResult::kNotFound);
}

TEST_F(LibdebuginfodTransportTest, GarbageIsRefused) {
  const std::string id = variants_.BuildId(3);
  server->Answer(id, Behaviour::kGarbage, "<html><body>Bad Gateway</body></html>");
  EXPECT_EQ(Fetch(id), FetchResult::kRefused);
  EXPECT_EQ(Refusals(FetchRefusal::kNotElf), 1u);
  EXPECT_FALSE(fetcher_->Find(id).has_value());
}

TEST_F(LibdebuginfodTransportTest, AnotherBuildsDebugFileIsRefused) {
  const std::string id = variants_.BuildId(4);
  server->Answer(id, Behaviour::kGarbage, variants_.Bytes(5));
  EXPECT_EQ(Fetch(id), FetchResult::kRefused);
  EXPECT_EQ(Refusals(FetchRefusal::kBuildIdMismatch), 1u);
  EXPECT_FALSE(std::filesystem::exists(*cache_root + "/cache/" + id + ".debug"));
}

TEST_F(LibdebuginfodTransportTest, AnAnnouncedLengthOverTheLimitIsRefused) {
  const std::string id = variants_.BuildId(6);
  server->Answer(id, Behaviour::kLengthTooBig);
  EXPECT_EQ(Fetch(id), FetchResult::kRefused);
  EXPECT_EQ(Refusals(FetchRefusal::kTooBig), 1u);
}

TEST_F(LibdebuginfodTransportTest, AnEndlessStreamIsCutOffAtTheLimit) {
  const std::string id = variants_.BuildId(7);
  server->Answer(id, Behaviour::kEndless);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Fetch(id), FetchResult::kRefused);
  EXPECT_EQ(Refusals(FetchRefusal::kTooBig), 1u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(5));
  // Nothing of it is left behind, in the cache or in the library's staging directory (which
  // holds only its small control files).
  EXPECT_FALSE(std::filesystem::exists(*cache_root + "/cache/" + id + ".debug"));
  uint64_t staged = 0;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(Environment::config_.staging_dir)) {
    if (entry.is_regular_file()) staged += entry.file_size();
  }
  EXPECT_LT(staged, 1024u);
}

TEST_F(LibdebuginfodTransportTest, ASilentServerTimesOut) {
  const std::string id = variants_.BuildId(8);
  server->Answer(id, Behaviour::kSilent);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Fetch(id), FetchResult::kTimeout);
  // The timeout is 1 s: 2 s for the whole file, and the library's loop turns once a second.
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(4));
}

}  // namespace
}  // namespace ember
