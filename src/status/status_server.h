// The agent's status endpoint over HTTP (libmicrohttpd): /metrics for Prometheus, /healthz and
// /readyz for liveness and readiness probes (kubelet, systemd, load balancers).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "status/listen_address.h"

struct MHD_Daemon;
struct MHD_Connection;

namespace ember {

struct ProbeResult {
  bool ok = true;
  std::string detail;  // why not ok (or a note when ok); one line, shown to whoever probes
};

// Every handler runs on the server's thread, one request at a time, while the agent's threads go
// on: it must be thread-safe and quick (it holds up the other requests), and must not call Stop.
// An empty handler: /metrics answers 404, a probe always answers ok.
struct StatusHandlers {
  std::function<std::string()> metrics = nullptr;  // text exposition format: Registry::Render
  std::function<ProbeResult()> healthz = nullptr;  // liveness: not ok restarts the agent
  std::function<ProbeResult()> readyz = nullptr;   // readiness: not ok takes it out of rotation
};

// Bounds on what clients may hold. The defaults suit the agent; tests shorten the timeout.
struct StatusServerLimits {
  // At most this many connections at once, and this many from one IP address, so that one stuck
  // or hostile client cannot starve the kubelet's probes; more are closed at once.
  unsigned max_connections = 32;
  unsigned max_connections_per_ip = 8;
  // A connection idle this long (a stalled client) is closed.
  unsigned connection_timeout_seconds = 10;
};

// GET and HEAD of /metrics (200, text/plain; version=0.0.4), /healthz and /readyz (200 "ok\n",
// or 503 and the detail); other paths 404, other methods 405. A handler that throws answers 500.
class StatusServer {
 public:
  // Binds and listens before it returns: a bad address or a port in use is an error here, with
  // one line that names the address. Serving runs on libmicrohttpd's own thread.
  static absl::StatusOr<std::unique_ptr<StatusServer>> Start(const ListenAddress& address,
                                                             StatusHandlers handlers,
                                                             StatusServerLimits limits = {});
  // `address` as ParseListenAddress reads it.
  static absl::StatusOr<std::unique_ptr<StatusServer>> Start(absl::string_view address,
                                                             StatusHandlers handlers,
                                                             StatusServerLimits limits = {});

  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;
  ~StatusServer();  // Stop()

  // Closes the listening socket and every connection, and waits for a handler that is running.
  // Idempotent; from any thread but a handler's.
  void Stop();

  // The bound address; its port is the chosen one when port 0 was asked for.
  const ListenAddress& address() const { return address_; }

 private:
  StatusServer(ListenAddress address, StatusHandlers handlers);

  // libmicrohttpd's callbacks, in status_server.cc.
  struct Callbacks;
  friend struct Callbacks;

  const ListenAddress address_;
  const StatusHandlers handlers_;
  std::mutex stop_mu_;
  MHD_Daemon* daemon_ = nullptr;  // null once stopped
};

}  // namespace ember
