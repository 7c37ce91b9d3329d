// Kernel symbols from /proc/kallsyms: address -> function name (and module) for kernel frames.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"

namespace ember {

// One symbol, viewing the table that returned it (valid while that table lives).
struct KernelSymbol {
  uint64_t address = 0;
  std::string_view name;
  std::string_view module;  // "" for vmlinux, else the module name, e.g. "ext4"
};

// An immutable, address-sorted table of kernel text symbols.
class KernelSymbols {
 public:
  // Parses the contents of /proc/kallsyms. Lines that do not parse are skipped. Fails when no
  // line has a non-zero address: that is what kptr_restrict shows an unprivileged reader.
  static absl::StatusOr<KernelSymbols> Parse(std::string_view text);
  // Reads and parses `path` a piece at a time, failing with a message that says how to fix it
  // when the file is unreadable or all addresses are 0 (kernel.kptr_restrict, or not root).
  static absl::StatusOr<KernelSymbols> Load(const std::string& path = "/proc/kallsyms");

  // The text symbol (t/T/w/W) with the greatest address <= `address`; none below the first.
  std::optional<KernelSymbol> Lookup(uint64_t address) const;
  size_t size() const { return entries_.size(); }
  // Above the kernel image's last symbol: where modules, BPF programs and trampolines lie, which
  // come and go while the table stays as read.
  bool PastKernelImage(uint64_t address) const { return address > kernel_image_last_; }
  bool operator==(const KernelSymbols&) const = default;

 private:
  friend class KallsymsFile;
  class Builder;

  // Reads an open file from where it stands; `path` names it in errors.
  static absl::StatusOr<KernelSymbols> ReadFd(int fd, const std::string& path);

  // 16 bytes a symbol, its name in names_: a machine has 100k+ symbols, and a string each took
  // about 100 bytes a symbol and most of the load's time in allocation.
  struct Entry {
    uint64_t address;
    uint32_t name_offset;
    uint16_t name_size;
    uint16_t module;  // index into modules_
    bool operator==(const Entry&) const = default;
  };

  std::vector<Entry> entries_;        // sorted by address
  std::string names_;                 // every name, back to back
  std::vector<std::string> modules_;  // modules_[0] is "" (vmlinux)
  uint64_t kernel_image_last_ = 0;    // the greatest address of a vmlinux symbol
};

// /proc/kallsyms held open, to be read again as modules and BPF programs come and go. Whether
// the kernel shows a reader its addresses is decided when the file is opened (CAP_SYSLOG, or
// kernel.kptr_restrict), so a file opened with the capability still shows them once the
// process has dropped it.
class KallsymsFile {
 public:
  static absl::StatusOr<KallsymsFile> Open(const std::string& path = "/proc/kallsyms");

  // The whole file, from its start, as it is now.
  absl::StatusOr<KernelSymbols> Read();

 private:
  KallsymsFile(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}

  UniqueFd fd_;
  std::string path_;
};

}  // namespace ember
