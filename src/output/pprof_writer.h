// Turns one interval's symbolized profile into a pprof Profile message and a .pb.gz file that
// Google's `pprof` and other pprof-compatible tools read.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/profile.h"
#include "pprof/profile.pb.h"

namespace ember {

// The pprof message for one interval: sample types samples/count and cpu/nanoseconds (values
// count and count*period_ns), period_type cpu/nanoseconds, period, time_nanos, duration_nanos;
// labels pid (num), process (str), thread (str) on each sample; from its trace context, trace_id
// and span_id (lowercase hex; span_id when not zero) when it has a link, and each attribute as a
// label named by its key (except keys named as the labels above); then from the process's
// `process_metadata` (str), each key once and not one the sample's attributes have: container.id,
// its attributes in order (k8s.pod.name,
// ...), service.name and what the process published about itself (`published`, in order), each
// when not empty. A published value replaces the derived one of the same key, except for the keys
// the agent measures (IsMeasuredResourceKey), which keep the agent's. One Location per distinct
// Frame (dedupe by kind+module+address+function) with one Line per function inlined there
// (innermost first) and then one for the frame's own function, last as pprof expects the caller;
// one Function per distinct (name, file), inlined or not; Line.line when known; one Mapping per
// distinct module with filename and build_id, has_functions=true (and has_filenames /
// has_line_numbers / has_inline_frames when any frame of it has them). Kernel frames go to a
// mapping named after their module ("[kernel.kallsyms]", "[ext4]"). Location.address =
// Frame::address (mappings: memory_start 0, memory_limit = max address in it + 1). string_table[0]
// == "".
//
// Samples with a count <= 0 are dropped; empty process/thread names get no label. A module seen
// with two different build ids (same path, different binaries) gets one mapping per build id.
perftools::profiles::Profile BuildPprof(const IntervalProfile& profile);

// The bytes of the .pb.gz file: BuildPprof(profile), serialized and gzip-compressed.
absl::StatusOr<std::string> EncodePprofFile(const IntervalProfile& profile);

// Writes EncodePprofFile(profile) to `path` atomically (tmp file + rename).
absl::Status WritePprofFile(const IntervalProfile& profile, const std::string& path);

}  // namespace ember
