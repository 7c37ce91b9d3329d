// OTEL_RESOURCE_ATTRIBUTES: the user's extra Resource attributes, "key1=value1,key2=value2" in the
// W3C Baggage form with percent-encoding, as the OpenTelemetry SDK specification defines it.
#pragma once

#include <functional>
#include <optional>
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

// Everything about the resources that does not come from the interval (its samples and its
// process_metadata). Set up once at start-up.
struct ResourceContext {
  std::string host_name;
  std::string service_name;  // OTEL_SERVICE_NAME; empty when unset
  // From OTEL_RESOURCE_ATTRIBUTES (ParseResourceAttributes), each key once.
  std::vector<ResourceAttribute> attributes;
  std::string scope_name = "ember";
  std::string scope_version;
};

// The context of `host_name`, with OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES as `getenv`
// (nullopt: not set) gives them; each skipped entry of the attributes is logged as a warning.
ResourceContext MakeResourceContext(
    const std::function<std::optional<std::string>(const char*)>& getenv, std::string host_name,
    std::string scope_version);

}  // namespace ember
