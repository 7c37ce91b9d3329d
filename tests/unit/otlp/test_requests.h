// Export requests for the exporter tests: valid (they pass ValidateExportRequest), each carrying
// its interval number so that order and loss can be read back on the receiving side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"

namespace ember::testing {

using ExportRequest =
    opentelemetry::proto::collector::profiles::v1development::ExportProfilesServiceRequest;

// Interval `id` (>= 0): one process, two stacks, the profile's time_unix_nano derived from id.
// `padding` bytes of thread name make the request about that much larger.
ExportRequest MakeTestRequest(int id, size_t padding = 0);

// The id MakeTestRequest put in, or -1 when the request is not one of those.
int IntervalId(const ExportRequest& request);
// The same for serialized requests.
int IntervalId(const std::string& serialized);

// The value of a resource attribute as text (an int_value in decimal); "" when it is absent.
std::string ResourceAttribute(const opentelemetry::proto::resource::v1::Resource& resource,
                              const std::string& key);

}  // namespace ember::testing
