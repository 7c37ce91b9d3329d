// Parser for /proc/PID/maps: "start-end perms offset major:minor inode   path".
#include "agent/proc_maps.h"

#include <sys/sysmacros.h>

#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ember {
namespace {

bool ParseHex(std::string_view text, uint64_t* out) {
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out, 16);
  return ec == std::errc() && ptr == text.data() + text.size();
}

bool ParseDec(std::string_view text, uint64_t* out) {
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out, 10);
  return ec == std::errc() && ptr == text.data() + text.size();
}

// Splits off the next space-separated field.
std::string_view NextField(std::string_view* rest) {
  *rest = absl::StripLeadingAsciiWhitespace(*rest);
  size_t space = rest->find(' ');
  std::string_view field = rest->substr(0, space);
  rest->remove_prefix(space == std::string_view::npos ? rest->size() : space);
  return field;
}

bool ParseLine(std::string_view line, MemoryMapping* m) {
  std::string_view rest = line;
  std::string_view range = NextField(&rest);
  std::string_view perms = NextField(&rest);
  std::string_view offset = NextField(&rest);
  std::string_view device = NextField(&rest);
  std::string_view inode = NextField(&rest);
  size_t dash = range.find('-');
  size_t colon = device.find(':');
  uint64_t major = 0;
  uint64_t minor = 0;
  if (dash == std::string_view::npos || colon == std::string_view::npos || perms.size() != 4 ||
      !ParseHex(range.substr(0, dash), &m->start) || !ParseHex(range.substr(dash + 1), &m->end) ||
      m->end < m->start || !ParseHex(offset, &m->offset) ||
      !ParseHex(device.substr(0, colon), &major) || !ParseHex(device.substr(colon + 1), &minor) ||
      !ParseDec(inode, &m->file.inode)) {
    return false;
  }
  m->readable = perms[0] == 'r';
  m->executable = perms[2] == 'x';
  m->file.dev = makedev(major, minor);
  // The path is the rest of the line and may itself contain spaces.
  std::string_view path = absl::StripLeadingAsciiWhitespace(rest);
  m->deleted = absl::ConsumeSuffix(&path, " (deleted)");
  m->path = std::string(path);
  return true;
}

}  // namespace

absl::StatusOr<std::vector<MemoryMapping>> ParseProcMaps(std::string_view text) {
  std::vector<MemoryMapping> mappings;
  int line_number = 0;
  for (std::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    ++line_number;
    MemoryMapping m;
    if (!ParseLine(line, &m)) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed maps line ", line_number, ": '", line.substr(0, 120), "'"));
    }
    mappings.push_back(std::move(m));
  }
  return mappings;
}

}  // namespace ember
