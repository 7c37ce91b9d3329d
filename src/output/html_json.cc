// Byte-level escapers: names are arbitrary bytes from /proc and ELF symbol tables, not guaranteed
// UTF-8 (common/utf8.h tells valid sequences).
#include "output/html_json.h"

#include <cstdint>

#include "common/utf8.h"

namespace ember {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

void AppendJsonString(std::string* out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto append_u = [&](uint32_t u) {
    out->append("\\u");
    for (int shift = 12; shift >= 0; shift -= 4) out->push_back(kHex[(u >> shift) & 0xF]);
  };
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    const auto uc = static_cast<unsigned char>(c);
    if (uc >= 0x80) {
      const size_t len = Utf8SequenceLength(absl::string_view(s.data(), s.size()), i);
      if (len == 0) {
        out->append(kReplacement);
        ++i;
        continue;
      }
      // U+2028/U+2029 are line terminators in older JavaScript string literals.
      if (len == 3 && uc == 0xE2 && static_cast<uint8_t>(s[i + 1]) == 0x80 &&
          (static_cast<uint8_t>(s[i + 2]) & 0xFE) == 0xA8) {
        append_u(0x2028 + (static_cast<uint8_t>(s[i + 2]) & 1));
      } else {
        out->append(s.substr(i, len));
      }
      i += len;
      continue;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '<':
      case '>':
      case '&':
      case '\'':
        append_u(uc);
        break;
      default:
        if (uc < 0x20 || uc == 0x7F) {
          append_u(uc);
        } else {
          out->push_back(c);
        }
    }
    ++i;
  }
  out->push_back('"');
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto uc = static_cast<unsigned char>(s[i]);
    if (uc >= 0x80) {
      const size_t len = Utf8SequenceLength(absl::string_view(s.data(), s.size()), i);
      out.append(len == 0 ? kReplacement : s.substr(i, len));
      i += len == 0 ? 1 : len;
      continue;
    }
    switch (s[i]) {
      case '&':
        out.append("&amp;");
        break;
      case '<':
        out.append("&lt;");
        break;
      case '>':
        out.append("&gt;");
        break;
      case '"':
        out.append("&quot;");
        break;
      case '\'':
        out.append("&#39;");
        break;
      default:
        // Control characters other than whitespace have no business in a title.
        out.push_back(uc < 0x20 && uc != '\t' && uc != '\n' ? ' ' : s[i]);
    }
    ++i;
  }
  return out;
}

}  // namespace ember
