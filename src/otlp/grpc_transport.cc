// OTLP over gRPC: one channel (TLS unless asked otherwise), one unary Export call per attempt with
// the configured deadline, headers as metadata and gzip. The request goes out as the bytes the
// queue holds (a generic stub), so it is not parsed and encoded again.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>  // protobuf messages as generic-stub responses

#include <chrono>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"
#include "otlp/export_transport.h"

namespace ember {
namespace {

namespace collector_pb = opentelemetry::proto::collector::profiles::v1development;

constexpr char kExportMethod[] =
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    default:
      return "UNKNOWN_CODE";
  }
}

// The OTLP specification's table of retryable codes. RESOURCE_EXHAUSTED is retried only when the
// receiver says when (RetryInfo): without it, it is usually a message over a size limit, which
// no retry can fix and which would hold up every later interval.
bool Retryable(grpc::StatusCode code, bool has_retry_info) {
  switch (code) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::DATA_LOSS:
      return true;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return has_retry_info;
    default:
      return false;
  }
}

int Milliseconds(absl::Duration d) {
  return static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 1, INT32_MAX));
}

// gRPC metadata keys are lower-case [0-9a-z-_.] and not "grpc-" (the library's own); values of
// non-binary keys are printable ASCII. A header breaking that would fail every call, so it is
// refused at start-up, by name only (its value may be a secret).
absl::Status CheckHeaders(const std::vector<OtlpHeader>& headers) {
  for (const OtlpHeader& header : headers) {
    bool good_name = !header.name.empty() && !absl::StartsWith(header.name, "grpc-") &&
                     std::all_of(header.name.begin(), header.name.end(), [](char c) {
                       return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' ||
                              c == '_' || c == '.';
                     });
    if (!good_name) {
      return absl::InvalidArgumentError(absl::StrCat(
          "OTLP header '", header.name,
          "': not a gRPC metadata name (lower-case letters, digits, '-', '_', '.'; not grpc-)"));
    }
    if (absl::EndsWith(header.name, "-bin")) continue;
    if (!std::all_of(header.value.begin(), header.value.end(),
                     [](char c) { return c >= 0x20 && c <= 0x7e; })) {
      return absl::InvalidArgumentError(absl::StrCat(
          "OTLP header '", header.name, "': its value has characters gRPC metadata cannot carry"));
    }
  }
  return absl::OkStatus();
}

class GrpcTransport final : public ExportTransport {
 public:
  GrpcTransport(std::shared_ptr<grpc::Channel> channel, const ExporterConfig& config)
      : stub_(std::move(channel)), config_(config) {}

  SendResult Send(const std::string& request) override {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoNanoseconds(config_.timeout));
    for (const OtlpHeader& header : config_.headers) context.AddMetadata(header.name, header.value);
    if (config_.gzip) context.set_compression_algorithm(GRPC_COMPRESS_GZIP);
    {
      std::lock_guard lock(mu_);
      if (cancelled_) return SendResult::Cancelled();
      in_flight_ = &context;
    }

    grpc::Slice slice(request.data(), request.size());
    grpc::ByteBuffer buffer(&slice, 1);
    // Shared with the callback, which may still be returning when the wait below ends.
    struct Call {
      collector_pb::ExportProfilesServiceResponse response;
      grpc::Status status;
      absl::Notification done;
    };
    auto call = std::make_shared<Call>();
    stub_.UnaryCall(&context, kExportMethod, grpc::StubOptions(), &buffer, &call->response,
                    [call](grpc::Status status) {
                      call->status = std::move(status);
                      call->done.Notify();
                    });
    call->done.WaitForNotification();
    const grpc::Status& status = call->status;
    const collector_pb::ExportProfilesServiceResponse& response = call->response;
    {
      std::lock_guard lock(mu_);
      in_flight_ = nullptr;
      if (cancelled_) return SendResult::Cancelled();
    }

    SendResult result;
    if (status.ok()) {
      result.outcome = SendResult::Outcome::kDelivered;
      result.rejected_profiles = response.partial_success().rejected_profiles();
      result.partial_error_message = response.partial_success().error_message();
      return result;
    }
    result.retry_delay = RetryDelayFromStatusDetails(status.error_details());
    result.outcome = Retryable(status.error_code(), result.retry_delay.has_value())
                         ? SendResult::Outcome::kRetryable
                         : SendResult::Outcome::kFailed;
    result.reason = absl::StrCat(CodeName(status.error_code()), ": ", status.error_message());
    return result;
  }

  void Cancel() override {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    if (in_flight_ != nullptr) in_flight_->TryCancel();
  }

 private:
  grpc::TemplatedGenericStub<grpc::ByteBuffer, collector_pb::ExportProfilesServiceResponse> stub_;
  const ExporterConfig config_;
  std::mutex mu_;
  bool cancelled_ = false;
  grpc::ClientContext* in_flight_ = nullptr;  // valid while set, under mu_
};

}  // namespace

absl::StatusOr<std::unique_ptr<ExportTransport>> CreateGrpcTransport(
    const ExporterConfig& config, const TransportOptions& options) {
  if (absl::Status headers = CheckHeaders(config.headers); !headers.ok()) return headers;

  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (config.tls) {
    grpc::SslCredentialsOptions ssl;
    // Empty roots: gRPC's defaults, the system's CA bundle.
    if (!config.ca_file.empty()) {
      absl::StatusOr<std::string> roots = ReadPemFile(config.ca_file, "OTLP CA file");
      if (!roots.ok()) return roots.status();
      ssl.pem_root_certs = *std::move(roots);
    }
    if (!config.client_cert_file.empty()) {
      absl::StatusOr<std::string> cert =
          ReadPemFile(config.client_cert_file, "OTLP client certificate");
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPemFile(config.client_key_file, "OTLP client key");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *std::move(cert);
      ssl.pem_private_key = *std::move(key);
    }
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }

  grpc::ChannelArguments args;
  // The exporter retries itself, in order and counted; gRPC's own retries would hide failures.
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  // A channel that failed to connect waits its reconnect backoff before trying again, failing
  // calls at once meanwhile; gRPC's default of up to 120 s would outlast our own backoff.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, Milliseconds(options.initial_backoff));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, Milliseconds(options.initial_backoff));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, Milliseconds(options.max_backoff));
  args.SetUserAgentPrefix("ember-otlp-exporter");
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(config.target, credentials, args);
  return std::make_unique<GrpcTransport>(std::move(channel), config);
}

}  // namespace ember
