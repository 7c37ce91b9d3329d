// Parser for /proc/PID/maps: "start-end perms offset major:minor inode   path".
#include "process/proc_maps.h"

#include <sys/sysmacros.h>

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace ember {
namespace {

bool ParseHex(absl::string_view text, uint64_t* out) {
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out, 16);
  return ec == std::errc() && ptr == text.data() + text.size();
}

bool ParseDec(absl::string_view text, uint64_t* out) {
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out, 10);
  return ec == std::errc() && ptr == text.data() + text.size();
}

// Splits off the next space-separated field.
absl::string_view NextField(absl::string_view* rest) {
  *rest = absl::StripLeadingAsciiWhitespace(*rest);
  size_t space = rest->find(' ');
  absl::string_view field = rest->substr(0, space);
  rest->remove_prefix(space == absl::string_view::npos ? rest->size() : space);
  return field;
}

bool ParseLine(absl::string_view line, size_t max_path_bytes, MemoryMapping* m,
               ProcMapsStats* stats) {
  absl::string_view rest = line;
  absl::string_view range = NextField(&rest);
  absl::string_view perms = NextField(&rest);
  absl::string_view offset = NextField(&rest);
  absl::string_view device = NextField(&rest);
  absl::string_view inode = NextField(&rest);
  size_t dash = range.find('-');
  size_t colon = device.find(':');
  uint64_t major = 0;
  uint64_t minor = 0;
  if (dash == absl::string_view::npos || colon == absl::string_view::npos || perms.size() != 4 ||
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
  absl::string_view path = absl::StripLeadingAsciiWhitespace(rest);
  m->deleted = absl::ConsumeSuffix(&path, " (deleted)");
  if (path.size() > max_path_bytes) {
    m->path = std::string(kLongPathMarker);
    if (stats != nullptr) ++stats->long_paths;
  } else {
    m->path = std::string(path);
  }
  return true;
}

}  // namespace

ProcMapsParser::ProcMapsParser(size_t max_path_bytes, bool executable_only)
    : max_path_bytes_(max_path_bytes), executable_only_(executable_only) {}

void ProcMapsParser::ParseOne(absl::string_view line) {
  if (line.empty() || !error_.ok()) return;
  ++line_number_;
  MemoryMapping m;
  if (!ParseLine(line, max_path_bytes_, &m, &stats_)) {
    error_ = absl::InvalidArgumentError(
        absl::StrCat("malformed maps line ", line_number_, ": '", line.substr(0, 120), "'"));
    return;
  }
  if (!executable_only_ || m.executable) mappings_.push_back(std::move(m));
}

void ProcMapsParser::Append(absl::string_view bytes) {
  bytes_ += bytes.size();
  // The kernel writes a path of at most PATH_MAX (4 KiB) on a line of its own: anything much
  // longer is not maps text.
  constexpr size_t kMaxLine = size_t{64} << 10;
  while (!bytes.empty() && error_.ok()) {
    const size_t newline = bytes.find('\n');
    if (newline == absl::string_view::npos) {
      partial_.append(bytes.data(), bytes.size());
      if (partial_.size() > kMaxLine) {
        error_ = absl::InvalidArgumentError(
            absl::StrCat("maps line ", line_number_ + 1, " is over ", kMaxLine, " bytes"));
      }
      return;
    }
    if (partial_.empty()) {
      ParseOne(bytes.substr(0, newline));
    } else {
      partial_.append(bytes.data(), newline);
      ParseOne(partial_);
      partial_.clear();
    }
    bytes.remove_prefix(newline + 1);
  }
}

absl::StatusOr<std::vector<MemoryMapping>> ProcMapsParser::Finish() && {
  ParseOne(partial_);
  if (!error_.ok()) return error_;
  return std::move(mappings_);
}

absl::StatusOr<std::vector<MemoryMapping>> ParseProcMaps(absl::string_view text,
                                                         size_t max_path_bytes,
                                                         ProcMapsStats* stats) {
  ProcMapsParser parser(max_path_bytes);
  parser.Append(text);
  absl::StatusOr<std::vector<MemoryMapping>> mappings = std::move(parser).Finish();
  if (stats != nullptr) stats->long_paths += parser.stats().long_paths;
  return mappings;
}

std::vector<MemoryMapping> KeepExecutableMappings(std::vector<MemoryMapping> all,
                                                  absl::string_view executable_path,
                                                  size_t max_mappings, ProcMapsStats* stats) {
  std::erase_if(all, [](const MemoryMapping& m) { return !m.executable; });
  if (all.size() > max_mappings) {
    // The program's own code is where most of its samples land; other files' code is named from
    // their symbols (and signal frames unwind through the vDSO); anonymous code needs no mapping
    // to be named from a JIT's perf map (src/runtimes/perf_map).
    const auto rank = [&](const MemoryMapping& m) {
      if (m.IsFileBacked()) return !executable_path.empty() && m.path == executable_path ? 0 : 1;
      return m.path == "[vdso]" ? 1 : 2;
    };
    std::stable_sort(all.begin(), all.end(), [&](const MemoryMapping& a, const MemoryMapping& b) {
      return rank(a) < rank(b);
    });
    if (stats != nullptr) stats->dropped_mappings += all.size() - max_mappings;
    all.resize(max_mappings);
  }
  // In address order, as the kernel writes them, whatever the text said: lookups rely on it.
  const auto by_start = [](const MemoryMapping& a, const MemoryMapping& b) {
    return a.start < b.start;
  };
  if (!std::is_sorted(all.begin(), all.end(), by_start)) {
    std::sort(all.begin(), all.end(), by_start);
  }
  all.shrink_to_fit();
  return all;
}

size_t MappingsBytes(const std::vector<MemoryMapping>& mappings) {
  // A string keeps short text inside itself; longer text has a heap block of capacity + 1.
  const size_t inline_capacity = std::string().capacity();
  size_t bytes = mappings.capacity() * sizeof(MemoryMapping);
  for (const MemoryMapping& m : mappings) {
    if (m.path.capacity() > inline_capacity) bytes += m.path.capacity() + 1;
  }
  return bytes;
}

}  // namespace ember
