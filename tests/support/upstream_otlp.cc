// protoc --decode over a temporary file, its diagnostics kept apart from the decoded text.
#include "support/upstream_otlp.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

namespace collector_pb = opentelemetry::proto::collector::profiles::v1development;

// The files protoc needs for a profiles request and what it imports.
constexpr std::string_view kServiceProto =
    "opentelemetry/proto/collector/profiles/v1development/profiles_service.proto";

// A private directory for the request and protoc's stderr, removed when it goes.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "upstream-otlp-XXXXXX");
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Collects the parser's complaints instead of letting it log them.
class Complaints : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) first_ = absl::StrCat("line ", line + 1, ":", column + 1, ": ", message);
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

}  // namespace

absl::StatusOr<std::string> DecodeWithUpstreamProtos(std::string_view serialized,
                                                     std::string_view message_type) {
  const std::string root = EMBER_UPSTREAM_OTLP_PROTO_DIR;
  if (!std::filesystem::exists(std::filesystem::path(root) / std::string(kServiceProto))) {
    return absl::FailedPreconditionError(
        absl::StrCat("the upstream OTLP .proto files are not in ", root,
                     " (run scripts/setup.sh, which fetches opentelemetry-proto into it)"));
  }
  ScratchDir scratch;
  if (scratch.path().empty()) return absl::InternalError("cannot make a temporary directory");
  const std::string input = scratch.path() + "/request.bin";
  const std::string errors = scratch.path() + "/protoc.err";
  {
    std::ofstream out(input, std::ios::binary);
    out.write(serialized.data(), static_cast<std::streamsize>(serialized.size()));
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", input));
  }
  // Through sh for the redirections: stdin from the file, stderr to a file of its own, so that
  // the output is the decoded text alone.
  RunResult run =
      RunProgram({"/bin/sh", "-c", "errors=$1; shift; exec \"$@\" <\"$0\" 2>\"$errors\"", input,
                  errors, EMBER_PROTOC, "--decode=" + std::string(message_type),
                  absl::StrCat("--proto_path=", root), std::string(kServiceProto)},
                 std::chrono::seconds(60));
  if (run.exit_code != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "protoc --decode=", std::string(message_type), " against ", root, " failed (exit ",
        run.exit_code.has_value() ? std::to_string(*run.exit_code) : "none", "): ", ReadAll(errors),
        run.output));
  }
  return std::move(run.output);
}

absl::StatusOr<collector_pb::ExportProfilesServiceRequest> ReadWithUpstreamProtos(
    std::string_view serialized) {
  absl::StatusOr<std::string> text = DecodeWithUpstreamProtos(serialized);
  if (!text.ok()) return text.status();
  collector_pb::ExportProfilesServiceRequest request;
  google::protobuf::TextFormat::Parser parser;
  Complaints complaints;
  parser.RecordErrorsTo(&complaints);
  if (!parser.ParseFromString(*text, &request)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the upstream schema's reading does not fit Ember's classes: ", complaints.first()));
  }
  return request;
}

}  // namespace ember::testing
