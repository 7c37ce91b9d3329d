// Turns one interval's symbolized profile into one OTLP Profiles export request, the message the
// exporter sends over gRPC or OTLP/HTTP (opentelemetry-proto v1.10/v1.11 layout).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/profile.h"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"
#include "otlp/resource_attributes.h"

namespace ember {

// One request for the interval: a shared ProfilesDictionary (every string, mapping, location,
// function, stack and attribute once; index 0 of each table the zero value) and one
// ResourceProfiles per pid, ascending, each with one ScopeProfiles (scope name and version) holding
// one CPU Profile: sample_type samples/count, period_type cpu/nanoseconds, period = period_ns,
// time_unix_nano = start, duration_nano = duration, a random 16-byte profile_id. Each Sample has
// a stack (leaf first), exactly one value (the count), a `thread.name` attribute when the thread
// has a name, and from its trace context: a link_index into link_table when it has a trace (one
// entry per distinct trace and span id; 0, the zero link, when none) and each attribute with a
// value as a sample attribute keyed by its name (except `thread.name`). A frame is one Location
// whose Lines are the functions inlined at its address, innermost first, and then its own function
// (the outermost caller, last). Samples with count <= 0 are dropped, so an empty interval gives no
// ResourceProfiles (and nothing worth sending).
//
// Resource attributes, plain key/string_value (process.pid as int_value), each key once. What the
// process published about itself (ProcessMetadata::published: its OpenTelemetry process context)
// wins over anything the agent derives or is configured with, except the keys the agent measures
// (IsMeasuredResourceKey: process.pid, process.executable.*, container.id, host.*, k8s.*):
//   service.name: the published one, else context.service_name, else service.name from
//     context.attributes, else the workload's name, else "unknown_service:<executable name>";
//   host.name: from context.attributes, else context.host_name;
//   process.pid, process.executable.name, process.executable.path, container.id: from the process
//     only (profile.process_metadata; a fixed value from the environment would be wrong for every
//     other process);
//   then the process's own metadata attributes (its pod), each key once, winning over
//     OTEL_RESOURCE_ATTRIBUTES entries of the same key, which are the agent's (a key the process
//     published and the agent does not measure is left to the published value);
//   then the published attributes with a value, in order, each key once;
//   then the rest of context.attributes in their order, except keys already set.
// Strings that are not valid UTF-8 (thread names, paths) have their bad bytes replaced by U+FFFD.
opentelemetry::proto::collector::profiles::v1development::ExportProfilesServiceRequest
BuildExportRequest(const IntervalProfile& profile, const ResourceContext& context);

// A receiver refuses a request over its size limit whole (an OpenTelemetry Collector's gRPC
// receiver and Pyroscope take 4 MiB by default). The requests of the interval, as
// BuildExportRequest builds them, each at most `max_request_bytes` serialized: the interval's
// processes, and a process's samples when one process alone is too big, are halved until each
// part fits, and each part has its own dictionary (so a request stands alone). A part of one
// sample goes as it is, whatever its size. One request when the whole fits; none for an
// interval without samples.
std::vector<opentelemetry::proto::collector::profiles::v1development::ExportProfilesServiceRequest>
BuildExportRequests(const IntervalProfile& profile, const ResourceContext& context,
                    size_t max_request_bytes);

}  // namespace ember
