// Perf map parsing (PerfMap) and incremental reading (PerfMapFile).
#include "symbolize/perf_map.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/log_safe.h"
#include "spdlog/spdlog.h"

namespace ember {
namespace {

// One warning per perf map at its limit: a workload with many of them must not flood the log.
LogRateLimiter& Warnings() {
  static LogRateLimiter limiter(kLogLinesPerMinute, std::chrono::minutes(1));
  return limiter;
}

// One counter for every PerfMap, so versions never repeat across processes.
std::atomic<uint64_t> next_version{1};

// 1 to 16 hex digits, with or without "0x" (the JVM writes it, Node.js does not).
bool ParseHex(absl::string_view text, uint64_t* value) {
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X'))
    text.remove_prefix(2);
  if (text.empty() || text.size() > 16) return false;
  uint64_t v = 0;
  for (char c : text) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      return false;
    }
    v = (v << 4) | static_cast<uint64_t>(digit);
  }
  *value = v;
  return true;
}

// The next space-separated field of `rest`, which loses it and the spaces after it.
absl::string_view NextField(absl::string_view* rest) {
  size_t space = rest->find(' ');
  absl::string_view field = rest->substr(0, space);
  rest->remove_prefix(space == absl::string_view::npos ? rest->size() : space);
  while (!rest->empty() && rest->front() == ' ') rest->remove_prefix(1);
  return field;
}

constexpr size_t kTailBytes = 64;
constexpr size_t kReadChunk = size_t{1} << 20;

}  // namespace

PerfMap::PerfMap(PerfMapLimits limits) : limits_(limits) {
  // Name offsets are 32-bit.
  limits_.max_name_bytes =
      std::min<size_t>(limits_.max_name_bytes, std::numeric_limits<uint32_t>::max());
  NewVersion();
}

void PerfMap::NewVersion() { version_ = next_version.fetch_add(1, std::memory_order_relaxed); }

void PerfMap::Reset() {
  ranges_.clear();
  names_.clear();
  names_.shrink_to_fit();
  partial_line_.clear();
  skipping_long_line_ = false;
  compacted_ = false;
  ++stats_.resets;
  NewVersion();
}

size_t PerfMap::Append(absl::string_view bytes) {
  const uint64_t entries_before = stats_.entries;
  while (!bytes.empty()) {
    size_t newline = bytes.find('\n');
    absl::string_view piece = bytes.substr(0, newline);
    const bool complete = newline != absl::string_view::npos;
    bytes.remove_prefix(complete ? newline + 1 : bytes.size());
    if (skipping_long_line_) {
      if (complete) skipping_long_line_ = false;
      continue;
    }
    if (partial_line_.size() + piece.size() > limits_.max_line_bytes) {
      ++stats_.long_lines;
      partial_line_.clear();
      skipping_long_line_ = !complete;
      continue;
    }
    if (!complete) {
      partial_line_.append(piece.data(), piece.size());
      break;
    }
    if (partial_line_.empty()) {
      ParseLine(piece);
    } else {
      partial_line_.append(piece.data(), piece.size());
      ParseLine(partial_line_);
      partial_line_.clear();
    }
  }
  if (overlapped_) NewVersion();
  overlapped_ = false;
  return stats_.entries - entries_before;
}

void PerfMap::ParseLine(absl::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(line);
  if (rest.empty()) return;  // blank lines are not worth counting
  uint64_t start = 0;
  uint64_t size = 0;
  const bool parsed = ParseHex(NextField(&rest), &start) && ParseHex(NextField(&rest), &size);
  // The name is the rest of the line, spaces included.
  if (!parsed || size == 0 || start > std::numeric_limits<uint64_t>::max() - size || rest.empty()) {
    ++stats_.bad_lines;
    return;
  }
  Insert(start, start + size, rest);
}

bool PerfMap::Add(uint64_t start, uint64_t size, absl::string_view name) {
  if (size == 0 || start > std::numeric_limits<uint64_t>::max() - size || name.empty()) {
    ++stats_.bad_lines;
    return false;
  }
  if (name.size() > limits_.max_line_bytes) {
    ++stats_.long_lines;
    return false;
  }
  Insert(start, start + size, name);
  if (overlapped_) NewVersion();
  overlapped_ = false;
  return true;
}

size_t PerfMap::EstimatedBytes() const { return names_.size() + ranges_.size() * kEntryBytes; }

bool PerfMap::Fits(size_t name_size) const {
  // Splitting an older entry in two is the most a new entry can add beyond itself.
  return ranges_.size() + 2 <= limits_.max_entries &&
         names_.size() + name_size <= limits_.max_name_bytes &&
         EstimatedBytes() + name_size + 2 * kEntryBytes <= limits_.max_bytes;
}

void PerfMap::ShedOldest() {
  if (ranges_.empty()) return;
  EvictOldest();
  overlapped_ = false;
  NewVersion();
}

void PerfMap::EvictOldest() {
  std::vector<uint64_t> seqs;
  seqs.reserve(ranges_.size());
  for (const auto& [start, range] : ranges_) seqs.push_back(range.seq);
  const auto middle = seqs.begin() + static_cast<ptrdiff_t>(seqs.size() / 2);
  std::nth_element(seqs.begin(), middle, seqs.end());
  // Entries older than the median go; with one entry left, it goes too.
  const uint64_t cut = seqs.size() > 1 ? *middle : std::numeric_limits<uint64_t>::max();
  const size_t before = ranges_.size();
  std::erase_if(ranges_, [cut](const auto& item) { return item.second.seq < cut; });
  // Pieces of one split entry share its seq: when they are the older half, they go together.
  if (ranges_.size() == before) {
    std::erase_if(ranges_, [cut](const auto& item) { return item.second.seq <= cut; });
  }
  stats_.evicted += before - ranges_.size();
  ++stats_.evictions;
  overlapped_ = true;  // addresses named before may be unnamed now: a new version
  CompactNames();
  compacted_ = false;
}

void PerfMap::Insert(uint64_t start, uint64_t end, absl::string_view name) {
  if (!Fits(name.size())) {
    // A name that could not fit even alone is refused; anything else makes room.
    if (limits_.max_entries < 2 || name.size() > limits_.max_name_bytes ||
        name.size() + 2 * kEntryBytes > limits_.max_bytes) {
      ++stats_.dropped;
      return;
    }
    // Names of entries later ones covered whole are garbage. Compact only while that frees at
    // least half, so the work stays linear in what is appended.
    if (!compacted_) {
      CompactNames();
      compacted_ = names_.size() > limits_.max_name_bytes / 2;
    }
    while (!Fits(name.size())) EvictOldest();
  }

  const auto name_offset = static_cast<uint32_t>(names_.size());
  const auto name_size = static_cast<uint32_t>(name.size());
  names_.append(name.data(), name.size());

  // Carve [start, end) out of the ranges it overlaps.
  auto it = ranges_.lower_bound(start);
  if (it != ranges_.begin()) {
    auto before = std::prev(it);
    if (before->second.end > start) it = before;
  }
  while (it != ranges_.end() && it->first < end) {
    overlapped_ = true;
    const uint64_t old_start = it->first;
    const Range old = it->second;
    it = ranges_.erase(it);
    if (old_start < start) {
      ranges_.emplace_hint(it, old_start, Range{start, old.seq, old.name_offset, old.name_size});
    }
    if (old.end > end) {
      ranges_.emplace_hint(it, end, Range{old.end, old.seq, old.name_offset, old.name_size});
      break;  // ranges never overlap, so nothing after this one reaches below `end`
    }
  }
  ranges_.emplace(start, Range{end, next_seq_++, name_offset, name_size});
  ++stats_.entries;
}

void PerfMap::CompactNames() {
  std::string compacted;
  std::unordered_map<uint32_t, uint32_t> moved;  // old offset -> new offset
  for (auto& [start, range] : ranges_) {
    auto [it, inserted] = moved.try_emplace(range.name_offset, 0);
    if (inserted) {
      it->second = static_cast<uint32_t>(compacted.size());
      compacted.append(names_, range.name_offset, range.name_size);
    }
    range.name_offset = it->second;
  }
  names_ = std::move(compacted);
}

std::optional<PerfMapSymbol> PerfMap::Lookup(uint64_t address) const {
  auto it = ranges_.upper_bound(address);
  if (it == ranges_.begin()) return std::nullopt;
  --it;
  if (address >= it->second.end) return std::nullopt;
  return PerfMapSymbol{
      .start = it->first,
      .end = it->second.end,
      .name = absl::string_view(names_).substr(it->second.name_offset, it->second.name_size)};
}

PerfMapFile::PerfMapFile(FileLocation location, std::string name, PerfMapLimits limits,
                         size_t max_read_per_refresh)
    : location_(std::move(location)),
      name_(std::move(name)),
      max_read_(std::max<size_t>(max_read_per_refresh, 1)),
      map_(limits) {}

PerfMapFile::Result PerfMapFile::Refresh() {
  // Under the process's root: its links cannot make us read another process's or the host's
  // file, nor its FIFO stall us.
  absl::StatusOr<UntrustedFile> opened = OpenUntrusted(location_);
  if (!opened.ok()) return Result::kMissing;
  const int fd = opened->fd.get();
  const struct stat& st = opened->st;
  const auto size = static_cast<uint64_t>(st.st_size);

  bool reload = st.st_dev != dev_ || st.st_ino != inode_ || size < offset_;
  if (!reload && !tail_.empty()) {
    std::string now(tail_.size(), '\0');
    const ssize_t n = pread(fd, now.data(), now.size(), static_cast<off_t>(offset_ - tail_.size()));
    reload = n != static_cast<ssize_t>(now.size()) || now != tail_;
  }
  if (reload) {
    if (offset_ > 0 || map_.size() > 0) map_.Reset();
    dev_ = st.st_dev;
    inode_ = st.st_ino;
    offset_ = 0;
    tail_.clear();
  }

  const uint64_t evictions_before = map_.stats().evictions;
  uint64_t read = 0;
  const uint64_t stop = std::min<uint64_t>(size, offset_ + max_read_);
  std::vector<char> buffer(std::min<uint64_t>(kReadChunk, stop - offset_));
  while (offset_ < stop) {
    const size_t want = std::min<uint64_t>(buffer.size(), stop - offset_);
    const ssize_t n = pread(fd, buffer.data(), want, static_cast<off_t>(offset_));
    if (n <= 0) break;  // truncated under us: the next call sees the smaller size
    absl::string_view chunk(buffer.data(), static_cast<size_t>(n));
    map_.Append(chunk);
    offset_ += static_cast<uint64_t>(n);
    read += static_cast<uint64_t>(n);
    if (chunk.size() >= kTailBytes) {
      tail_.assign(chunk.data() + chunk.size() - kTailBytes, kTailBytes);
    } else {
      tail_.append(chunk.data(), chunk.size());
      if (tail_.size() > kTailBytes) tail_.erase(0, tail_.size() - kTailBytes);
    }
  }
  if (evictions_before == 0 && map_.stats().evictions > 0) {
    LogLimited(Warnings(), spdlog::level::warn,
               "{}: reached the perf map limit ({} entries, {} bytes); its oldest entries are "
               "evicted to make room",
               LogSafe(location_.Display()), map_.limits().max_entries, map_.limits().max_bytes);
  }
  if (reload) return Result::kReloaded;
  return read > 0 ? Result::kGrew : Result::kUnchanged;
}

uint32_t NamespacePid(absl::string_view status_text, uint32_t pid) {
  for (absl::string_view line : absl::StrSplit(status_text, '\n')) {
    if (!absl::ConsumePrefix(&line, "NSpid:")) continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    uint32_t ns_pid = 0;
    if (!fields.empty() && absl::SimpleAtoi(fields.back(), &ns_pid) && ns_pid != 0) return ns_pid;
    return pid;
  }
  return pid;
}

}  // namespace ember
