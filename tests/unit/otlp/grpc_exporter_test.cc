// The exporter over gRPC against an in-process ProfilesService on loopback: what arrives (valid,
// in order, with headers as metadata, gzip), and the faults of issue 4: endpoint down at start-up,
// gone mid-run and back, UNAVAILABLE N times, slower than the deadline, partial success, a
// permanent error, queue overflow, and TLS (untrusted certificate, no plaintext fallback, CA
// file, mTLS).
#include <google/protobuf/util/message_differencer.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "otlp/profile_exporter.h"
#include "otlp/profiles_builder.h"
#include "support/many_stacks.h"
#include "support/test_certificates.h"
#include "unit/otlp/grpc_test_receiver.h"
#include "unit/otlp/log_capture.h"
#include "unit/otlp/reserved_port.h"
#include "unit/otlp/test_requests.h"
#include "unit/otlp/wait_for.h"

namespace ember {
namespace {

using ::ember::testing::GetTestCertificates;
using ::ember::testing::GrpcReceiverOptions;
using ::ember::testing::GrpcReply;
using ::ember::testing::GrpcTestReceiver;
using ::ember::testing::LogCapture;
using ::ember::testing::MakeTestRequest;
using ::ember::testing::ManyStacks;
using ::ember::testing::ReadFile;
using ::ember::testing::ReceivedExport;
using ::ember::testing::ReservedPort;
using ::ember::testing::ResourceAttribute;
using ::ember::testing::TestCertificates;
using ::ember::testing::WaitFor;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;

constexpr char kSecret[] = "Bearer s3cr3t-t0ken";

ExporterConfig PlaintextConfig(const std::string& target) {
  ExporterConfig config;
  config.protocol = OtlpProtocol::kGrpc;
  config.target = target;
  config.tls = false;
  config.timeout = absl::Seconds(5);
  return config;
}

ExporterConfig TlsConfig(int port) {
  ExporterConfig config = PlaintextConfig(absl::StrCat("127.0.0.1:", port));
  config.tls = true;
  return config;
}

ExporterLimits FastLimits() {
  ExporterLimits limits;
  limits.initial_backoff = absl::Milliseconds(20);
  limits.max_backoff = absl::Milliseconds(200);
  return limits;
}

std::unique_ptr<ProfileExporter> MustCreate(const ExporterConfig& config,
                                            ExporterLimits limits = FastLimits()) {
  absl::StatusOr<std::unique_ptr<ProfileExporter>> exporter =
      ProfileExporter::Create(config, limits);
  EXPECT_TRUE(exporter.ok()) << exporter.status();
  return exporter.ok() ? *std::move(exporter) : nullptr;
}

std::unique_ptr<GrpcTestReceiver> MustStart(const GrpcReceiverOptions& options = {}) {
  std::unique_ptr<GrpcTestReceiver> receiver = GrpcTestReceiver::Start(options);
  EXPECT_NE(receiver, nullptr) << "cannot listen on 127.0.0.1:" << options.port;
  return receiver;
}

GrpcReceiverOptions TlsReceiver(const TestCertificates& certificates, bool require_client_cert) {
  GrpcReceiverOptions options;
  options.cert_pem = ReadFile(certificates.server_cert);
  options.key_pem = ReadFile(certificates.server_key);
  if (require_client_cert) options.client_ca_pem = ReadFile(certificates.ca_cert);
  return options;
}

void ExpectAccounted(const ExporterStats& stats, uint64_t enqueued) {
  EXPECT_EQ(stats.intervals_sent + stats.dropped_queue_full + stats.failed +
                stats.dropped_at_shutdown + stats.queued_intervals,
            enqueued);
}

TEST(GrpcExporterTest, DeliversValidRequestsInOrderWithHeadersAsMetadata) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  ExporterConfig config = PlaintextConfig(receiver->target());
  config.headers = {{"authorization", kSecret}, {"x-scope-orgid", "tenant-1"}};
  auto exporter = MustCreate(config);
  ASSERT_NE(exporter, nullptr);

  std::vector<ProfileExporter::Request> sent;
  for (int id = 0; id < 3; ++id) {
    sent.push_back(MakeTestRequest(id));
    exporter->Enqueue(sent.back());
  }
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 3; }));
  std::vector<ReceivedExport> received = receiver->received();
  ASSERT_EQ(received.size(), 3u);
  for (size_t i = 0; i < received.size(); ++i) {
    EXPECT_TRUE(received[i].valid.ok()) << received[i].valid;
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(received[i].request, sent[i]))
        << "request " << i << " differs from what was enqueued";
    EXPECT_THAT(received[i].metadata, Contains(Pair("authorization", kSecret)));
    EXPECT_THAT(received[i].metadata, Contains(Pair("x-scope-orgid", "tenant-1")));
  }
  ExporterStats stats = exporter->stats();
  EXPECT_EQ(stats.intervals_sent, 3u);
  EXPECT_EQ(stats.retries, 0u);
  EXPECT_EQ(receiver->attempts(), 3);
}

// With gzip on, the receiver decodes the compressed request; one that refuses gzip shows the
// request really was compressed (and takes it uncompressed when gzip is off).
TEST(GrpcExporterTest, GzipCompressesAndTheReceiverDecodes) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  auto no_gzip_receiver = MustStart({.accept_gzip = false});
  ASSERT_NE(no_gzip_receiver, nullptr);

  ExporterConfig config = PlaintextConfig(receiver->target());
  config.gzip = true;
  auto exporter = MustCreate(config);
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(7, 4000));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 1; }));
  ASSERT_EQ(receiver->received().size(), 1u);
  EXPECT_TRUE(receiver->received()[0].valid.ok()) << receiver->received()[0].valid;
  EXPECT_EQ(testing::IntervalId(receiver->received()[0].request), 7);

  config.target = no_gzip_receiver->target();
  exporter = MustCreate(config);
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(8, 4000));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().failed == 1; }));
  EXPECT_EQ(no_gzip_receiver->attempts(), 0);

  config.gzip = false;
  exporter = MustCreate(config);
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(9, 4000));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 1; }));
  EXPECT_THAT(no_gzip_receiver->ReceivedIds(), ElementsAre(9));
}

TEST(GrpcExporterTest, UnavailableNTimesThenDelivered) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  receiver->Script({{.code = grpc::StatusCode::UNAVAILABLE, .message = "warming up"},
                    {.code = grpc::StatusCode::UNAVAILABLE, .message = "warming up"},
                    {.code = grpc::StatusCode::UNAVAILABLE, .message = "warming up"}});
  auto exporter = MustCreate(PlaintextConfig(receiver->target()));
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(0));
  exporter->Enqueue(MakeTestRequest(1));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 2; }));
  EXPECT_THAT(receiver->ReceivedIds(), ElementsAre(0, 1));
  EXPECT_EQ(receiver->attempts(), 5);
  ExporterStats stats = exporter->stats();
  EXPECT_EQ(stats.retries, 3u);
  EXPECT_EQ(stats.intervals_sent, 2u);
  EXPECT_EQ(stats.failed, 0u);
}

TEST(GrpcExporterTest, WaitsTheDelayOfRetryInfo) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  receiver->Script({{.code = grpc::StatusCode::UNAVAILABLE,
                     .message = "busy",
                     .retry_delay = absl::Milliseconds(600)}});
  auto exporter = MustCreate(PlaintextConfig(receiver->target()));  // backoff 20-200 ms
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 1; }));
  std::vector<absl::Time> times = receiver->attempt_times();
  ASSERT_EQ(times.size(), 2u);
  EXPECT_GE(times[1] - times[0], absl::Milliseconds(600));
  EXPECT_EQ(exporter->stats().retries, 1u);
}

// RESOURCE_EXHAUSTED is throttling only when the receiver says when to come back; without
// RetryInfo it is a limit no retry passes (OTLP spec), so that interval is dropped.
TEST(GrpcExporterTest, ResourceExhaustedIsRetriedOnlyWithRetryInfo) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  receiver->Script({{.code = grpc::StatusCode::RESOURCE_EXHAUSTED,
                     .message = "rate limited",
                     .retry_delay = absl::Milliseconds(50)},
                    {.code = grpc::StatusCode::RESOURCE_EXHAUSTED, .message = "too large"}});
  auto exporter = MustCreate(PlaintextConfig(receiver->target()));
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(0));
  exporter->Enqueue(MakeTestRequest(1));
  exporter->Enqueue(MakeTestRequest(2));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 2; }));
  // 0 is throttled, retried, then refused for good; 1 and 2 are taken.
  EXPECT_THAT(receiver->ReceivedIds(), ElementsAre(1, 2));
  ExporterStats stats = exporter->stats();
  EXPECT_EQ(stats.retries, 1u);
  EXPECT_EQ(stats.failed, 1u);
  EXPECT_EQ(receiver->attempts(), 4);
}

TEST(GrpcExporterTest, SlowerThanTheDeadlineIsRetried) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  receiver->Script({{.delay = absl::Seconds(3)}});
  ExporterConfig config = PlaintextConfig(receiver->target());
  config.timeout = absl::Milliseconds(300);
  LogCapture log;
  auto exporter = MustCreate(config);
  ASSERT_NE(exporter, nullptr);
  absl::Time start = absl::Now();
  exporter->Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 1; }));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));  // did not wait out the slow answer
  EXPECT_EQ(receiver->attempts(), 2);
  EXPECT_EQ(exporter->stats().retries, 1u);
  EXPECT_THAT(log.text(), HasSubstr("DEADLINE_EXCEEDED"));
}

TEST(GrpcExporterTest, PartialSuccessIsCountedAndLogged) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  receiver->Script(
      {{.rejected_profiles = 2, .partial_error_message = "2 profiles without samples"}});
  LogCapture log;
  auto exporter = MustCreate(PlaintextConfig(receiver->target()));
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(0));
  exporter->Enqueue(MakeTestRequest(1));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 2; }));
  ExporterStats stats = exporter->stats();
  EXPECT_EQ(stats.partial_successes, 1u);
  EXPECT_EQ(stats.rejected_profiles, 2u);
  EXPECT_THAT(log.text(), HasSubstr("2 profiles without samples"));
}

// A permanent error drops that interval only, is counted, and is logged once however often it
// comes back. Header values never reach the log.
TEST(GrpcExporterTest, InvalidArgumentDropsTheIntervalAndIsLoggedOnce) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  receiver->Script({{.code = grpc::StatusCode::INVALID_ARGUMENT, .message = "bad dictionary"},
                    {.code = grpc::StatusCode::INVALID_ARGUMENT, .message = "bad dictionary"}});
  LogCapture log;
  ExporterConfig config = PlaintextConfig(receiver->target());
  config.headers = {{"authorization", kSecret}};
  auto exporter = MustCreate(config);
  ASSERT_NE(exporter, nullptr);
  for (int id = 0; id < 3; ++id) exporter->Enqueue(MakeTestRequest(id));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 1; }));
  EXPECT_THAT(receiver->ReceivedIds(), ElementsAre(2));
  ExporterStats stats = exporter->stats();
  EXPECT_EQ(stats.failed, 2u);
  EXPECT_EQ(stats.retries, 0u);
  EXPECT_EQ(receiver->attempts(), 3);
  int mentions = 0;
  for (const std::string& line : log.lines()) mentions += absl::StrContains(line, "bad dictionary");
  EXPECT_EQ(mentions, 1) << log.text();
  EXPECT_THAT(log.text(), Not(HasSubstr("s3cr3t")));
}

// Intervals enqueued while nothing listens wait, and arrive in order once a receiver starts.
TEST(GrpcExporterTest, EndpointDownAtStartUpThenUp) {
  ReservedPort port;
  ASSERT_NE(port.port(), 0);
  auto exporter = MustCreate(PlaintextConfig(absl::StrCat("127.0.0.1:", port.port())));
  ASSERT_NE(exporter, nullptr);
  for (int id = 0; id < 5; ++id) exporter->Enqueue(MakeTestRequest(id));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().retries >= 3; }));
  EXPECT_EQ(exporter->stats().intervals_sent, 0u);
  EXPECT_EQ(exporter->stats().queued_intervals, 5u);

  port.Release();
  auto receiver = MustStart({.port = port.port()});
  ASSERT_NE(receiver, nullptr);
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 5; }));
  EXPECT_THAT(receiver->ReceivedIds(), ElementsAre(0, 1, 2, 3, 4));
  ExporterStats stats = exporter->stats();
  EXPECT_EQ(stats.intervals_sent, 5u);
  EXPECT_EQ(stats.queued_bytes, 0u);
  ExpectAccounted(stats, 5);
}

// During an outage memory stays within the bound: the newest intervals that fit are delivered
// after recovery, in order, and every older one is counted as dropped.
TEST(GrpcExporterTest, OutageLongerThanTheQueueKeepsTheNewest) {
  ReservedPort port;
  ASSERT_NE(port.port(), 0);
  ExporterLimits limits = FastLimits();
  const size_t size = MakeTestRequest(0, 2000).ByteSizeLong();
  limits.max_queue_bytes = size * 4 + size / 2;  // four intervals
  auto exporter = MustCreate(PlaintextConfig(absl::StrCat("127.0.0.1:", port.port())), limits);
  ASSERT_NE(exporter, nullptr);
  for (int id = 0; id < 12; ++id) {
    exporter->Enqueue(MakeTestRequest(id, 2000));
    EXPECT_LE(exporter->stats().queued_bytes, limits.max_queue_bytes);
  }
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().dropped_queue_full == 8; }));

  port.Release();
  auto receiver = MustStart({.port = port.port()});
  ASSERT_NE(receiver, nullptr);
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().queued_intervals == 0; }));
  EXPECT_THAT(receiver->ReceivedIds(), ElementsAre(8, 9, 10, 11));
  ExporterStats stats = exporter->stats();
  EXPECT_EQ(stats.intervals_sent, 4u);
  EXPECT_EQ(stats.dropped_queue_full, 8u);
  ExpectAccounted(stats, 12);
}

TEST(GrpcExporterTest, ReceiverGoneMidRunAndBack) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  const int port = receiver->port();
  auto exporter = MustCreate(PlaintextConfig(receiver->target()));
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(0));
  exporter->Enqueue(MakeTestRequest(1));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 2; }));

  receiver->Stop();
  for (int id = 2; id < 5; ++id) exporter->Enqueue(MakeTestRequest(id));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().retries >= 3; }));
  EXPECT_EQ(exporter->stats().queued_intervals, 3u);

  auto back = MustStart({.port = port});
  ASSERT_NE(back, nullptr);
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 5; }));
  EXPECT_THAT(back->ReceivedIds(), ElementsAre(2, 3, 4));
  EXPECT_EQ(exporter->stats().intervals_sent, 5u);
  ExpectAccounted(exporter->stats(), 5);
}

TEST(GrpcExporterTest, ShutdownDeliversWhatIsQueued) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  auto exporter = MustCreate(PlaintextConfig(receiver->target()));
  ASSERT_NE(exporter, nullptr);
  for (int id = 0; id < 4; ++id) exporter->Enqueue(MakeTestRequest(id));
  exporter->Shutdown(absl::Seconds(10));
  EXPECT_THAT(receiver->ReceivedIds(), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(exporter->stats().dropped_at_shutdown, 0u);
}

// A gRPC server refuses a message over 4 MiB unless told otherwise, as an OpenTelemetry Collector
// and Pyroscope do (the receiver here keeps that default): an interval that big is refused whole,
// and arrives in full as the parts BuildExportRequests makes of it.
TEST(GrpcExporterTest, AnIntervalOverTheReceiversLimitArrivesInParts) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  auto exporter = MustCreate(PlaintextConfig(receiver->target()));
  ASSERT_NE(exporter, nullptr);
  const ManyStacks many(100, 80, 400);  // 24,000 functions of over 400 bytes each
  const ResourceContext context;
  constexpr size_t kLimit = size_t{4} << 20;
  const ProfileExporter::Request whole = BuildExportRequest(many.profile, context);
  ASSERT_GT(whole.ByteSizeLong(), kLimit);
  exporter->Enqueue(whole);
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().failed == 1; }));
  EXPECT_THAT(receiver->received(), IsEmpty());

  const std::vector<ProfileExporter::Request> parts =
      BuildExportRequests(many.profile, context, kLimit);
  ASSERT_GE(parts.size(), 3u);
  for (const auto& part : parts) exporter->Enqueue(part);
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == parts.size(); }));
  int64_t total = 0;
  std::set<std::string> pids;
  for (const ReceivedExport& received : receiver->received()) {
    EXPECT_TRUE(received.valid.ok()) << received.valid;
    for (const auto& rp : received.request.resource_profiles()) {
      pids.insert(ResourceAttribute(rp.resource(), "process.pid"));
      for (const auto& sample : rp.scope_profiles(0).profiles(0).samples()) {
        total += sample.values(0);
      }
    }
  }
  EXPECT_EQ(total, many.total_count());
  EXPECT_EQ(pids.size(), 100u);
  EXPECT_EQ(exporter->stats().failed, 1u);
}

TEST(GrpcExporterTest, ShutdownGivesUpOnAnEndpointThatIsDown) {
  ReservedPort port;
  ASSERT_NE(port.port(), 0);
  auto exporter = MustCreate(PlaintextConfig(absl::StrCat("127.0.0.1:", port.port())));
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(0));
  exporter->Enqueue(MakeTestRequest(1));
  absl::Time start = absl::Now();
  exporter->Shutdown(absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(exporter->stats().dropped_at_shutdown, 2u);
}

TEST(GrpcExporterTest, ShutdownCancelsAnAnswerThatIsLate) {
  auto receiver = MustStart();
  ASSERT_NE(receiver, nullptr);
  receiver->Script({{.delay = absl::Seconds(8)}});
  auto exporter = MustCreate(PlaintextConfig(receiver->target()));  // timeout 5 s
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return receiver->attempts() == 1; }));
  absl::Time start = absl::Now();
  exporter->Shutdown(absl::Milliseconds(200));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(exporter->stats().dropped_at_shutdown, 1u);
  EXPECT_EQ(exporter->stats().retries, 0u);
}

// Attempts against a receiver the client must not talk to: wait until the exporter has retried a
// few times, then check nothing arrived.
void ExpectNotDelivered(ProfileExporter& exporter, GrpcTestReceiver& receiver) {
  exporter.Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return exporter.stats().retries >= 3; }));
  ExporterStats stats = exporter.stats();
  EXPECT_EQ(stats.intervals_sent, 0u);
  EXPECT_EQ(stats.queued_intervals, 1u);
  EXPECT_EQ(receiver.attempts(), 0);
}

TEST(GrpcExporterTest, UntrustedServerCertificateIsNotDelivered) {
  const TestCertificates* certificates = GetTestCertificates();
  ASSERT_NE(certificates, nullptr);
  auto receiver = MustStart(TlsReceiver(*certificates, false));
  ASSERT_NE(receiver, nullptr);
  {
    SCOPED_TRACE("system roots");
    auto exporter = MustCreate(TlsConfig(receiver->port()));
    ASSERT_NE(exporter, nullptr);
    ExpectNotDelivered(*exporter, *receiver);
  }
  {
    SCOPED_TRACE("another CA");
    ExporterConfig config = TlsConfig(receiver->port());
    config.ca_file = certificates->other_ca_cert;
    auto exporter = MustCreate(config);
    ASSERT_NE(exporter, nullptr);
    ExpectNotDelivered(*exporter, *receiver);
  }
}

TEST(GrpcExporterTest, TlsNeverFallsBackToPlaintext) {
  const TestCertificates* certificates = GetTestCertificates();
  ASSERT_NE(certificates, nullptr);
  auto receiver = MustStart();  // plaintext
  ASSERT_NE(receiver, nullptr);
  ExporterConfig config = TlsConfig(receiver->port());
  config.ca_file = certificates->ca_cert;
  auto exporter = MustCreate(config);
  ASSERT_NE(exporter, nullptr);
  ExpectNotDelivered(*exporter, *receiver);
}

TEST(GrpcExporterTest, TrustedCaFileDelivers) {
  const TestCertificates* certificates = GetTestCertificates();
  ASSERT_NE(certificates, nullptr);
  auto receiver = MustStart(TlsReceiver(*certificates, false));
  ASSERT_NE(receiver, nullptr);
  ExporterConfig config = TlsConfig(receiver->port());
  config.ca_file = certificates->ca_cert;
  config.headers = {{"authorization", kSecret}};
  auto exporter = MustCreate(config);
  ASSERT_NE(exporter, nullptr);
  exporter->Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 1; }));
  EXPECT_TRUE(receiver->received()[0].valid.ok());
  EXPECT_THAT(receiver->received()[0].metadata, Contains(Pair("authorization", kSecret)));
  EXPECT_EQ(exporter->stats().retries, 0u);
}

TEST(GrpcExporterTest, MutualTls) {
  const TestCertificates* certificates = GetTestCertificates();
  ASSERT_NE(certificates, nullptr);
  auto receiver = MustStart(TlsReceiver(*certificates, true));
  ASSERT_NE(receiver, nullptr);
  ExporterConfig config = TlsConfig(receiver->port());
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
  exporter->Enqueue(MakeTestRequest(0));
  ASSERT_TRUE(WaitFor([&] { return exporter->stats().intervals_sent == 1; }));
  EXPECT_EQ(exporter->stats().retries, 0u);
}

TEST(GrpcExporterTest, CreateRefusesWhatCanNeverWork) {
  ExporterConfig config = TlsConfig(4317);
  config.ca_file = "/nonexistent/ca.pem";
  absl::StatusOr<std::unique_ptr<ProfileExporter>> exporter = ProfileExporter::Create(config);
  ASSERT_FALSE(exporter.ok());
  EXPECT_THAT(exporter.status().message(), HasSubstr("/nonexistent/ca.pem"));

  config = PlaintextConfig("127.0.0.1:4317");
  config.headers = {{"Bad Name", kSecret}};
  exporter = ProfileExporter::Create(config);
  ASSERT_FALSE(exporter.ok());
  EXPECT_THAT(exporter.status().message(), HasSubstr("Bad Name"));
  EXPECT_THAT(exporter.status().message(), Not(HasSubstr("s3cr3t")));

  config.headers = {{"authorization", "line\nbreak s3cr3t"}};
  exporter = ProfileExporter::Create(config);
  ASSERT_FALSE(exporter.ok());
  EXPECT_THAT(exporter.status().message(), Not(HasSubstr("s3cr3t")));
}

TEST(RetryDelayFromStatusDetailsTest, ReadsRetryInfoAmongOtherDetails) {
  google::rpc::Status status;
  status.set_code(14);
  status.add_details()->PackFrom(google::rpc::Status());  // some other detail first
  google::rpc::RetryInfo retry;
  retry.mutable_retry_delay()->set_seconds(2);
  retry.mutable_retry_delay()->set_nanos(500'000'000);
  status.add_details()->PackFrom(retry);
  EXPECT_EQ(RetryDelayFromStatusDetails(status.SerializeAsString()), absl::Milliseconds(2500));

  status.clear_details();
  EXPECT_EQ(RetryDelayFromStatusDetails(status.SerializeAsString()), std::nullopt);
  retry.mutable_retry_delay()->set_seconds(-1);
  retry.mutable_retry_delay()->set_nanos(0);
  status.add_details()->PackFrom(retry);
  EXPECT_EQ(RetryDelayFromStatusDetails(status.SerializeAsString()), std::nullopt);
  EXPECT_EQ(RetryDelayFromStatusDetails(""), std::nullopt);
  EXPECT_EQ(RetryDelayFromStatusDetails("\xff\xff not a message"), std::nullopt);
}

}  // namespace
}  // namespace ember
