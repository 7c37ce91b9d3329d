// RecordedMemory: coalesced byte ranges and named values, in a text file.
#include "support/recorded_memory.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ember::testing {
namespace {

bool IsHex(absl::string_view text) {
  if (text.size() % 2 != 0) return false;
  for (char c : text) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

bool RecordedMemory::Read(uint64_t address, void* out, size_t size) {
  if (size == 0) return true;
  auto after = ranges_.upper_bound(address);
  if (after == ranges_.begin()) return false;
  const auto& [start, bytes] = *std::prev(after);
  const uint64_t offset = address - start;
  if (offset >= bytes.size() || bytes.size() - offset < size) return false;
  std::memcpy(out, bytes.data() + offset, size);
  return true;
}

void RecordedMemory::Add(uint64_t address, const void* bytes, size_t size) {
  if (size == 0 || address + size < address) return;
  uint64_t start = address;
  uint64_t end = address + size;
  // Every range that overlaps or touches [start, end) is merged into one.
  auto first = ranges_.upper_bound(start);
  if (first != ranges_.begin()) {
    auto before = std::prev(first);
    if (before->first + before->second.size() >= start) first = before;
  }
  std::string merged;
  auto last = first;
  for (; last != ranges_.end() && last->first <= end; ++last) {
    start = std::min(start, last->first);
    end = std::max<uint64_t>(end, last->first + last->second.size());
  }
  merged.assign(end - start, '\0');
  for (auto it = first; it != last; ++it) {
    std::memcpy(merged.data() + (it->first - start), it->second.data(), it->second.size());
  }
  std::memcpy(merged.data() + (address - start), bytes, size);  // the newest read wins
  ranges_.erase(first, last);
  ranges_.emplace(start, std::move(merged));
}

bool RecordedMemory::Overwrite(uint64_t address, const void* bytes, size_t size) {
  auto after = ranges_.upper_bound(address);
  if (after == ranges_.begin()) return false;
  auto& [start, data] = *std::prev(after);
  const uint64_t offset = address - start;
  if (offset >= data.size() || data.size() - offset < size) return false;
  std::memcpy(data.data() + offset, bytes, size);
  return true;
}

void RecordedMemory::Set(const std::string& name, const std::string& value) {
  for (auto& [key, text] : values_) {
    if (key == name) {
      text = value;
      return;
    }
  }
  values_.emplace_back(name, value);
}

const std::string* RecordedMemory::Get(const std::string& name) const {
  for (const auto& [key, text] : values_) {
    if (key == name) return &text;
  }
  return nullptr;
}

size_t RecordedMemory::byte_count() const {
  size_t total = 0;
  for (const auto& [start, bytes] : ranges_) total += bytes.size();
  return total;
}

std::string RecordedMemory::Serialize() const {
  std::string text = "# ember recorded memory v1\n";
  for (const auto& [key, value] : values_) absl::StrAppend(&text, "value ", key, " ", value, "\n");
  for (const auto& [start, bytes] : ranges_) {
    absl::StrAppend(&text, "range ", absl::Hex(start), " ", absl::BytesToHexString(bytes), "\n");
  }
  return text;
}

absl::StatusOr<RecordedMemory> RecordedMemory::Parse(const std::string& text) {
  RecordedMemory memory;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(' ', 2));
    if (parts.size() == 3 && parts[0] == "value") {
      memory.Set(std::string(parts[1]), std::string(parts[2]));
      continue;
    }
    uint64_t address = 0;
    if (parts.size() != 3 || parts[0] != "range" || !absl::SimpleHexAtoi(parts[1], &address) ||
        !IsHex(parts[2])) {
      return absl::InvalidArgumentError(
          absl::StrCat("recorded memory: line ", line_number, " is neither a value nor a range"));
    }
    const std::string bytes = absl::HexStringToBytes(parts[2]);
    memory.Add(address, bytes.data(), bytes.size());
  }
  return memory;
}

absl::StatusOr<RecordedMemory> RecordedMemory::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("recorded memory: cannot open ", path));
  std::stringstream text;
  text << in.rdbuf();
  return Parse(text.str());
}

absl::Status RecordedMemory::Save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << Serialize();
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("recorded memory: cannot write ", path));
  return absl::OkStatus();
}

}  // namespace ember::testing
