// The exporter over OTLP/HTTP against a small HTTP/1.1 receiver on loopback: the request (path,
// content type, gzip, headers, a valid body), retries on 429/502/503/504 and connection failures
// honouring Retry-After, drops on 400, partial success in the response body, the timeout, and
// TLS (untrusted certificate, no plaintext fallback, CA file, mTLS).
#include <google/protobuf/util/message_differencer.h>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"
#include "otlp/profile_exporter.h"
#include "support/test_certificates.h"
#include "unit/otlp/http_test_receiver.h"
#include "unit/otlp/log_capture.h"
#include "unit/otlp/reserved_port.h"
#include "unit/otlp/test_requests.h"
#include "unit/otlp/wait_for.h"

namespace ember {
namespace {

namespace collector_pb = opentelemetry::proto::collector::profiles::v1development;
using ::ember::testing::GetTestCertificates;
using ::ember::testing::HttpReceiverOptions;
using ::ember::testing::HttpReply;
using ::ember::testing::HttpTestReceiver;
using ::ember::testing::LogCapture;
using ::ember::testing::MakeTestRequest;
using ::ember::testing::ReceivedHttpRequest;
using ::ember::testing::ReservedPort;
using ::ember::testing::TestCertificates;
using ::ember::testing::WaitFor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSecret[] = "Bearer s3cr3t-t0ken";

ExporterConfig HttpConfig(const std::string& url) {
  ExporterConfig config;
  config.protocol = OtlpProtocol::kHttpProtobuf;
  config.target = url;
  config.tls = absl::StartsWith(url, "https://");
  config.timeout = absl::Seconds(5);
  return config;
}

ExporterLimits FastLimits() {
  ExporterLimits limits;
  limits.initial_backoff = absl::Milliseconds(20);
  limits.max_backoff = absl::Milliseconds(200);
  return limits;
}

std::unique_ptr<ProfileExporter> MustCreate(const ExporterConfig& config) {
  absl::StatusOr<std::unique_ptr<ProfileExporter>> exporter =
      ProfileExporter::Create(config, FastLimits());
  EXPECT_TRUE(exporter.ok()) << exporter.status();
  return exporter.ok() ? *std::move(exporter) : nullptr;
}

std::unique_ptr<HttpTestReceiver> MustStart(const HttpReceiverOptions& options = {}) {
  std::unique_ptr<HttpTestReceiver> receiver = HttpTestReceiver::Start(options);
  EXPECT_NE(receiver, nullptr);
  return receiver;
}

HttpReceiverOptions TlsReceiver(const TestCertificates& certificates, bool require_client_cert) {
  HttpReceiverOptions options;
  options.cert_file = certificates.server_cert;
  options.key_file = certificates.server_key;
  if (require_client_cert) options.client_ca_file = certificates.ca_cert;
  return options;
}

TEST(HttpExporterTest, PostsValidProtobufToTheProfilesPath) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  ExporterConfig config = HttpConfig(receiver->Url());
  config.headers = {{"authorization", kSecret}, {"x-scope-orgid", "tenant-1"}};
  auto exporter = MustCreate(config);
  ASSERT_NE(exporter, nullptr);
  std::vector<ProfileExporter::Request> sent;
  for (int id = 0; id < 3; ++id) {
    sent.push_back(MakeTestRequest(id, 3000));
    exporter->Enqueue(sent.back());
  }
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 3; }));
  std::vector<ReceivedHttpRequest> requests = receiver->requests();
  ASSERT_EQ(requests.size(), 3u);
  for (size_t i = 0; i < requests.size(); ++i) {
    const ReceivedHttpRequest& request = requests[i];
    EXPECT_EQ(request.method, "POST");
    EXPECT_EQ(request.path, "/v1development/profiles");
    EXPECT_EQ(request.Header("content-type"), "application/x-protobuf");
    EXPECT_EQ(request.Header("content-encoding"), "gzip");
    EXPECT_TRUE(request.gunzipped);
    EXPECT_LT(request.body.size(), sent[i].ByteSizeLong() - 2000);  // the padding compresses
    EXPECT_EQ(request.Header("authorization"), kSecret);
    EXPECT_EQ(request.Header("x-scope-orgid"), "tenant-1");
    ASSERT_TRUE(request.request.has_value());
    EXPECT_TRUE(request.valid.ok()) << request.valid;
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*request.request, sent[i]));
  }
  EXPECT_THAT(receiver->DeliveredIds(), ElementsAre(0, 1, 2));
  EXPECT_EQ(exporter->stats().retries, 0u);
}

TEST(HttpExporterTest, WithoutGzipTheBodyIsThePlainRequest) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  ExporterConfig config = HttpConfig(receiver->Url());
  config.gzip = false;
  auto exporter = MustCreate(config);
  ASSERT_NE(exporter, nullptr);
  ProfileExporter::Request sent = MakeTestRequest(0);
  exporter->Enqueue(sent);
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 1; }));
  ReceivedHttpRequest request = receiver->requests().at(0);
  EXPECT_EQ(request.Header("content-encoding"), "");
  EXPECT_EQ(request.body, sent.SerializeAsString());
}

TEST(HttpExporterTest, Retries503AfterRetryAfter) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  receiver->Script({{.status = 503, .retry_after = "1"}});
  auto exporter = MustCreate(HttpConfig(receiver->Url()));  // backoff 20-200 ms
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(0));
  exporter->Enqueue(MakeTestRequest(1));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 2; }));
  EXPECT_THAT(receiver->DeliveredIds(), ElementsAre(0, 1));
  std::vector<absl::Time> times = receiver->attempt_times();
  ASSERT_EQ(times.size(), 3u);
  EXPECT_GE(times[1] - times[0], absl::Seconds(1));
  EXPECT_EQ(exporter->stats().retries, 1u);
}

TEST(HttpExporterTest, Retries429And502And504) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  receiver->Script({{.status = 429}, {.status = 502}, {.status = 504}});
  auto exporter = MustCreate(HttpConfig(receiver->Url()));
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 1; }));
  EXPECT_EQ(receiver->attempts(), 4);
  EXPECT_EQ(exporter->stats().retries, 3u);
}

TEST(HttpExporterTest, DropsOn400AndLogsTheReceiversMessage) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  google::rpc::Status status;
  status.set_code(3);
  status.set_message("profile 0 has a bad stack index");
  receiver->Script({{.status = 400, .body = status.SerializeAsString()}});
  LogCapture log;
  ExporterConfig config = HttpConfig(receiver->Url());
  config.headers = {{"authorization", kSecret}};
  auto exporter = MustCreate(config);
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(0));
  exporter->Enqueue(MakeTestRequest(1));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 1; }));
  EXPECT_THAT(receiver->DeliveredIds(), ElementsAre(1));
  ExporterStats stats = exporter->stats();
  EXPECT_EQ(stats.failed, 1u);
  EXPECT_EQ(stats.retries, 0u);
  EXPECT_EQ(receiver->attempts(), 2);
  EXPECT_THAT(log.text(), HasSubstr("HTTP 400: profile 0 has a bad stack index"));
  EXPECT_THAT(log.text(), Not(HasSubstr("s3cr3t")));
}

TEST(HttpExporterTest, PartialSuccessInTheResponseBody) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  collector_pb::ExportProfilesServiceResponse response;
  response.mutable_partial_success()->set_rejected_profiles(4);
  response.mutable_partial_success()->set_error_message("4 profiles too old");
  receiver->Script({{.body = response.SerializeAsString()}});
  LogCapture log;
  auto exporter = MustCreate(HttpConfig(receiver->Url()));
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 1; }));
  ExporterStats stats = exporter->stats();
  EXPECT_EQ(stats.partial_successes, 1u);
  EXPECT_EQ(stats.rejected_profiles, 4u);
  EXPECT_THAT(log.text(), HasSubstr("4 profiles too old"));
}

TEST(HttpExporterTest, ConnectionRefusedThenUp) {
  ReservedPort port;
  ASSERT_NE(port.port(), 0);
  auto exporter = MustCreate(
      HttpConfig(absl::StrCat("http://127.0.0.1:", port.port(), "/v1development/profiles")));
  ASSERT_NE(exporter, nullptr);
  for (int id = 0; id < 3; ++id) exporter->Enqueue(MakeTestRequest(id));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().retries >= 3; }));
  EXPECT_EQ(exporter->stats().intervals_sent, 0u);
  port.Release();
  auto receiver = MustStart({.port = port.port()});
  ASSERT_NE(receiver, nullptr);
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 3; }));
  EXPECT_THAT(receiver->DeliveredIds(), ElementsAre(0, 1, 2));
}

TEST(HttpExporterTest, SlowerThanTheTimeoutIsRetried) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  receiver->Script({{.delay = absl::Seconds(3)}});
  ExporterConfig config = HttpConfig(receiver->Url());
  config.timeout = absl::Milliseconds(300);
  auto exporter = MustCreate(config);
  ASSERT_NE(exporter, nullptr);
  absl::Time start = absl::Now();
  exporter->Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 1; }));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(exporter->stats().retries, 1u);
  EXPECT_EQ(receiver->attempts(), 2);
}

TEST(HttpExporterTest, ShutdownCancelsAnAnswerThatIsLate) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  receiver->Script({{.delay = absl::Seconds(8)}});
  auto exporter = MustCreate(HttpConfig(receiver->Url()));  // timeout 5 s
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return receiver->attempts() == 1; }));
  absl::Time start = absl::Now();
  exporter->Shutdown(absl::Milliseconds(200));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(exporter->stats().dropped_at_shutdown, 1u);
  EXPECT_EQ(exporter->stats().retries, 0u);
}

void ExpectNotDelivered(ProfileExporter& exporter, HttpTestReceiver& receiver) {
  exporter.Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return exporter.stats().retries >= 3; }));
  EXPECT_EQ(exporter.stats().intervals_sent, 0u);
  EXPECT_EQ(receiver.attempts(), 0);
  EXPECT_GE(receiver.refused_connections(), 1);
}

TEST(HttpExporterTest, UntrustedServerCertificateIsNotDelivered) {
  const TestCertificates* certificates = GetTestCertificates();
  ASSERT_NE(certificates, nullptr);
  auto receiver = MustStart(TlsReceiver(*certificates, false));
  ASSERT_NE(receiver, nullptr);
  ExporterConfig config = HttpConfig(receiver->Url());
  ASSERT_TRUE(config.tls);
  config.ca_file = certificates->other_ca_cert;
  auto exporter = MustCreate(config);
  ASSERT_NE(exporter, nullptr);
  ExpectNotDelivered(*exporter, *receiver);
}

TEST(HttpExporterTest, HttpsNeverFallsBackToPlaintext) {
  const TestCertificates* certificates = GetTestCertificates();
  ASSERT_NE(certificates, nullptr);
  auto receiver = MustStart();  // plaintext
  ASSERT_NE(receiver, nullptr);
  ExporterConfig config =
      HttpConfig(absl::StrCat("https://127.0.0.1:", receiver->port(), "/v1development/profiles"));
  config.ca_file = certificates->ca_cert;
  auto exporter = MustCreate(config);
  ASSERT_NE(exporter, nullptr);
  ExpectNotDelivered(*exporter, *receiver);
}

TEST(HttpExporterTest, TrustedCaFileDelivers) {
  const TestCertificates* certificates = GetTestCertificates();
  ASSERT_NE(certificates, nullptr);
  auto receiver = MustStart(TlsReceiver(*certificates, false));
  ASSERT_NE(receiver, nullptr);
  ExporterConfig config = HttpConfig(receiver->Url());
  config.ca_file = certificates->ca_cert;
  auto exporter = MustCreate(config);
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 1; }));
  EXPECT_THAT(receiver->DeliveredIds(), ElementsAre(0));
}

TEST(HttpExporterTest, MutualTls) {
  const TestCertificates* certificates = GetTestCertificates();
  ASSERT_NE(certificates, nullptr);
  auto receiver = MustStart(TlsReceiver(*certificates, true));
  ASSERT_NE(receiver, nullptr);
  ExporterConfig config = HttpConfig(receiver->Url());
  config.ca_file = certificates->ca_cert;
  {
    SCOPED_TRACE("no client certificate");
    auto exporter = MustCreate(config);
    ASSERT_NE(exporter, nullptr);
    ExpectNotDelivered(*exporter, *receiver);
  }
  config.client_cert_file = certificates->client_cert;
  config.client_key_file = certificates->client_key;
  auto exporter = MustCreate(config);
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(1));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 1; }));
  EXPECT_THAT(receiver->DeliveredIds(), ElementsAre(1));
}

TEST(HttpExporterTest, CreateRefusesWhatCanNeverWork) {
  ExporterConfig config = HttpConfig("http://127.0.0.1:4318/v1development/profiles");
  config.tls = true;  // TLS asked for, plaintext URL
  EXPECT_FALSE(ProfileExporter::Create(config).ok());

  config = HttpConfig("https://127.0.0.1:4318/v1development/profiles");
  config.client_cert_file = "/nonexistent/client.pem";
  config.client_key_file = "/nonexistent/client.key";
  absl::StatusOr<std::unique_ptr<ProfileExporter>> exporter = ProfileExporter::Create(config);
  ASSERT_FALSE(exporter.ok());
  EXPECT_THAT(exporter.status().message(), HasSubstr("/nonexistent/client.pem"));

  config = HttpConfig("http://127.0.0.1:4318/v1development/profiles");
  config.headers = {{"authorization", "s3cr3t\r\nx-injected: 1"}};
  exporter = ProfileExporter::Create(config);
  ASSERT_FALSE(exporter.ok());
  EXPECT_THAT(exporter.status().message(), Not(HasSubstr("s3cr3t")));
}

TEST(RetryAfterTest, SecondsOrHttpDate) {
  absl::Time now = absl::FromUnixSeconds(1'700'000'000);  // Tue, 14 Nov 2023 22:13:20 GMT
  EXPECT_EQ(ParseRetryAfter("120", now), absl::Seconds(120));
  EXPECT_EQ(ParseRetryAfter(" 0 ", now), absl::ZeroDuration());
  EXPECT_EQ(ParseRetryAfter("Tue, 14 Nov 2023 22:14:00 GMT", now), absl::Seconds(40));
  EXPECT_EQ(ParseRetryAfter("Tue, 14 Nov 2023 22:00:00 GMT", now), absl::ZeroDuration());
  EXPECT_EQ(ParseRetryAfter("-5", now), std::nullopt);
  EXPECT_EQ(ParseRetryAfter("soon", now), std::nullopt);
  EXPECT_EQ(ParseRetryAfter("", now), std::nullopt);
  EXPECT_EQ(ParseRetryAfter("99999999999999999999999", now), std::nullopt);
}

}  // namespace
}  // namespace ember
