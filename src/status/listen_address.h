// The address the status endpoint listens on: "IPv4:port" or "[IPv6]:port", port 0 for any free
// one. Header-only so the flag parser can check --metrics-address without linking the server.
#pragma once

#include <arpa/inet.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ember {

struct ListenAddress {
  std::string host;  // an IP literal, without brackets
  uint16_t port = 0;
  bool ipv6 = false;

  // The form ParseListenAddress reads: 127.0.0.1:9464, [::1]:9464.
  std::string ToString() const {
    return ipv6 ? absl::StrCat("[", host, "]:", port) : absl::StrCat(host, ":", port);
  }
};

// The error message reads "expected ..., got '...'" so a flag parser can prefix the flag's name.
// Host names are refused: the endpoint binds one address, and resolving a name here would make
// it depend on DNS at start-up.
inline absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view text) {
  constexpr absl::string_view kExpected =
      "IPv4:port or [IPv6]:port such as 127.0.0.1:9464, 0.0.0.0:9464 or [::]:9464 (port 0: any "
      "free port)";
  auto error = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", kExpected, ", got '", text, "'",
                                                   why.empty() ? "" : " (", why,
                                                   why.empty() ? "" : ")"));
  };
  ListenAddress address;
  absl::string_view port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == absl::string_view::npos) return error("no ']' after the IPv6 address");
    address.host = std::string(text.substr(1, close - 1));
    address.ipv6 = true;
    absl::string_view rest = text.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return error("no ':port' after ']'");
    port = rest.substr(1);
    in6_addr parsed;
    if (inet_pton(AF_INET6, address.host.c_str(), &parsed) != 1) {
      return error(absl::StrCat("'", address.host, "' is not an IPv6 address"));
    }
  } else {
    size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) return error("no ':port'");
    address.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
    if (address.host.empty()) {
      return error("no host: 0.0.0.0 listens on every IPv4 address, [::] on every address");
    }
    if (address.host.find(':') != std::string::npos) {
      return error("an IPv6 address goes in brackets");
    }
    in_addr parsed;
    if (inet_pton(AF_INET, address.host.c_str(), &parsed) != 1) {
      return error(absl::StrCat("'", address.host, "' is not an IPv4 address; host names are not ",
                                "resolved, so write 127.0.0.1 rather than localhost"));
    }
  }
  uint32_t port_number = 0;
  bool digits = !port.empty() && port.size() <= 5 &&
                port.find_first_not_of("0123456789") == absl::string_view::npos;
  if (!digits || !absl::SimpleAtoi(port, &port_number) || port_number > 65535) {
    return error(port.empty() ? "no port" : "the port is a number from 0 to 65535");
  }
  address.port = static_cast<uint16_t>(port_number);
  return address;
}

}  // namespace ember
