// Parsing and lookup of /proc/kallsyms.
#include "symbolize/kallsyms.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ember {
namespace {

constexpr char kKptrRestrictHint[] =
    "kernel symbol addresses are hidden (all zero): run as root (CAP_SYSLOG) or set "
    "sysctl kernel.kptr_restrict=0";

// A kallsyms line is under 600 bytes (KSYM_NAME_LEN is 512); a longer one is not a symbol, and
// is dropped rather than held whole.
constexpr size_t kMaxLineBytes = 4096;

bool IsTextType(char type) { return type == 't' || type == 'T' || type == 'w' || type == 'W'; }

std::string_view NextField(std::string_view& line) {
  size_t start = line.find_first_not_of(" \t");
  if (start == std::string_view::npos) {
    line = {};
    return {};
  }
  line.remove_prefix(start);
  size_t end = line.find_first_of(" \t");
  std::string_view field = line.substr(0, end);
  line.remove_prefix(end == std::string_view::npos ? line.size() : end);
  return field;
}

}  // namespace

// Takes lines in file order; Finish sorts them and says whether the text held symbols at all.
class KernelSymbols::Builder {
 public:
  Builder() { table_.modules_.emplace_back(); }

  void AddLines(std::string_view text) {
    while (!text.empty()) {
      size_t eol = text.find('\n');
      AddLine(text.substr(0, eol));
      text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    }
  }

  // Format: "ffffffff81000000 T _stext" or "ffffffffc0a01000 t ext4_foo\t[ext4]".
  void AddLine(std::string_view line) {
    std::string_view addr_field = NextField(line);
    std::string_view type_field = NextField(line);
    std::string_view name = NextField(line);
    if (addr_field.empty() || type_field.size() != 1 || name.empty()) return;
    uint64_t address = 0;
    auto [ptr, ec] =
        std::from_chars(addr_field.data(), addr_field.data() + addr_field.size(), address, 16);
    if (ec != std::errc() || ptr != addr_field.data() + addr_field.size()) return;
    if (address != 0) any_nonzero_ = true;
    if (!IsTextType(type_field[0])) return;

    std::string_view module = NextField(line);
    if (module.size() >= 2 && module.front() == '[' && module.back() == ']') {
      module = module.substr(1, module.size() - 2);
    } else {
      module = {};
    }
    std::optional<uint16_t> module_index = ModuleIndex(module);
    if (!module_index || name.size() > std::numeric_limits<uint16_t>::max() ||
        table_.names_.size() + name.size() > std::numeric_limits<uint32_t>::max()) {
      return;
    }
    table_.entries_.push_back(Entry{.address = address,
                                    .name_offset = static_cast<uint32_t>(table_.names_.size()),
                                    .name_size = static_cast<uint16_t>(name.size()),
                                    .module = *module_index});
    table_.names_.append(name);
    if (*module_index == 0)
      table_.kernel_image_last_ = std::max(table_.kernel_image_last_, address);
  }

  absl::StatusOr<KernelSymbols> Finish() && {
    if (!any_nonzero_) {
      if (table_.entries_.empty()) return absl::InvalidArgumentError("no kernel symbols found");
      return absl::PermissionDeniedError(kKptrRestrictHint);
    }
    // Stable, so that of several names at one address the first listed wins, as in perf.
    std::stable_sort(table_.entries_.begin(), table_.entries_.end(),
                     [](const Entry& a, const Entry& b) { return a.address < b.address; });
    table_.entries_.shrink_to_fit();
    table_.names_.shrink_to_fit();
    return std::move(table_);
  }

 private:
  // Lines of one module come together, so the last one found is nearly always the answer.
  std::optional<uint16_t> ModuleIndex(std::string_view module) {
    if (table_.modules_[last_module_] == module) return last_module_;
    for (size_t i = 0; i < table_.modules_.size(); ++i) {
      if (table_.modules_[i] == module) return last_module_ = static_cast<uint16_t>(i);
    }
    if (table_.modules_.size() > std::numeric_limits<uint16_t>::max()) return std::nullopt;
    table_.modules_.emplace_back(module);
    return last_module_ = static_cast<uint16_t>(table_.modules_.size() - 1);
  }

  KernelSymbols table_;
  bool any_nonzero_ = false;
  uint16_t last_module_ = 0;
};

absl::StatusOr<KernelSymbols> KernelSymbols::Parse(std::string_view text) {
  Builder builder;
  builder.AddLines(text);
  return std::move(builder).Finish();
}

absl::StatusOr<KernelSymbols> KernelSymbols::Load(const std::string& path) {
  absl::StatusOr<KallsymsFile> file = KallsymsFile::Open(path);
  if (!file.ok()) return file.status();
  return file->Read();
}

absl::StatusOr<KernelSymbols> KernelSymbols::ReadFd(int fd, const std::string& path) {
  // A piece at a time: the file is 5 MB or more, and held whole it doubled the load's memory.
  // /proc files report size 0, so read until EOF rather than by size.
  Builder builder;
  std::string chunk(size_t{256} << 10, '\0');
  std::string cut_line;   // the end of the last piece, a line the piece boundary cut
  bool dropping = false;  // within a line over kMaxLineBytes
  while (true) {
    ssize_t n = read(fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::DataLossError(
          absl::StrCat("error reading kernel symbols from ", path, ": ", std::strerror(errno)));
    }
    if (n == 0) break;
    std::string_view piece(chunk.data(), static_cast<size_t>(n));
    size_t eol = piece.find('\n');
    if (eol == std::string_view::npos) {
      cut_line.append(piece);
    } else {
      cut_line.append(piece.substr(0, eol));
      if (!dropping) builder.AddLine(cut_line);
      cut_line.clear();
      dropping = false;
      piece.remove_prefix(eol + 1);
      size_t last_eol = piece.rfind('\n');
      if (last_eol != std::string_view::npos) {
        builder.AddLines(piece.substr(0, last_eol));
        piece.remove_prefix(last_eol + 1);
      }
      cut_line.assign(piece);
    }
    if (cut_line.size() > kMaxLineBytes) {
      cut_line.clear();
      dropping = true;
    }
  }
  if (!dropping) builder.AddLine(cut_line);
  absl::StatusOr<KernelSymbols> symbols = std::move(builder).Finish();
  if (!symbols.ok()) {
    return absl::Status(symbols.status().code(),
                        absl::StrCat(path, ": ", symbols.status().message()));
  }
  return symbols;
}

absl::StatusOr<KallsymsFile> KallsymsFile::Open(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot read kernel symbols from ", path, ": ", std::strerror(errno)));
  }
  return KallsymsFile(std::move(fd), path);
}

absl::StatusOr<KernelSymbols> KallsymsFile::Read() {
  if (lseek(fd_.get(), 0, SEEK_SET) != 0) {
    return absl::DataLossError(
        absl::StrCat("cannot read kernel symbols from ", path_, " again: ", std::strerror(errno)));
  }
  return KernelSymbols::ReadFd(fd_.get(), path_);
}

std::optional<KernelSymbol> KernelSymbols::Lookup(uint64_t address) const {
  auto it =
      std::upper_bound(entries_.begin(), entries_.end(), address,
                       [](uint64_t addr, const Entry& entry) { return addr < entry.address; });
  if (it == entries_.begin()) return std::nullopt;
  // With duplicates at one address upper_bound lands after all of them; step to the first.
  auto prev = std::prev(it);
  while (prev != entries_.begin() && std::prev(prev)->address == prev->address) --prev;
  return KernelSymbol{.address = prev->address,
                      .name = std::string_view(names_).substr(prev->name_offset, prev->name_size),
                      .module = modules_[prev->module]};
}

}  // namespace ember
