// The status endpoint on libmicrohttpd's internal polling thread. The listening socket is made
// here rather than by libmicrohttpd so that a bind failure says why (port in use, not a local
// address) and port 0 learns its port.
#include "status/status_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <exception>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"
#include "status/metrics_registry.h"

namespace ember {
namespace {

constexpr int kListenBacklog = 64;
constexpr char kTextPlain[] = "text/plain; charset=utf-8";

std::string ErrnoText(int error) { return std::generic_category().message(error); }

absl::Status ListenError(const ListenAddress& address, int error) {
  std::string why;
  switch (error) {
    case EADDRINUSE:
      why = "address already in use (another process, perhaps another ember-agent, listens there)";
      break;
    case EADDRNOTAVAIL:
      why = "address not available (it is not an address of this host)";
      break;
    case EACCES:
      why = "permission denied (ports below 1024 need CAP_NET_BIND_SERVICE)";
      break;
    case EAFNOSUPPORT:
      why = "IPv6 is not available on this host";
      break;
    default:
      why = ErrnoText(error);
  }
  return absl::UnavailableError(absl::StrCat("cannot listen on ", address.ToString(), ": ", why));
}

// A bound, listening socket; `address.port` becomes the bound port.
absl::StatusOr<int> OpenListenSocket(ListenAddress& address) {
  sockaddr_storage storage{};
  socklen_t length;
  if (address.ipv6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&storage);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(address.port);
    if (inet_pton(AF_INET6, address.host.c_str(), &in6->sin6_addr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("not an IPv6 address: ", address.host));
    }
    length = sizeof(sockaddr_in6);
  } else {
    auto* in4 = reinterpret_cast<sockaddr_in*>(&storage);
    in4->sin_family = AF_INET;
    in4->sin_port = htons(address.port);
    if (inet_pton(AF_INET, address.host.c_str(), &in4->sin_addr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("not an IPv4 address: ", address.host));
    }
    length = sizeof(sockaddr_in);
  }
  int fd = socket(storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return ListenError(address, errno);
  auto fail = [&](int error) {
    close(fd);
    return ListenError(address, error);
  };
  // A restarted agent rebinds while old connections sit in TIME_WAIT. On Linux this does not let
  // two listeners share a port, so "in use" is still reported.
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) return fail(errno);
  if (address.ipv6) {
    // [::] serves IPv4 too (the usual meaning of "every address"); a given IPv6 address only
    // itself.
    in6_addr any = IN6ADDR_ANY_INIT;
    int v6only =
        memcmp(&reinterpret_cast<sockaddr_in6*>(&storage)->sin6_addr, &any, sizeof(any)) == 0 ? 0
                                                                                              : 1;
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only)) != 0) {
      return fail(errno);
    }
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&storage), length) != 0) return fail(errno);
  if (listen(fd, kListenBacklog) != 0) return fail(errno);
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof(bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_length) != 0) {
    return fail(errno);
  }
  address.port = ntohs(address.ipv6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                    : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

MHD_Result Respond(MHD_Connection* connection, unsigned status, absl::string_view content_type,
                   absl::string_view body, const char* allow = nullptr) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE,
                          std::string(content_type).c_str());
  // Probes and scrapes must see the current state, never a proxy's copy.
  MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  if (allow != nullptr) MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, allow);
  MHD_Result result = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return result;
}

MHD_Result RespondProbe(MHD_Connection* connection, const std::function<ProbeResult()>& handler) {
  ProbeResult result = handler ? handler() : ProbeResult{};
  std::string body;
  if (result.ok) {
    body = result.detail.empty() ? "ok\n" : absl::StrCat("ok\n", result.detail, "\n");
  } else {
    body = absl::StrCat(result.detail.empty() ? "not ok" : result.detail, "\n");
  }
  return Respond(connection, result.ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, kTextPlain,
                 body);
}

void LogFromMhd(void*, const char* format, va_list args) {
  char line[512];
  vsnprintf(line, sizeof(line), format, args);
  std::string text(line);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  spdlog::debug("status server: {}", text);
}

}  // namespace

struct StatusServer::Callbacks {
  static MHD_Result HandleRequest(void* self, MHD_Connection* connection, const char* url,
                                  const char* method, const char* /*version*/,
                                  const char* /*upload_data*/, size_t* /*upload_data_size*/,
                                  void** /*request_state*/) {
    // Answered at the first call, once the headers are in: no request here has a body worth
    // reading, and libmicrohttpd closes a connection whose body was left unread.
    try {
      return Answer(*static_cast<StatusServer*>(self), connection, url, method);
    } catch (const std::exception& e) {
      return Respond(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, kTextPlain,
                     absl::StrCat("internal error: ", e.what(), "\n"));
    } catch (...) {
      return Respond(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, kTextPlain, "internal error\n");
    }
  }

  static MHD_Result Answer(const StatusServer& server, MHD_Connection* connection,
                           absl::string_view url, absl::string_view method) {
    const StatusHandlers& handlers = server.handlers_;
    const bool metrics = url == "/metrics" && handlers.metrics;
    if (!metrics && url != "/healthz" && url != "/readyz") {
      return Respond(connection, MHD_HTTP_NOT_FOUND, kTextPlain,
                     handlers.metrics
                         ? "not found: the status endpoint serves /metrics, /healthz and /readyz\n"
                         : "not found: the status endpoint serves /healthz and /readyz\n");
    }
    if (method != MHD_HTTP_METHOD_GET && method != MHD_HTTP_METHOD_HEAD) {
      return Respond(connection, MHD_HTTP_METHOD_NOT_ALLOWED, kTextPlain,
                     "method not allowed: use GET or HEAD\n", "GET, HEAD");
    }
    if (metrics) {
      return Respond(connection, MHD_HTTP_OK, MetricsRegistry::kContentType, handlers.metrics());
    }
    return RespondProbe(connection, url == "/healthz" ? handlers.healthz : handlers.readyz);
  }
};

StatusServer::StatusServer(ListenAddress address, StatusHandlers handlers)
    : address_(std::move(address)), handlers_(std::move(handlers)) {}

StatusServer::~StatusServer() { Stop(); }

absl::StatusOr<std::unique_ptr<StatusServer>> StatusServer::Start(absl::string_view address,
                                                                  StatusHandlers handlers,
                                                                  StatusServerLimits limits) {
  ASSIGN_OR_RETURN(ListenAddress parsed, ParseListenAddress(address));
  return Start(parsed, std::move(handlers), limits);
}

absl::StatusOr<std::unique_ptr<StatusServer>> StatusServer::Start(const ListenAddress& address,
                                                                  StatusHandlers handlers,
                                                                  StatusServerLimits limits) {
  ListenAddress bound = address;
  ASSIGN_OR_RETURN(int fd, OpenListenSocket(bound));
  std::unique_ptr<StatusServer> server(new StatusServer(bound, std::move(handlers)));
  const unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ITC |
                         MHD_USE_ERROR_LOG | (bound.ipv6 ? MHD_USE_IPv6 : 0);
  // One option and its values per line.
  // clang-format off
  server->daemon_ = MHD_start_daemon(
      flags, /*port=*/0, /*apc=*/nullptr, /*apc_cls=*/nullptr,
      &Callbacks::HandleRequest, server.get(),
      MHD_OPTION_EXTERNAL_LOGGER, &LogFromMhd, nullptr,
      MHD_OPTION_LISTEN_SOCKET, fd,
      MHD_OPTION_CONNECTION_LIMIT, limits.max_connections,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, limits.max_connections_per_ip,
      MHD_OPTION_CONNECTION_TIMEOUT, limits.connection_timeout_seconds,
      MHD_OPTION_END);
  // clang-format on
  if (server->daemon_ == nullptr) {
    // Not closed here: libmicrohttpd closes the socket itself when it fails after taking it
    // (threads, memory); it leaves it open only for bad flags, which are constant and tested.
    return absl::InternalError(absl::StrCat("cannot serve on ", bound.ToString(),
                                            ": libmicrohttpd did not start (threads or memory)"));
  }
  return server;
}

void StatusServer::Stop() {
  std::lock_guard lock(stop_mu_);
  if (daemon_ == nullptr) return;
  // Joins the polling thread and closes the listening socket and every connection.
  MHD_stop_daemon(daemon_);
  daemon_ = nullptr;
}

}  // namespace ember
