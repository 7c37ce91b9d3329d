// GrpcTestReceiver: ProfilesService::Service whose Export follows the script.
#include "unit/otlp/grpc_test_receiver.h"

#include <atomic>
#include <deque>
#include <thread>

#include "absl/strings/str_cat.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.grpc.pb.h"
#include "otlp/request_validator.h"

namespace ember::testing {

namespace collector_pb = opentelemetry::proto::collector::profiles::v1development;

class GrpcTestReceiver::Service final : public collector_pb::ProfilesService::Service {
 public:
  grpc::Status Export(grpc::ServerContext* context, const ExportRequest* request,
                      collector_pb::ExportProfilesServiceResponse* response) override {
    GrpcReply reply;
    {
      std::lock_guard lock(mu_);
      ++attempts_;
      attempt_times_.push_back(absl::Now());
      if (!script_.empty()) {
        reply = script_.front();
        script_.pop_front();
      }
    }
    absl::Time until = absl::Now() + reply.delay;
    while (absl::Now() < until && !context->IsCancelled() && !stopping_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (context->IsCancelled() || stopping_) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client gave up");
    }
    if (reply.code != grpc::StatusCode::OK) {
      std::string details;
      if (reply.retry_delay) {
        google::rpc::RetryInfo retry;
        retry.mutable_retry_delay()->set_seconds(absl::ToInt64Seconds(*reply.retry_delay));
        retry.mutable_retry_delay()->set_nanos(
            static_cast<int32_t>(absl::ToInt64Nanoseconds(*reply.retry_delay % absl::Seconds(1))));
        google::rpc::Status status;
        status.set_code(static_cast<int>(reply.code));
        status.set_message(reply.message);
        status.add_details()->PackFrom(retry);
        details = status.SerializeAsString();
      }
      return grpc::Status(reply.code, reply.message, details);
    }
    if (reply.rejected_profiles > 0 || !reply.partial_error_message.empty()) {
      response->mutable_partial_success()->set_rejected_profiles(reply.rejected_profiles);
      response->mutable_partial_success()->set_error_message(reply.partial_error_message);
    }
    ReceivedExport received{.request = *request, .valid = ValidateExportRequest(*request)};
    for (const auto& [key, value] : context->client_metadata()) {
      received.metadata.emplace(std::string(key.data(), key.size()),
                                std::string(value.data(), value.size()));
    }
    std::lock_guard lock(mu_);
    received_.push_back(std::move(received));
    return grpc::Status::OK;
  }

  mutable std::mutex mu_;
  std::deque<GrpcReply> script_;
  int attempts_ = 0;
  std::vector<absl::Time> attempt_times_;
  std::vector<ReceivedExport> received_;
  std::atomic<bool> stopping_ = false;
};

GrpcTestReceiver::GrpcTestReceiver() : service_(std::make_unique<Service>()) {}

GrpcTestReceiver::~GrpcTestReceiver() { Stop(); }

std::unique_ptr<GrpcTestReceiver> GrpcTestReceiver::Start(const GrpcReceiverOptions& options) {
  std::unique_ptr<GrpcTestReceiver> receiver(new GrpcTestReceiver());
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (options.cert_pem.empty()) {
    credentials = grpc::InsecureServerCredentials();
  } else {
    grpc::SslServerCredentialsOptions ssl(
        options.client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                      : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = options.client_ca_pem;
    ssl.pem_key_cert_pairs.push_back({options.key_pem, options.cert_pem});
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", options.port), credentials, &receiver->port_);
  builder.RegisterService(receiver->service_.get());
  if (!options.accept_gzip) {
    builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_GZIP, false);
  }
  receiver->server_ = builder.BuildAndStart();
  if (receiver->server_ == nullptr || receiver->port_ == 0) return nullptr;
  return receiver;
}

std::string GrpcTestReceiver::target() const { return absl::StrCat("127.0.0.1:", port_); }

void GrpcTestReceiver::Script(std::vector<GrpcReply> replies) {
  std::lock_guard lock(service_->mu_);
  service_->script_.assign(replies.begin(), replies.end());
}

int GrpcTestReceiver::attempts() const {
  std::lock_guard lock(service_->mu_);
  return service_->attempts_;
}

std::vector<ReceivedExport> GrpcTestReceiver::received() const {
  std::lock_guard lock(service_->mu_);
  return service_->received_;
}

std::vector<int> GrpcTestReceiver::ReceivedIds() const {
  std::vector<int> ids;
  for (const ReceivedExport& received : received()) ids.push_back(IntervalId(received.request));
  return ids;
}

std::vector<absl::Time> GrpcTestReceiver::attempt_times() const {
  std::lock_guard lock(service_->mu_);
  return service_->attempt_times_;
}

void GrpcTestReceiver::Stop() {
  if (server_ == nullptr) return;
  service_->stopping_ = true;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  server_.reset();
}

}  // namespace ember::testing
