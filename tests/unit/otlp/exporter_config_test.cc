// The exporter's settings from flags and OTEL_EXPORTER_OTLP_* variables, and their errors.
#include "otlp/exporter_config.h"

#include <map>

#include "gtest/gtest.h"

namespace ember {
namespace {

struct Env {
  std::map<std::string, std::string> values;
  std::optional<std::string> operator()(const char* name) const {
    auto it = values.find(name);
    return it == values.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
};

absl::StatusOr<std::optional<ExporterConfig>> Resolve(const ExporterFlags& flags,
                                                      const Env& env = {}) {
  return ResolveExporterConfig(flags, env);
}

ExporterConfig Resolved(const ExporterFlags& flags, const Env& env = {}) {
  auto config = Resolve(flags, env);
  EXPECT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config.ok() && config->has_value());
  return config.ok() && config->has_value() ? **config : ExporterConfig{};
}

TEST(ExporterConfigTest, NoEndpointAnywhereMeansNoExport) {
  auto config = Resolve({}, Env{{{"OTEL_EXPORTER_OTLP_HEADERS", "a=b"}}});
  ASSERT_TRUE(config.ok());
  EXPECT_FALSE(config->has_value());
}

TEST(ExporterConfigTest, GrpcTargetsAreHostAndPortWithTlsUnlessAskedOtherwise) {
  ExporterConfig tls = Resolved({.endpoint = "collector.example:4317"});
  EXPECT_EQ(tls.protocol, OtlpProtocol::kGrpc);
  EXPECT_EQ(tls.target, "collector.example:4317");
  EXPECT_TRUE(tls.tls);
  EXPECT_TRUE(tls.gzip);
  EXPECT_EQ(tls.timeout, absl::Seconds(10));

  EXPECT_EQ(Resolved({.endpoint = "https://collector.example"}).target, "collector.example:4317");
  ExporterConfig plain = Resolved({.endpoint = "http://127.0.0.1:4040/"});
  EXPECT_EQ(plain.target, "127.0.0.1:4040");
  EXPECT_FALSE(plain.tls);
  EXPECT_FALSE(Resolved({.endpoint = "localhost:4317", .insecure = true}).tls);
  EXPECT_FALSE(
      Resolved({.endpoint = "localhost:4317"}, Env{{{"OTEL_EXPORTER_OTLP_INSECURE", "TRUE"}}}).tls);
  EXPECT_EQ(Resolved({.endpoint = "[::1]"}).target, "[::1]:4317");
  EXPECT_EQ(Resolved({.endpoint = "[::1]:9000"}).target, "[::1]:9000");
}

TEST(ExporterConfigTest, HttpPostsToTheProfilesPath) {
  // The general variable is a base URL: the signal's path is appended.
  ExporterConfig general =
      Resolved({}, Env{{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/base/"},
                        {"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"}}});
  EXPECT_EQ(general.protocol, OtlpProtocol::kHttpProtobuf);
  EXPECT_EQ(general.target, "http://collector:4318/base/v1development/profiles");
  EXPECT_FALSE(general.tls);
  // The profiles variable is used as given.
  ExporterConfig specific = Resolved(
      {}, Env{{{"OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", "https://pyroscope:4040/custom/path"},
               {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:1"},
               {"OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL", "http/protobuf"},
               {"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}}});
  EXPECT_EQ(specific.target, "https://pyroscope:4040/custom/path");
  EXPECT_TRUE(specific.tls);
  EXPECT_EQ(Resolved({.endpoint = "collector", .protocol = "http/protobuf"}).target,
            "https://collector:4318/v1development/profiles");
}

TEST(ExporterConfigTest, FlagsWinOverTheEnvironment) {
  ExporterConfig config =
      Resolved({.endpoint = "flag:1", .protocol = "grpc", .timeout = absl::Seconds(3)},
               Env{{{"OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", "env:2"},
                    {"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"},
                    {"OTEL_EXPORTER_OTLP_TIMEOUT", "500"},
                    {"OTEL_EXPORTER_OTLP_COMPRESSION", "none"}}});
  EXPECT_EQ(config.target, "flag:1");
  EXPECT_EQ(config.protocol, OtlpProtocol::kGrpc);
  EXPECT_EQ(config.timeout, absl::Seconds(3));
  EXPECT_FALSE(config.gzip);
  EXPECT_EQ(Resolved({.endpoint = "a:1"}, Env{{{"OTEL_EXPORTER_OTLP_TIMEOUT", "2500"}}}).timeout,
            absl::Milliseconds(2500));
}

TEST(ExporterConfigTest, HeadersMergeWithFlagsLastAndValuesDecoded) {
  ExporterConfig config = Resolved(
      {.endpoint = "a:1", .headers = {"X-Scope-OrgID=tenant-2", "authorization=Bearer%20flag"}},
      Env{{{"OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Basic%20abc%3D%3D, x-one = 1 "},
           {"OTEL_EXPORTER_OTLP_PROFILES_HEADERS", "x-scope-orgid=tenant-1"}}});
  EXPECT_EQ(config.headers,
            (std::vector<OtlpHeader>{
                {"authorization", "Bearer flag"}, {"x-one", "1"}, {"x-scope-orgid", "tenant-2"}}));
  auto decoded = ParseOtlpHeaders("k=a%2Cb%3Dc", "test");
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ((*decoded)[0].value, "a,b=c");
}

TEST(ExporterConfigTest, ClientCertificateAndKeyGoTogether) {
  ExporterConfig config = Resolved({.endpoint = "a:1",
                                    .ca_file = "/etc/ca.pem",
                                    .client_cert_file = "/etc/c.pem",
                                    .client_key_file = "/etc/k.pem"});
  EXPECT_EQ(config.ca_file, "/etc/ca.pem");
  EXPECT_EQ(config.client_cert_file, "/etc/c.pem");
  EXPECT_EQ(config.client_key_file, "/etc/k.pem");
  ExporterConfig from_env =
      Resolved({.endpoint = "a:1"}, Env{{{"OTEL_EXPORTER_OTLP_CERTIFICATE", "/env/ca.pem"}}});
  EXPECT_EQ(from_env.ca_file, "/env/ca.pem");
}

struct BadCase {
  ExporterFlags flags;
  Env env;
  std::string starts_with;
};

TEST(ExporterConfigTest, BadSettingsNameTheirSourceInOneLineWithoutSecrets) {
  const std::vector<BadCase> cases = {
      {{.endpoint = "ftp://x"}, {}, "--otlp-endpoint: expected"},
      {{.endpoint = ""}, {}, "--otlp-endpoint: expected"},
      {{.endpoint = "a:1", .protocol = "http/json"}, {}, "--otlp-protocol: expected grpc or"},
      {{},
       Env{{{"OTEL_EXPORTER_OTLP_ENDPOINT", "a:1"}, {"OTEL_EXPORTER_OTLP_PROTOCOL", "udp"}}},
       "OTEL_EXPORTER_OTLP_PROTOCOL: expected"},
      {{.endpoint = "https://a:1", .insecure = true}, {}, "--otlp-insecure: contradicts"},
      {{.endpoint = "a:1", .client_cert_file = "/c.pem"}, {}, "--otlp-client-cert: a client"},
      {{.endpoint = "http://a:1", .ca_file = "/ca.pem"}, {}, "--otlp-ca-file: TLS files"},
      {{.endpoint = "a:1"},
       Env{{{"OTEL_EXPORTER_OTLP_TIMEOUT", "soon"}}},
       "OTEL_EXPORTER_OTLP_TIMEOUT: expected"},
      {{.endpoint = "a:1"},
       Env{{{"OTEL_EXPORTER_OTLP_INSECURE", "yes"}}},
       "OTEL_EXPORTER_OTLP_INSECURE: expected"},
      {{.endpoint = "a:1"},
       Env{{{"OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"}}},
       "OTEL_EXPORTER_OTLP_COMPRESSION: expected"},
      {{.endpoint = "a:1", .headers = {"secret-token-without-equals"}},
       {},
       "--otlp-header: expected"},
      {{.endpoint = "a:1"},
       Env{{{"OTEL_EXPORTER_OTLP_HEADERS", "api-key=s3cr%zz"}}},
       "OTEL_EXPORTER_OTLP_HEADERS: bad percent-encoding in header 'api-key'"},
  };
  for (const BadCase& c : cases) {
    auto config = Resolve(c.flags, c.env);
    ASSERT_FALSE(config.ok()) << c.starts_with;
    std::string message(config.status().message());
    EXPECT_EQ(message.rfind(c.starts_with, 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.find("secret-token"), std::string::npos) << message;
    EXPECT_EQ(message.find("s3cr"), std::string::npos) << message;
  }
}

TEST(ExporterConfigTest, DescriptionRedactsHeaderValues) {
  ExporterConfig config =
      Resolved({.endpoint = "https://pyroscope.example", .headers = {"authorization=Bearer xyz"}});
  std::string text = DescribeExporterConfig(config);
  EXPECT_NE(text.find("pyroscope.example:4317"), std::string::npos) << text;
  EXPECT_NE(text.find("authorization=<redacted>"), std::string::npos) << text;
  EXPECT_EQ(text.find("xyz"), std::string::npos) << text;
  EXPECT_NE(text.find("TLS"), std::string::npos) << text;
}

// Everything a secret can come in (header values from flags and both variables, the endpoint's
// userinfo and query string, a client key) stays out of the line the agent logs and out of
// endpoint errors, while verification stays on.
TEST(ExporterConfigTest, DescriptionNeverContainsSecrets) {
  ExporterConfig config = Resolved(
      {.endpoint = "https://tenant:pa55word@collector.example/otlp?api_key=k3y",
       .protocol = "http/protobuf",
       .headers = {"authorization=Bearer flag-t0ken"},
       .client_cert_file = "/etc/ember/client.pem",
       .client_key_file = "/etc/ember/client-key.pem"},
      Env{{{"OTEL_EXPORTER_OTLP_PROFILES_HEADERS", "x-scope-orgid=env-0rg,api-key=env%2Ds3cret"},
           {"OTEL_EXPORTER_OTLP_HEADERS", "x-general=general-t0ken"}}});
  EXPECT_TRUE(config.tls);
  std::string text = DescribeExporterConfig(config);
  for (const char* secret : {"pa55word", "tenant", "k3y", "flag-t0ken", "Bearer", "env-0rg",
                             "env-s3cret", "env%2Ds3cret", "general-t0ken", "client-key.pem"}) {
    EXPECT_EQ(text.find(secret), std::string::npos) << secret << " in: " << text;
  }
  EXPECT_NE(text.find("https://<redacted>@collector.example:4318/otlp?<redacted>"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("authorization=<redacted>"), std::string::npos) << text;
  EXPECT_NE(text.find("TLS"), std::string::npos) << text;
  EXPECT_NE(text.find("client certificate"), std::string::npos) << text;

  auto bad = Resolve({.endpoint = "ftp://tenant:pa55word@collector.example/?token=k3y"});
  ASSERT_FALSE(bad.ok());
  std::string message(bad.status().message());
  EXPECT_EQ(message.find("pa55word"), std::string::npos) << message;
  EXPECT_EQ(message.find("k3y"), std::string::npos) << message;
}

TEST(ExporterConfigTest, RedactUrlKeepsWhereButNotWho) {
  EXPECT_EQ(RedactUrl("collector:4317"), "collector:4317");
  EXPECT_EQ(RedactUrl("https://u:p@h:1/path"), "https://<redacted>@h:1/path");
  EXPECT_EQ(RedactUrl("http://h/p?token=1#f"), "http://h/p?<redacted>");
  EXPECT_EQ(RedactUrl("u@h?x"), "<redacted>@h?<redacted>");
  EXPECT_EQ(RedactUrl("http://[::1]:4318/a@b"), "http://[::1]:4318/a@b");
}

}  // namespace
}  // namespace ember
