// Reads Ember's OTLP Profiles requests as the published schema does: `protoc --decode` against the
// opentelemetry-proto v1.11.0 .proto files that scripts/setup.sh fetches (pinned) into
// .cache/otlp-proto/, not Ember's own copy in proto/. A field Ember writes under a number or type
// the upstream schema does not have shows as an unknown field, and reading it back fails.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"

namespace ember::testing {

inline constexpr std::string_view kExportProfilesServiceRequestType =
    "opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest";

// `serialized` decoded as `message_type` by protoc against the upstream files: protoc's text
// format, fields named by the upstream schema. An error when the files or protoc are missing
// (saying to run scripts/setup.sh) or protoc cannot decode the bytes.
absl::StatusOr<std::string> DecodeWithUpstreamProtos(
    std::string_view serialized, std::string_view message_type = kExportProfilesServiceRequestType);

// The request as the upstream schema reads `serialized`, in Ember's message classes: the text
// DecodeWithUpstreamProtos gives, parsed by field name. An error when the text holds a field the
// upstream schema does not know (protoc prints those by number) or one Ember's classes lack.
absl::StatusOr<
    opentelemetry::proto::collector::profiles::v1development::ExportProfilesServiceRequest>
ReadWithUpstreamProtos(std::string_view serialized);

}  // namespace ember::testing
