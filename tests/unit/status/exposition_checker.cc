// See exposition_checker.h; the grammar is that of
// https://prometheus.io/docs/instrumenting/exposition_formats/#text-format-details.
#include "exposition_checker.h"

#include <cmath>
#include <cstdlib>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ember::testing {
namespace {

size_t NameLength(absl::string_view s, bool colon) {
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) break;
    ++i;
  }
  return i;
}

bool ParseValue(absl::string_view text, double* out) {
  if (text == "NaN") return *out = NAN, true;
  if (text == "+Inf") return *out = INFINITY, true;
  if (text == "-Inf") return *out = -INFINITY, true;
  if (text.empty() || text.find_first_not_of("0123456789.eE+-") != absl::string_view::npos) {
    return false;
  }
  std::string copy(text);
  char* end = nullptr;
  *out = std::strtod(copy.c_str(), &end);
  return end == copy.c_str() + copy.size();
}

// Reads `{name="value",...}` from the front of `*s`.
absl::Status ReadLabels(absl::string_view* s) {
  if (s->empty() || s->front() != '{') return absl::OkStatus();
  s->remove_prefix(1);
  std::set<std::string> names;
  while (true) {
    if (!s->empty() && s->front() == '}') break;
    size_t n = NameLength(*s, false);
    if (n == 0) return absl::InvalidArgumentError("bad label name");
    std::string name(s->substr(0, n));
    if (!names.insert(name).second) return absl::InvalidArgumentError("label given twice");
    s->remove_prefix(n);
    if (!absl::ConsumePrefix(s, "=\"")) return absl::InvalidArgumentError("no =\" after label");
    while (true) {
      if (s->empty()) return absl::InvalidArgumentError("unterminated label value");
      char c = s->front();
      s->remove_prefix(1);
      if (c == '"') break;
      if (c == '\n') return absl::InvalidArgumentError("raw newline in label value");
      if (c == '\\') {
        if (s->empty() || (s->front() != '\\' && s->front() != '"' && s->front() != 'n')) {
          return absl::InvalidArgumentError("bad escape in label value");
        }
        s->remove_prefix(1);
      }
    }
    if (absl::ConsumePrefix(s, ",")) continue;
    if (!s->empty() && s->front() == '}') break;
    return absl::InvalidArgumentError("expected , or } after a label");
  }
  s->remove_prefix(1);
  return absl::OkStatus();
}

std::string UnescapeHelp(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == '\\' || s[i + 1] == 'n')) {
      out += s[i + 1] == 'n' ? '\n' : '\\';
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Exposition> ParseExposition(absl::string_view text) {
  if (!text.empty() && text.back() != '\n') {
    return absl::InvalidArgumentError("the last line has no newline");
  }
  Exposition out;
  std::set<std::string> finished;  // families whose group of lines has ended
  std::set<std::string> with_samples;
  std::string current;
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  lines.pop_back();  // after the final newline
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    auto error = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("line ", i + 1, " '", line, "': ", why));
    };
    auto enter = [&](const std::string& family) -> bool {
      if (family == current) return true;
      if (!current.empty()) finished.insert(current);
      current = family;
      return !finished.count(family);
    };
    if (line.empty()) continue;
    if (line.front() == '#') {
      absl::string_view rest = line.substr(1);
      bool help = absl::ConsumePrefix(&rest, " HELP ");
      bool type = !help && absl::ConsumePrefix(&rest, " TYPE ");
      if (!help && !type) continue;  // a comment
      size_t n = NameLength(rest, true);
      if (n == 0) return error("bad metric name");
      std::string name(rest.substr(0, n));
      rest.remove_prefix(n);
      if (!enter(name)) return error("the family's lines are not one group");
      if (with_samples.count(name)) return error("HELP or TYPE after the family's samples");
      if (help) {
        if (!absl::ConsumePrefix(&rest, " ")) return error("no space after the name");
        if (out.helps.count(name)) return error("second HELP");
        for (size_t k = 0; k < rest.size(); ++k) {
          if (rest[k] == '\\' &&
              (k + 1 == rest.size() || (rest[k + 1] != '\\' && rest[k + 1] != 'n'))) {
            return error("bad escape in HELP");
          }
          if (rest[k] == '\\') ++k;
        }
        out.helps[name] = UnescapeHelp(rest);
      } else {
        if (!absl::ConsumePrefix(&rest, " ")) return error("no space after the name");
        static const std::set<absl::string_view> kTypes = {"counter", "gauge", "histogram",
                                                           "summary", "untyped"};
        if (!kTypes.count(rest)) return error("unknown TYPE");
        if (out.types.count(name)) return error("second TYPE");
        if (rest == "counter" && !absl::EndsWith(name, "_total")) {
          return error("a counter not named *_total");
        }
        out.types[name] = std::string(rest);
      }
      continue;
    }
    absl::string_view rest = line;
    size_t n = NameLength(rest, true);
    if (n == 0) return error("bad metric name");
    std::string name(rest.substr(0, n));
    rest.remove_prefix(n);
    if (absl::Status labels = ReadLabels(&rest); !labels.ok()) return error(labels.message());
    std::string key(line.substr(0, line.size() - rest.size()));
    if (!absl::ConsumePrefix(&rest, " ")) return error("no space before the value");
    std::vector<absl::string_view> fields = absl::StrSplit(rest, ' ');
    if (fields.empty() || fields.size() > 2)
      return error("expected a value and a timestamp at most");
    double value;
    if (!ParseValue(fields[0], &value)) return error("bad value");
    int64_t timestamp;
    if (fields.size() == 2 && !absl::SimpleAtoi(fields[1], &timestamp)) {
      return error("bad timestamp");
    }
    if (!enter(name)) return error("the family's lines are not one group");
    with_samples.insert(name);
    if (!out.samples.emplace(key, value).second) return error("the same series twice");
  }
  return out;
}

}  // namespace ember::testing
