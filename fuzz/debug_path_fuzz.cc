// The separate debug file's path is built from two strings a profiled process controls: the path
// it mapped a binary at and the binary's .gnu_debuglink name. The input is split at NUL bytes
// into binary path, link name and debug directory. A link name that is not a plain file name
// yields no candidate; every candidate ends in "/" + the name, is not the binary itself, and,
// opened under a small root tree full of traps (a FIFO, links out of the root, a directory),
// opens at once and only ever a regular file of that tree.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/untrusted_open.h"

namespace {

namespace fs = std::filesystem;

struct Tree {
  std::string root;
  std::set<std::pair<uint64_t, uint64_t>> regular_files;  // dev, inode of its files
};

void AddFile(Tree& tree, const fs::path& path) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "x";
  struct stat st;
  if (stat(path.c_str(), &st) == 0) tree.regular_files.insert({st.st_dev, st.st_ino});
}

const Tree& TrapTree() {
  static const Tree* tree = [] {
    auto* t = new Tree;
    char pattern[] = "/tmp/ember-debug-path-fuzz-XXXXXX";
    if (mkdtemp(pattern) == nullptr) std::abort();
    t->root = pattern;
    const fs::path root(t->root);
    AddFile(*t, root / "usr/lib/libx.so.debug");
    AddFile(*t, root / "usr/lib/.debug/libx.so.debug");
    AddFile(*t, root / "usr/lib/debug/usr/lib/liby.debug");
    AddFile(*t, root / "etc/inside");
    fs::create_directories(root / "usr/lib/dir.debug");
    mkfifo((root / "usr/lib/fifo.debug").c_str(), 0600);
    mkfifo((root / "usr/lib/.debug/fifo.debug").c_str(), 0600);
    fs::create_symlink("/etc/passwd", root / "usr/lib/passwd.debug");
    fs::create_symlink("../../../../../../etc/hostname", root / "usr/lib/up.debug");
    fs::create_symlink("/proc/self/exe", root / "usr/lib/exe.debug");
    fs::create_symlink("/etc", root / "usr/etc");
    return t;
  }();
  return *tree;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<absl::string_view> parts = absl::StrSplit(input, absl::MaxSplits('\0', 2));
  const absl::string_view binary = parts[0];
  const absl::string_view link = parts.size() > 1 ? parts[1] : absl::string_view();
  const absl::string_view debug_dir = parts.size() > 2 ? parts[2] : "/usr/lib/debug";

  const bool plain = ember::IsPlainDebugLinkName(link);
  if (plain && (link.empty() || link.size() > ember::kMaxDebugLinkName ||
                absl::StrContains(link, '/') || link == "." || link == "..")) {
    __builtin_trap();
  }
  const std::vector<std::string> candidates = ember::DebugLinkCandidates(binary, link, debug_dir);
  if (!plain && !candidates.empty()) __builtin_trap();
  if (candidates.size() > 3) __builtin_trap();

  const Tree& tree = TrapTree();
  for (const std::string& path : candidates) {
    if (path == binary || !absl::EndsWith(path, absl::StrCat("/", link))) __builtin_trap();
    if (path.size() > 4096) continue;
    absl::StatusOr<ember::UntrustedFile> file =
        ember::OpenUntrusted(ember::FileLocation(tree.root, path));
    if (!file.ok()) continue;
    if (!S_ISREG(file->st.st_mode) ||
        !tree.regular_files.contains({file->st.st_dev, file->st.st_ino})) {
      __builtin_trap();  // a file outside the tree, or not a regular file
    }
  }
  return 0;
}
