// A strict reader of the Prometheus text exposition format 0.0.4, so tests check what /metrics
// serves line by line rather than by substring.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ember::testing {

struct Exposition {
  std::map<std::string, std::string> types;  // family name -> counter, gauge, ...
  std::map<std::string, std::string> helps;  // family name -> help, unescaped
  // `name{labels}` exactly as written -> value; label values stay escaped.
  std::map<std::string, double> samples;
};

// Checks every line: HELP and TYPE at most once per family and before its samples, one group per
// family, valid metric and label names, only \\ \" \n escapes, values Go's ParseFloat reads
// (NaN, +Inf, -Inf included), no series twice, counters named *_total, a final newline.
// The error names the line.
absl::StatusOr<Exposition> ParseExposition(absl::string_view text);

}  // namespace ember::testing
