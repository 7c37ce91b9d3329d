// OTEL_RESOURCE_ATTRIBUTES: the user's extra Resource attributes, "key1=value1,key2=value2" in the
// W3C Baggage form with percent-encoding, as the OpenTelemetry SDK specification defines it.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ember {

struct ResourceAttribute {
  std::string key;
  std::string value;
  bool operator==(const ResourceAttribute&) const = default;
};

struct ParsedResourceAttributes {
  // In order of first appearance, each key once: a later entry for the same key replaces the
  // value. Keys and values are percent-decoded, trimmed of surrounding blanks and valid UTF-8.
  std::vector<ResourceAttribute> attributes;
  // One line per entry that was skipped, naming it and why (for the caller to log).
  std::vector<std::string> errors;
};

// Parses `text` (the value of OTEL_RESOURCE_ATTRIBUTES). Empty entries ("a=1,,b=2") are ignored;
// an entry without '=', with an empty key, or with a bad %-escape is skipped and reported.
//
// The OTel specification says the whole variable SHOULD be discarded on any error; Ember keeps the
// good entries instead, so one typo does not strip every attribute (a caller wanting the strict
// rule drops `attributes` when `errors` is non-empty).
ParsedResourceAttributes ParseResourceAttributes(absl::string_view text);

}  // namespace ember
