// HttpTestReceiver: one accepting thread and one thread per connection, blocking I/O; Stop shuts
// the sockets down, which ends every blocked read.
#include "unit/otlp/http_test_receiver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "otlp/request_validator.h"
#include "support/gunzip.h"

namespace ember::testing {
namespace {

constexpr size_t kMaxHead = 64 << 10;
constexpr size_t kMaxBody = 64 << 20;

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Status";
  }
}

// One accepted connection, plaintext or TLS.
class Connection {
 public:
  Connection(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}
  ~Connection() {
    if (ssl_ != nullptr) SSL_free(ssl_);
  }
  // > 0 bytes read, 0 at the end or on an error.
  size_t Read(char* buffer, size_t size) {
    if (ssl_ != nullptr) {
      int n = SSL_read(ssl_, buffer, static_cast<int>(size));
      return n > 0 ? static_cast<size_t>(n) : 0;
    }
    ssize_t n = recv(fd_, buffer, size, 0);
    return n > 0 ? static_cast<size_t>(n) : 0;
  }
  bool Write(const std::string& data) {
    if (ssl_ != nullptr) {
      return SSL_write(ssl_, data.data(), static_cast<int>(data.size())) ==
             static_cast<int>(data.size());
    }
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

 private:
  int fd_;
  SSL* ssl_;
};

}  // namespace

std::string ReceivedHttpRequest::Header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? "" : it->second;
}

class HttpTestReceiver::Impl {
 public:
  ~Impl() {
    Stop();
    if (ssl_ctx_ != nullptr) SSL_CTX_free(ssl_ctx_);
  }

  bool Start(const HttpReceiverOptions& options) {
    // A client that gives up closes the socket under a pending write.
    signal(SIGPIPE, SIG_IGN);
    if (!options.cert_file.empty()) {
      ssl_ctx_ = SSL_CTX_new(TLS_server_method());
      if (ssl_ctx_ == nullptr ||
          SSL_CTX_use_certificate_chain_file(ssl_ctx_, options.cert_file.c_str()) != 1 ||
          SSL_CTX_use_PrivateKey_file(ssl_ctx_, options.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
        ADD_FAILURE() << "cannot load the receiver's certificate " << options.cert_file;
        return false;
      }
      if (!options.client_ca_file.empty()) {
        if (SSL_CTX_load_verify_locations(ssl_ctx_, options.client_ca_file.c_str(), nullptr) != 1) {
          ADD_FAILURE() << "cannot load " << options.client_ca_file;
          return false;
        }
        SSL_CTX_set_verify(ssl_ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
      }
    }
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(options.port));
    socklen_t length = sizeof(address);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        listen(listen_fd_, 16) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1:" << options.port << ": " << strerror(errno);
      return false;
    }
    port_ = ntohs(address.sin_port);
    accepter_ = std::thread([this] { Accept(); });
    return true;
  }

  void Stop() {
    if (stopping_.exchange(true)) return;
    if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
    if (accepter_.joinable()) accepter_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      for (int fd : connection_fds_) shutdown(fd, SHUT_RDWR);
      threads.swap(connection_threads_);
    }
    for (std::thread& thread : threads) thread.join();
    if (listen_fd_ >= 0) close(listen_fd_);
    listen_fd_ = -1;
  }

  void Accept() {
    while (!stopping_) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR) continue;
        return;
      }
      std::lock_guard lock(mu_);
      if (stopping_) {
        close(fd);
        return;
      }
      connection_fds_.push_back(fd);
      connection_threads_.emplace_back([this, fd] {
        Serve(fd);
        std::lock_guard lock(mu_);
        std::erase(connection_fds_, fd);
        close(fd);
      });
    }
  }

  void Serve(int fd) {
    SSL* ssl = nullptr;
    if (ssl_ctx_ != nullptr) {
      ssl = SSL_new(ssl_ctx_);
      SSL_set_fd(ssl, fd);
      if (SSL_accept(ssl) != 1) {
        SSL_free(ssl);
        ERR_clear_error();
        std::lock_guard lock(mu_);
        ++refused_connections_;
        return;
      }
    }
    Connection connection(fd, ssl);
    std::string buffer;
    char chunk[16384];
    while (!stopping_) {
      // The head: request line and headers.
      size_t head_end;
      while ((head_end = buffer.find("\r\n\r\n")) == std::string::npos) {
        if (!buffer.empty() && !absl::ascii_isupper(static_cast<unsigned char>(buffer[0]))) {
          std::lock_guard lock(mu_);  // not HTTP (a TLS ClientHello, say)
          ++refused_connections_;
          return;
        }
        if (buffer.size() > kMaxHead) return;
        size_t n = connection.Read(chunk, sizeof(chunk));
        if (n == 0) return;
        buffer.append(chunk, n);
      }
      ReceivedHttpRequest request;
      std::vector<std::string> lines =
          absl::StrSplit(absl::string_view(buffer).substr(0, head_end), "\r\n");
      std::vector<std::string> request_line = absl::StrSplit(lines[0], ' ');
      if (request_line.size() != 3) return;
      request.method = request_line[0];
      request.path = request_line[1];
      for (size_t i = 1; i < lines.size(); ++i) {
        size_t colon = lines[i].find(':');
        if (colon == std::string::npos) return;
        request.headers.emplace(
            absl::AsciiStrToLower(lines[i].substr(0, colon)),
            std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1))));
      }
      buffer.erase(0, head_end + 4);
      size_t length = 0;
      if (!absl::SimpleAtoi(request.Header("content-length"), &length) || length > kMaxBody) {
        return;  // the exporter always sends Content-Length
      }
      while (buffer.size() < length) {
        size_t n = connection.Read(chunk, sizeof(chunk));
        if (n == 0) return;
        buffer.append(chunk, n);
      }
      request.body = buffer.substr(0, length);
      buffer.erase(0, length);

      std::optional<std::string> decoded = request.body;
      if (request.Header("content-encoding") == "gzip") {
        decoded = Gunzip(request.body);
        request.gunzipped = decoded.has_value();
      }
      if (decoded) {
        ExportRequest parsed;
        if (parsed.ParseFromString(*decoded)) {
          request.valid = ValidateExportRequest(parsed);
          request.request = std::move(parsed);
        }
      }

      HttpReply reply;
      size_t index;
      {
        std::lock_guard lock(mu_);
        attempt_times_.push_back(absl::Now());
        if (!script_.empty()) {
          reply = script_.front();
          script_.pop_front();
        }
        index = requests_.size();
        requests_.push_back(std::move(request));
      }
      absl::Time until = absl::Now() + reply.delay;
      while (absl::Now() < until && !stopping_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (stopping_) return;
      std::string response =
          absl::StrCat("HTTP/1.1 ", reply.status, " ", ReasonPhrase(reply.status),
                       "\r\nContent-Type: application/x-protobuf\r\n"
                       "Content-Length: ",
                       reply.body.size(), "\r\n");
      if (reply.retry_after)
        absl::StrAppend(&response, "Retry-After: ", *reply.retry_after, "\r\n");
      absl::StrAppend(&response, "\r\n", reply.body);
      {
        // Before writing: the client may act on the answer before Write returns.
        std::lock_guard lock(mu_);
        requests_[index].answered = reply.status;
      }
      if (!connection.Write(response)) return;
    }
  }

  SSL_CTX* ssl_ctx_ = nullptr;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_ = false;
  std::thread accepter_;

  mutable std::mutex mu_;
  std::vector<int> connection_fds_;
  std::vector<std::thread> connection_threads_;
  std::deque<HttpReply> script_;
  std::vector<ReceivedHttpRequest> requests_;
  std::vector<absl::Time> attempt_times_;
  int refused_connections_ = 0;
};

HttpTestReceiver::HttpTestReceiver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpTestReceiver::~HttpTestReceiver() = default;

std::unique_ptr<HttpTestReceiver> HttpTestReceiver::Start(const HttpReceiverOptions& options) {
  auto impl = std::make_unique<Impl>();
  if (!impl->Start(options)) return nullptr;
  return std::unique_ptr<HttpTestReceiver>(new HttpTestReceiver(std::move(impl)));
}

int HttpTestReceiver::port() const { return impl_->port_; }

std::string HttpTestReceiver::Url(const std::string& path) const {
  return absl::StrCat(impl_->ssl_ctx_ != nullptr ? "https" : "http", "://127.0.0.1:", impl_->port_,
                      path);
}

void HttpTestReceiver::Script(std::vector<HttpReply> replies) {
  std::lock_guard lock(impl_->mu_);
  impl_->script_.assign(replies.begin(), replies.end());
}

int HttpTestReceiver::attempts() const {
  std::lock_guard lock(impl_->mu_);
  return static_cast<int>(impl_->requests_.size());
}

std::vector<ReceivedHttpRequest> HttpTestReceiver::requests() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->requests_;
}

std::vector<int> HttpTestReceiver::DeliveredIds() const {
  std::vector<int> ids;
  for (const ReceivedHttpRequest& request : requests()) {
    if (request.answered >= 200 && request.answered < 300 && request.request) {
      ids.push_back(IntervalId(*request.request));
    }
  }
  return ids;
}

std::vector<absl::Time> HttpTestReceiver::attempt_times() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->attempt_times_;
}

int HttpTestReceiver::refused_connections() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->refused_connections_;
}

void HttpTestReceiver::Stop() { impl_->Stop(); }

}  // namespace ember::testing
