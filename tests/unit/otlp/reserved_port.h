// A loopback port that refuses connections until released: an endpoint that is down, at an address
// a receiver can be started on later.
#pragma once

namespace ember::testing {

class ReservedPort {
 public:
  ReservedPort();  // binds 127.0.0.1:0 without listening; port() is 0 when that failed
  ~ReservedPort();
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;

  int port() const { return port_; }
  // Frees the port for a receiver (which binds it with SO_REUSEADDR).
  void Release();

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace ember::testing
