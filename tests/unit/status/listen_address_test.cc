// ParseListenAddress: the accepted forms and a clear line for each mistake.
#include "status/listen_address.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ember {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(ListenAddressTest, ParsesIpv4AndBracketedIpv6) {
  auto v4 = ParseListenAddress("127.0.0.1:9464");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 9464);
  EXPECT_FALSE(v4->ipv6);
  EXPECT_EQ(v4->ToString(), "127.0.0.1:9464");

  auto v6 = ParseListenAddress("[::1]:0");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  EXPECT_TRUE(v6->ipv6);
  EXPECT_EQ(v6->ToString(), "[::1]:0");

  EXPECT_EQ(ParseListenAddress("0.0.0.0:65535")->port, 65535);
  EXPECT_TRUE(ParseListenAddress("[::]:9464").ok());
  EXPECT_TRUE(ParseListenAddress("[fe80::1]:80").ok());
}

TEST(ListenAddressTest, BadInputSaysWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "no ':port'"},
      {"9464", "no ':port'"},
      {":9464", "no host"},
      {"localhost:9464", "write 127.0.0.1 rather than localhost"},
      {"example.com:80", "not an IPv4 address"},
      {"1.2.3:80", "'1.2.3' is not an IPv4 address"},
      {"256.0.0.1:80", "not an IPv4 address"},
      {"127.0.0.1:", "no port"},
      {"127.0.0.1:65536", "the port is a number from 0 to 65535"},
      {"127.0.0.1:-1", "the port is a number"},
      {"127.0.0.1:+80", "the port is a number"},
      {"127.0.0.1:80x", "the port is a number"},
      {"127.0.0.1:000009464", "the port is a number"},
      {"::1:9464", "an IPv6 address goes in brackets"},
      {"[::1:9464", "no ']'"},
      {"[::1]9464", "no ':port' after ']'"},
      {"[::1]", "no ':port' after ']'"},
      {"[127.0.0.1]:80", "not an IPv6 address"},
      {"[fe80::1%eth0]:80", "not an IPv6 address"},
  };
  for (const auto& [text, why] : cases) {
    auto parsed = ParseListenAddress(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    std::string message(parsed.status().message());
    // Reads well after a flag name: "--metrics-address: expected ..., got '...' (why)".
    EXPECT_THAT(message, StartsWith("expected IPv4:port or [IPv6]:port")) << text;
    EXPECT_THAT(message, HasSubstr("got '" + text + "'"));
    EXPECT_THAT(message, HasSubstr(why)) << text;
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace ember
