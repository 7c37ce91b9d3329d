// Parses OTEL_RESOURCE_ATTRIBUTES: split on ',', then on the first '=', trim, percent-decode.
#include "otlp/resource_attributes.h"

#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/utf8.h"
#include "otlp/percent_encoding.h"
#include "spdlog/spdlog.h"

namespace ember {

ParsedResourceAttributes ParseResourceAttributes(absl::string_view text) {
  ParsedResourceAttributes result;
  absl::flat_hash_map<std::string, size_t> position;  // key -> index in result.attributes
  for (absl::string_view raw : absl::StrSplit(text, ',')) {
    const absl::string_view entry = absl::StripAsciiWhitespace(raw);
    if (entry.empty()) continue;
    const auto skip = [&](absl::string_view why) {
      result.errors.push_back(absl::StrCat("OTEL_RESOURCE_ATTRIBUTES entry \"", ToValidUtf8(entry),
                                           "\" ", why, "; skipped"));
    };
    const size_t equals = entry.find('=');
    if (equals == absl::string_view::npos) {
      skip("has no '=' (expected key=value)");
      continue;
    }
    std::optional<std::string> key =
        PercentDecode(absl::StripAsciiWhitespace(entry.substr(0, equals)));
    std::optional<std::string> value =
        PercentDecode(absl::StripAsciiWhitespace(entry.substr(equals + 1)));
    if (!key.has_value() || !value.has_value()) {
      skip("has a '%' not followed by two hex digits (write '%25' for a literal '%')");
      continue;
    }
    if (key->empty()) {
      skip("has an empty key");
      continue;
    }
    auto [it, inserted] = position.try_emplace(*key, result.attributes.size());
    if (inserted) {
      result.attributes.push_back({std::move(*key), std::move(*value)});
    } else {
      result.attributes[it->second].value = std::move(*value);
    }
  }
  return result;
}

ResourceContext MakeResourceContext(
    const std::function<std::optional<std::string>(const char*)>& getenv, std::string host_name,
    std::string scope_version) {
  ResourceContext context;
  context.host_name = std::move(host_name);
  if (std::optional<std::string> service = getenv("OTEL_SERVICE_NAME")) {
    context.service_name = std::move(*service);
  }
  if (std::optional<std::string> attributes = getenv("OTEL_RESOURCE_ATTRIBUTES")) {
    ParsedResourceAttributes parsed = ParseResourceAttributes(*attributes);
    for (const std::string& error : parsed.errors) spdlog::warn("{}", error);
    context.attributes = std::move(parsed.attributes);
  }
  context.scope_version = std::move(scope_version);
  return context;
}

}  // namespace ember
