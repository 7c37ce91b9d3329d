// JitDump: jitdump records into names and line tables; JitDumpFile: incremental reads of a file.
#include "symbolize/jitdump.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "common/log_safe.h"
#include "common/utf8.h"
#include "spdlog/spdlog.h"

namespace ember {
namespace {

constexpr uint32_t kMagic = 0x4A695444;         // "JiTD" in the writer's byte order
constexpr uint32_t kSwappedMagic = 0x4454694A;  // the same, written by the other byte order
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 40;
constexpr uint64_t kMaxHeaderBytes = 4096;
constexpr uint64_t kPrefixBytes = 16;      // id, total_size, timestamp
constexpr uint64_t kCodeLoadFixed = 40;    // pid, tid, vma, code_addr, code_size, code_index
constexpr uint64_t kCodeMoveFixed = 48;    // pid, tid, vma, old and new code_addr, size, index
constexpr uint64_t kDebugInfoFixed = 16;   // code_addr, nr_entry
constexpr uint64_t kDebugEntryFixed = 16;  // addr, line, discrim
// Code a JIT compiles is KiBs to a few MiB; a bigger record is no record.
constexpr uint64_t kMaxRecordBytes = uint64_t{256} << 20;
// A debug-info record is read whole; a bigger one is skipped (its code keeps its name).
constexpr uint64_t kMaxDebugInfoBytes = uint64_t{16} << 20;
// V8's kElfHeaderSize (see JitDumpWriter), by its target's pointer size, which the header's
// e_machine tells: V8's 32-bit targets are ia32 and arm.
constexpr uint64_t kV8ElfHeaderBytes64 = 0x40;
constexpr uint64_t kV8ElfHeaderBytes32 = 0x34;
constexpr uint32_t kEm386 = 3;
constexpr uint32_t kEmArm = 40;
constexpr uint32_t kCodeLoad = 0;
constexpr uint32_t kCodeMove = 1;
constexpr uint32_t kDebugInfo = 2;
constexpr uint32_t kCodeClose = 3;

constexpr size_t kRefusalKinds = 6;
std::array<std::atomic<uint64_t>, kRefusalKinds> refusal_counts{};

uint32_t U32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
uint64_t U64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

LogRateLimiter& Warnings() {
  static LogRateLimiter limiter(kLogLinesPerMinute, std::chrono::minutes(1));
  return limiter;
}

// pread through a 64 KiB window: records are small and consecutive, so most need no system call.
class FdSource : public JitDumpSource {
 public:
  FdSource(int fd, uint64_t size) : fd_(fd), size_(size) {}
  uint64_t size() const override { return size_; }
  bool Read(uint64_t offset, size_t size, char* out) override {
    if (offset > size_ || size > size_ - offset) return false;
    if (offset >= start_ && offset + size <= start_ + window_.size()) {
      std::memcpy(out, window_.data() + (offset - start_), size);
      return true;
    }
    if (size > kWindow) return ReadAll(offset, size, out);
    window_.resize(std::min<uint64_t>(kWindow, size_ - offset));
    start_ = offset;
    if (!ReadAll(offset, window_.size(), window_.data())) {
      window_.clear();
      return false;
    }
    std::memcpy(out, window_.data(), size);
    return true;
  }

 private:
  static constexpr size_t kWindow = size_t{64} << 10;
  bool ReadAll(uint64_t offset, size_t size, char* out) const {
    size_t done = 0;
    while (done < size) {
      ssize_t n = pread(fd_, out + done, size - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }
  int fd_;
  uint64_t size_;
  uint64_t start_ = 0;
  std::string window_;
};

}  // namespace

absl::string_view JitDumpRefusalName(JitDumpRefusal refusal) {
  switch (refusal) {
    case JitDumpRefusal::kNone:
      return "none";
    case JitDumpRefusal::kBadMagic:
      return "bad_magic";
    case JitDumpRefusal::kByteOrder:
      return "byte_order";
    case JitDumpRefusal::kVersion:
      return "version";
    case JitDumpRefusal::kBadHeader:
      return "bad_header";
    case JitDumpRefusal::kBadRecord:
      return "bad_record";
  }
  return "unknown";
}

uint64_t JitDumpRefusalCount(JitDumpRefusal refusal) {
  return refusal_counts[static_cast<size_t>(refusal)].load(std::memory_order_relaxed);
}

JitDump::JitDump(PerfMapLimits limits, JitDumpWriter writer)
    : limits_(limits), writer_(writer), names_(limits) {}

void JitDump::Reset() {
  names_.Reset();
  lines_.clear();
  pending_.reset();
  line_bytes_ = 0;
  header_read_ = false;
  closed_ = false;
  offset_ = 0;
  refusal_ = JitDumpRefusal::kNone;
}

bool JitDump::Refuse(JitDumpRefusal why) {
  refusal_ = why;
  refusal_counts[static_cast<size_t>(why)].fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool JitDump::ReadHeader(JitDumpSource& source) {
  char header[kHeaderBytes];
  if (source.size() < kHeaderBytes || !source.Read(0, kHeaderBytes, header)) return false;
  const uint32_t magic = U32(header);
  if (magic == kSwappedMagic) return Refuse(JitDumpRefusal::kByteOrder);
  if (magic != kMagic) return Refuse(JitDumpRefusal::kBadMagic);
  if (U32(header + 4) != kVersion) return Refuse(JitDumpRefusal::kVersion);
  const uint32_t size = U32(header + 8);
  if (size < kHeaderBytes || size > kMaxHeaderBytes) return Refuse(JitDumpRefusal::kBadHeader);
  const uint32_t machine = U32(header + 12);
  debug_address_bias_ = 0;
  if (writer_ == JitDumpWriter::kV8) {
    debug_address_bias_ =
        machine == kEm386 || machine == kEmArm ? kV8ElfHeaderBytes32 : kV8ElfHeaderBytes64;
  }
  offset_ = size;
  header_read_ = true;
  return true;
}

size_t JitDump::Read(JitDumpSource& source, uint64_t max_bytes) {
  if (refusal_ != JitDumpRefusal::kNone || closed_) return 0;
  if (!header_read_ && !ReadHeader(source)) return 0;
  size_t records = 0;
  const uint64_t start = offset_;
  while (!closed_ && offset_ - start < max_bytes) {
    char prefix[kPrefixBytes];
    if (source.size() < offset_ || source.size() - offset_ < kPrefixBytes ||
        !source.Read(offset_, kPrefixBytes, prefix)) {
      break;
    }
    const uint32_t id = U32(prefix);
    const uint64_t size = U32(prefix + 4);
    if (size < kPrefixBytes || size > kMaxRecordBytes) {
      Refuse(JitDumpRefusal::kBadRecord);
      break;
    }
    // Not all written yet: the runtime is writing it, or died in the middle of it.
    if (source.size() - offset_ < size) break;
    if (!ReadRecord(source, id, size)) break;
    offset_ += size;
    ++records;
  }
  return records;
}

bool JitDump::ReadRecord(JitDumpSource& source, uint32_t id, uint64_t size) {
  switch (id) {
    case kCodeLoad:
      return ReadCodeLoad(source, size);
    case kCodeMove:
      return ReadCodeMove(source, size);
    case kDebugInfo:
      return ReadDebugInfo(source, size);
    case kCodeClose:
      closed_ = true;
      return true;
    default:  // unwinding info, and kinds added since: the size says how far to skip
      ++stats_.other_records;
      return true;
  }
}

bool JitDump::ReadCodeLoad(JitDumpSource& source, uint64_t size) {
  if (size < kPrefixBytes + kCodeLoadFixed + 1) return Refuse(JitDumpRefusal::kBadRecord);
  char fixed[kCodeLoadFixed];
  if (!source.Read(offset_ + kPrefixBytes, kCodeLoadFixed, fixed)) return false;
  const uint64_t code_addr = U64(fixed + 16);
  const uint64_t code_size = U64(fixed + 24);
  const uint64_t name_room = size - kPrefixBytes - kCodeLoadFixed;
  if (code_size >= name_room) return Refuse(JitDumpRefusal::kBadRecord);  // no room for a name
  // The name ends at its NUL; the code follows. Only as much of it as a name may hold is read.
  const uint64_t name_region = name_room - code_size;
  std::string name(std::min<uint64_t>(name_region, limits_.max_line_bytes + 1), '\0');
  if (!source.Read(offset_ + kPrefixBytes + kCodeLoadFixed, name.size(), name.data())) {
    return false;
  }
  name.resize(std::min(name.size(), name.find('\0')));
  // Profiles carry names as UTF-8; a runtime writes what it likes.
  if (!IsValidUtf8(name)) name = ToValidUtf8(name);
  ++stats_.code_loads;
  // The code there now is this one: what was named or described there before is not.
  DropLines(code_addr, code_addr + code_size);
  if (names_.Add(code_addr, code_size, name) && pending_ && pending_->code_addr == code_addr) {
    LineTable table;
    table.rows = std::move(pending_->rows);
    table.files = std::move(pending_->files);
    AddLines(code_addr, code_addr + code_size, std::move(table));
  }
  pending_.reset();
  return true;
}

bool JitDump::ReadCodeMove(JitDumpSource& source, uint64_t size) {
  if (size < kPrefixBytes + kCodeMoveFixed) return Refuse(JitDumpRefusal::kBadRecord);
  char fixed[kCodeMoveFixed];
  if (!source.Read(offset_ + kPrefixBytes, kCodeMoveFixed, fixed)) return false;
  const uint64_t old_addr = U64(fixed + 16);
  const uint64_t new_addr = U64(fixed + 24);
  const uint64_t code_size = U64(fixed + 32);
  std::optional<PerfMapSymbol> moved = names_.Lookup(old_addr);
  if (!moved) return true;  // code this dump never named (or evicted): nothing to move
  const std::string name(moved->name);
  std::optional<LineTable> table;
  if (auto it = lines_.find(old_addr); it != lines_.end()) {
    table = std::move(it->second);
    line_bytes_ -= table->bytes;
    lines_.erase(it);
  }
  DropLines(new_addr, new_addr + code_size);
  if (names_.Add(new_addr, code_size, name)) {
    ++stats_.code_moves;
    if (table) AddLines(new_addr, new_addr + code_size, std::move(*table));
  }
  return true;
}

bool JitDump::ReadDebugInfo(JitDumpSource& source, uint64_t size) {
  if (size < kPrefixBytes + kDebugInfoFixed) return Refuse(JitDumpRefusal::kBadRecord);
  if (size > kMaxDebugInfoBytes) {
    ++stats_.other_records;
    pending_.reset();
    return true;
  }
  std::string bytes(size - kPrefixBytes, '\0');
  if (!source.Read(offset_ + kPrefixBytes, bytes.size(), bytes.data())) return false;
  const uint64_t code_addr = U64(bytes.data());
  const uint64_t count = U64(bytes.data() + 8);
  // Each entry is at least its fixed part and a NUL.
  if (count > (bytes.size() - kDebugInfoFixed) / (kDebugEntryFixed + 1)) {
    return Refuse(JitDumpRefusal::kBadRecord);
  }
  PendingLines lines;
  lines.code_addr = code_addr;
  lines.rows.reserve(count);
  size_t at = kDebugInfoFixed;
  for (uint64_t i = 0; i < count; ++i) {
    if (bytes.size() - at < kDebugEntryFixed + 1) return Refuse(JitDumpRefusal::kBadRecord);
    const uint64_t addr = U64(bytes.data() + at);
    const uint32_t line = U32(bytes.data() + at + 8);
    at += kDebugEntryFixed;
    const size_t end = bytes.find('\0', at);
    if (end == std::string::npos) return Refuse(JitDumpRefusal::kBadRecord);
    absl::string_view file(bytes.data() + at, end - at);
    at = end + 1;
    // "\xff" stands for the previous entry's file. V8 writes bytes that are no name for code
    // without a script: its rows have no file (empty), not a made-up one.
    const bool same = file == "\xff" && !lines.files.empty();
    if (!same && !IsValidUtf8(file)) file = {};
    if (!same && (lines.files.empty() || lines.files.back() != file)) {
      lines.files.emplace_back(file.substr(0, limits_.max_line_bytes));
    }
    const uint64_t offset =
        addr > code_addr + debug_address_bias_ ? addr - code_addr - debug_address_bias_ : 0;
    if (offset > std::numeric_limits<uint32_t>::max()) continue;
    lines.rows.push_back(
        {static_cast<uint32_t>(offset), line, static_cast<uint32_t>(lines.files.size() - 1)});
  }
  std::stable_sort(lines.rows.begin(), lines.rows.end(),
                   [](const LineRow& a, const LineRow& b) { return a.offset < b.offset; });
  pending_ = std::move(lines);
  return true;
}

void JitDump::DropLines(uint64_t start, uint64_t end) {
  auto it = lines_.lower_bound(start);
  if (it != lines_.begin() && std::prev(it)->second.end > start) --it;
  while (it != lines_.end() && it->first < end) {
    line_bytes_ -= it->second.bytes;
    it = lines_.erase(it);
  }
}

void JitDump::AddLines(uint64_t start, uint64_t end, LineTable table) {
  if (table.rows.empty()) return;
  table.end = end;
  table.seq = seq_++;
  table.rows.shrink_to_fit();
  table.bytes = sizeof(LineTable) + 64 + table.rows.capacity() * sizeof(LineRow);
  for (const std::string& file : table.files) table.bytes += sizeof(std::string) + file.capacity();
  const size_t budget = limits_.max_bytes / 4;
  if (table.bytes > budget) return;
  while (line_bytes_ + table.bytes > budget && !lines_.empty()) {
    // The oldest half goes, as a perf map's entries do.
    DropOlderHalfOfLines();
    ++stats_.line_evictions;
  }
  line_bytes_ += table.bytes;
  ++stats_.debug_infos;
  lines_.emplace(start, std::move(table));
}

void JitDump::ShedOldest() {
  names_.ShedOldest();
  // Line tables of code no longer named are not looked up, but hold memory: half go as well.
  DropOlderHalfOfLines();
}

void JitDump::DropOlderHalfOfLines() {
  if (lines_.empty()) return;
  std::vector<uint64_t> seqs;
  for (const auto& [s, t] : lines_) seqs.push_back(t.seq);
  auto middle = seqs.begin() + static_cast<ptrdiff_t>(seqs.size() / 2);
  std::nth_element(seqs.begin(), middle, seqs.end());
  // One table left: it goes too.
  const uint64_t cut = seqs.size() > 1 ? *middle : std::numeric_limits<uint64_t>::max();
  std::erase_if(lines_, [&](const auto& item) {
    if (item.second.seq >= cut) return false;
    line_bytes_ -= item.second.bytes;
    return true;
  });
}

std::optional<JitDumpLine> JitDump::LineAt(uint64_t address) const {
  auto it = lines_.upper_bound(address);
  if (it == lines_.begin()) return std::nullopt;
  --it;
  const LineTable& table = it->second;
  if (address >= table.end) return std::nullopt;
  const uint64_t offset = address - it->first;
  auto row = std::upper_bound(table.rows.begin(), table.rows.end(), offset,
                              [](uint64_t o, const LineRow& r) { return o < r.offset; });
  if (row == table.rows.begin()) return std::nullopt;
  --row;
  if (table.files[row->file].empty()) return std::nullopt;
  return JitDumpLine{table.files[row->file], row->line};
}

JitDumpFile::JitDumpFile(FileLocation location, std::string name, PerfMapLimits limits,
                         uint64_t max_read_per_refresh, JitDumpWriter writer)
    : location_(std::move(location)),
      name_(std::move(name)),
      max_read_(std::max<uint64_t>(max_read_per_refresh, 1)),
      dump_(limits, writer) {}

JitDumpFile::Result JitDumpFile::Refresh() {
  absl::StatusOr<UntrustedFile> opened = OpenUntrusted(location_);
  if (!opened.ok()) return Result::kMissing;
  const struct stat& st = opened->st;
  const auto size = static_cast<uint64_t>(st.st_size);
  const bool reload = st.st_dev != dev_ || st.st_ino != inode_ || size < dump_.offset();
  if (reload) {
    dump_.Reset();
    dev_ = st.st_dev;
    inode_ = st.st_ino;
    refusal_logged_ = false;
  }
  const uint64_t before = dump_.offset();
  const uint64_t evictions_before = dump_.names().stats().evictions;
  FdSource source(opened->fd.get(), size);
  dump_.Read(source, max_read_);
  if (dump_.refusal() != JitDumpRefusal::kNone && !refusal_logged_) {
    refusal_logged_ = true;
    LogLimited(Warnings(), spdlog::level::warn,
               "{}: not a jitdump the agent reads ({} at byte {}); JIT code it names stays "
               "unnamed",
               LogSafe(location_.Display()), std::string(JitDumpRefusalName(dump_.refusal())),
               dump_.offset());
  }
  if (evictions_before == 0 && dump_.names().stats().evictions > 0) {
    LogLimited(Warnings(), spdlog::level::warn,
               "{}: reached the perf map limit ({} bytes); its oldest entries are evicted to make "
               "room",
               LogSafe(location_.Display()), dump_.names().limits().max_bytes);
  }
  if (reload) return Result::kReloaded;
  return dump_.offset() > before ? Result::kGrew : Result::kUnchanged;
}

}  // namespace ember
