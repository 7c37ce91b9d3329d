// Checks an OTLP Profiles export request against the rules receivers enforce (the shared spec's
// "Rules a receiver enforces"): Pyroscope rejects a whole request that breaks one. Used by the
// tests and as a self-check before sending.
#pragma once

#include "absl/status/status.h"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"

namespace ember {

// OK, or InvalidArgument naming the first violation in one line (its path in the message, e.g.
// "resource_profiles[0].scope_profiles[0].profiles[0].samples[3].stack_index = 9 is out of range
// (stack_table has 4 entries)"). Rules:
//  - every dictionary table is present and its index 0 is the zero value (string_table[0] == "");
//  - no table holds the same entry twice (entries compared serialized);
//  - every index anywhere (stack, location, function, mapping, attribute, string, link) is in
//    range;
//  - a sample has values or timestamps (of equal length when both), and exactly one value (or
//    timestamps only) when its profile has a period;
//  - Resource and Scope attributes use the plain key and string_value, never the *_strindex
//    forms, and no key twice;
//  - the string table, attribute keys and string values, and scope name and version are valid
//    UTF-8 (receivers fail to parse the message otherwise); a profile_id is empty or 16 bytes, a
//    link's trace_id 16 and span_id 8 bytes;
//  - a link (past index 0) has a trace_id that is not all zero, and a sample's attributes name
//    each key once.
absl::Status ValidateExportRequest(
    const opentelemetry::proto::collector::profiles::v1development::ExportProfilesServiceRequest&
        request);

}  // namespace ember
