// Parses OTEL_RESOURCE_ATTRIBUTES: split on ',', then on the first '=', trim, percent-decode.
#include "otlp/resource_attributes.h"

#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/utf8.h"

namespace ember {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// RFC 3986 percent-decoding; '+' stays a '+' (this is not form encoding). nullopt on a '%' not
// followed by two hex digits. Decoded bytes that are not UTF-8 become U+FFFD, as W3C Baggage says.
std::optional<std::string> PercentDecode(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int hi = HexValue(text[i + 1]);
    const int lo = HexValue(text[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  if (!IsValidUtf8(out)) return ToValidUtf8(out);
  return out;
}

}  // namespace

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

}  // namespace ember
