// Interpreter detection on Debian's real python3.11 (and python3.11d from python3.11-dbg), on
// the pyenv builds when this machine has them, and on files that are not interpreters at all.
#include "runtimes/cpython/interpreter_detect.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace ember::python {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ember_python_test.XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& bytes) {
    std::string path = path_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(InterpreterDetectTest, DebianPython311) {
  ASSERT_TRUE(fs::exists(EMBER_PYTHON311))
      << EMBER_PYTHON311 << " missing: apt-get install python3.11";
  absl::StatusOr<InterpreterInfo> info = InspectInterpreterElf(EMBER_PYTHON311);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->outcome, DetectOutcome::kSupported) << info->reason;
  EXPECT_EQ(info->version.major, 3);
  EXPECT_EQ(info->version.minor, 11);
  EXPECT_GE(info->version.micro, 2);
  EXPECT_EQ(info->version_source, "Py_Version");
  EXPECT_NE(info->runtime_address, 0u);
  EXPECT_GT(info->runtime_size, 1000u);
  EXPECT_NE(info->code_type_address, 0u);
  EXPECT_NE(info->eval_frame_address, 0u);
  EXPECT_GT(info->eval_frame_size, 1000u);
  EXPECT_FALSE(info->segments.empty());
  EXPECT_EQ(info->layout.minor, 11);
  EXPECT_TRUE(info->layout.verified);
}

// python3.11-dbg's python3.11d is a separate, Py_DEBUG build; its layout is the same for every
// field the walker reads (checked against its DWARF).
TEST(InterpreterDetectTest, DebianPython311DebugBuild) {
  const std::string path = "/usr/bin/python3.11d";
  ASSERT_TRUE(fs::exists(path)) << path << " missing: apt-get install python3.11-dbg";
  absl::StatusOr<InterpreterInfo> info = InspectInterpreterElf(path);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->outcome, DetectOutcome::kSupported) << info->reason;
  EXPECT_EQ(info->version.minor, 11);
  EXPECT_NE(info->runtime_address, 0u);
}

TEST(InterpreterDetectTest, PickedFromProcessMappings) {
  std::vector<std::string> paths = {"/usr/lib/x86_64-linux-gnu/libc.so.6", EMBER_PYTHON311,
                                    "/usr/lib/x86_64-linux-gnu/libm.so.6"};
  absl::StatusOr<InterpreterInfo> info = DetectInterpreter(paths);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->outcome, DetectOutcome::kSupported);
  EXPECT_EQ(info->path, EMBER_PYTHON311);

  std::vector<std::string> no_python = {"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/bash"};
  info = DetectInterpreter(no_python);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->outcome, DetectOutcome::kNotPython);
}

TEST(InterpreterDetectTest, RootPrefixForContainers) {
  std::vector<std::string> paths = {EMBER_PYTHON311};
  absl::StatusOr<InterpreterInfo> info = DetectInterpreter(paths, "/proc/self/root");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->outcome, DetectOutcome::kSupported);
}

// The interpreter a maps line names is the file inspected, or none: a process can put another
// file, or a FIFO, at its path.
TEST(InterpreterDetectTest, AFileOtherThanTheMappedOneIsRefused) {
  std::vector<std::string> paths = {EMBER_PYTHON311};
  struct stat st;
  ASSERT_EQ(stat(EMBER_PYTHON311, &st), 0);
  std::vector<std::optional<FileIdentity>> same = {FileIdentity{st.st_dev, st.st_ino}};
  absl::StatusOr<InterpreterInfo> info = DetectInterpreter(paths, "/proc/self/root", same);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->outcome, DetectOutcome::kSupported);
  std::vector<std::optional<FileIdentity>> other = {FileIdentity{st.st_dev, st.st_ino + 1}};
  info = DetectInterpreter(paths, "/proc/self/root", other);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(RefusalOf(info.status()), OpenRefusal::kIdentityMismatch) << info.status();

  const std::string fifo = ::testing::TempDir() + "/libpython3.11.so";
  std::remove(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  alarm(20);  // a blocking open ends the test
  std::vector<std::string> at_fifo = {fifo};
  info = DetectInterpreter(at_fifo);
  alarm(0);
  std::remove(fifo.c_str());
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(RefusalOf(info.status()), OpenRefusal::kNotRegular) << info.status();
}

TEST(InterpreterDetectTest, InterpreterFileNames) {
  EXPECT_TRUE(LooksLikeInterpreterPath("/usr/bin/python3.11"));
  EXPECT_TRUE(LooksLikeInterpreterPath("/usr/bin/python3.11d"));
  EXPECT_TRUE(LooksLikeInterpreterPath("/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0"));
  EXPECT_TRUE(LooksLikeInterpreterPath("/opt/py/lib/libpython3.8.so"));
  EXPECT_TRUE(LooksLikeInterpreterPath("/usr/local/bin/python3.13t"));
  EXPECT_FALSE(LooksLikeInterpreterPath("/usr/bin/python3"));  // a symlink; maps show the target
  EXPECT_FALSE(LooksLikeInterpreterPath("/usr/bin/python3.11-config"));
  EXPECT_FALSE(LooksLikeInterpreterPath("/usr/lib/python3.11/lib-dynload/_json.so"));
  EXPECT_FALSE(LooksLikeInterpreterPath("/usr/bin/perl"));
}

TEST(InterpreterDetectTest, NonPythonElfIsNotPython) {
  absl::StatusOr<InterpreterInfo> info = InspectInterpreterElf("/usr/bin/bash");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->outcome, DetectOutcome::kNotPython);
  EXPECT_FALSE(info->reason.empty());
}

TEST(InterpreterDetectTest, JunkFilesAreErrorsNotCrashes) {
  TempDir dir;
  EXPECT_FALSE(InspectInterpreterElf(dir.Write("python3.11", "")).ok());
  EXPECT_FALSE(InspectInterpreterElf(dir.Write("libpython3.11.so", "#!/bin/sh\necho hi\n")).ok());
  EXPECT_FALSE(InspectInterpreterElf(dir.Write("elf_magic",
                                               "\x7f"
                                               "ELF\2\1\1"))
                   .ok());
  EXPECT_FALSE(InspectInterpreterElf(dir.path()).ok());  // a directory
  absl::StatusOr<InterpreterInfo> missing = InspectInterpreterElf(dir.path() + "/none");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  // A junk file named like an interpreter fails detection with an error, not a crash.
  std::vector<std::string> paths = {dir.path() + "/python3.11"};
  EXPECT_FALSE(DetectInterpreter(paths).ok());
}

TEST(InterpreterDetectTest, TruncatedInterpreterFails) {
  TempDir dir;
  std::string bytes = ReadFile(EMBER_PYTHON311);
  ASSERT_GT(bytes.size(), 1u << 20);
  for (size_t keep : {size_t{64}, size_t{4096}, bytes.size() / 2, bytes.size() - 100}) {
    std::string path = dir.Write("python3.11", bytes.substr(0, keep));
    absl::StatusOr<InterpreterInfo> info = InspectInterpreterElf(path);
    // Cut before the section table: an error; the symbols and data that survive must not be
    // trusted for a supported result either.
    EXPECT_FALSE(info.ok() && info->outcome == DetectOutcome::kSupported) << keep;
  }
}

TEST(InterpreterDetectTest, UnsupportedVersionIsAResultNotAnError) {
  // Python 3.7 and 2.7 and 3.6 from pyenv, when present, have _PyRuntime (3.7) or not.
  for (const char* v : {"3.7.16/lib/libpython3.7m.so.1.0", "3.6.15/lib/libpython3.6m.so.1.0"}) {
    std::string path = std::string("/root/.pyenv/versions/") + v;
    if (!fs::exists(path)) continue;
    absl::StatusOr<InterpreterInfo> info = InspectInterpreterElf(path);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_NE(info->outcome, DetectOutcome::kSupported) << path;
    EXPECT_FALSE(info->reason.empty());
  }
  // A file name alone with a version outside the table.
  TempDir dir;
  std::string copy = dir.path() + "/python3.99";
  fs::copy_file("/usr/bin/bash", copy);
  absl::StatusOr<InterpreterInfo> info = InspectInterpreterElf(copy);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->outcome, DetectOutcome::kNotPython);  // no _PyRuntime: not CPython at all
}

// The other versions, in the pyenv builds the project's machines carry: each of 3.8 to 3.13 must
// be there.
TEST(InterpreterDetectTest, PyenvBuildsWhenPresent) {
  const fs::path root = "/root/.pyenv/versions";
  std::set<int> seen;
  for (int minor = 8; minor <= 13; ++minor) {
    if (!fs::exists(root)) break;
    for (const auto& entry : fs::directory_iterator(root)) {
      std::string name = entry.path().filename();
      if (name.rfind("3." + std::to_string(minor) + ".", 0) != 0) continue;
      std::string lib = entry.path() / "lib" / ("libpython3." + std::to_string(minor) + ".so.1.0");
      if (!fs::exists(lib)) continue;
      std::vector<std::string> paths = {entry.path() / "bin" / ("python3." + std::to_string(minor)),
                                        lib};
      absl::StatusOr<InterpreterInfo> info = DetectInterpreter(paths);
      ASSERT_TRUE(info.ok()) << info.status();
      EXPECT_EQ(info->outcome, DetectOutcome::kSupported) << lib << ": " << info->reason;
      EXPECT_EQ(info->path, lib);
      EXPECT_EQ(info->version.minor, minor);
      EXPECT_EQ(std::to_string(info->version.major) + "." + std::to_string(info->version.minor) +
                    "." + std::to_string(info->version.micro),
                name);
      EXPECT_EQ(info->version_source, minor >= 11 ? "Py_Version" : "PY_VERSION string");
      seen.insert(minor);
    }
  }
  EXPECT_EQ(seen.size(), 6u) << "pyenv CPython builds of 3.8 to 3.13 expected in " << root;
}

// 3.13 takes the runtime and interpreter offsets from the binary's _Py_DebugOffsets, and refuses
// a binary whose debug offsets disagree with the table (a patch release with another layout).
TEST(InterpreterDetectTest, Python313DebugOffsets) {
  std::string lib;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/root/.pyenv/versions", ec)) {
    if (entry.path().filename().string().rfind("3.13.", 0) == 0) {
      lib = entry.path() / "lib" / "libpython3.13.so.1.0";
    }
  }
  ASSERT_TRUE(!lib.empty() && fs::exists(lib)) << "no pyenv CPython 3.13 in /root/.pyenv/versions";
  absl::StatusOr<InterpreterInfo> info = InspectInterpreterElf(lib);
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->outcome, DetectOutcome::kSupported) << info->reason;
  uint64_t file_offset = 0;
  for (const LoadSegment& seg : info->segments) {
    if (info->runtime_address >= seg.vaddr && info->runtime_address < seg.vaddr + seg.file_size) {
      file_offset = info->runtime_address - seg.vaddr + seg.offset;
    }
  }
  ASSERT_NE(file_offset, 0u);
  std::string bytes = ReadFile(lib);
  ASSERT_EQ(bytes.substr(file_offset, 8), "xdebugpy");
  TempDir dir;

  // code_object.filename (at 280 in 3.13.0's _Py_DebugOffsets) changed: refused.
  std::string changed = bytes;
  uint64_t other_offset = 999;
  std::memcpy(changed.data() + file_offset + 280, &other_offset, 8);
  info = InspectInterpreterElf(dir.Write("libpython3.13.so.1.0", changed));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->outcome, DetectOutcome::kUnsupportedVersion);
  EXPECT_NE(info->reason.find("_Py_DebugOffsets"), std::string::npos) << info->reason;

  // interpreters_head (at 40) moved: taken from the binary.
  changed = bytes;
  uint64_t moved = 640;
  std::memcpy(changed.data() + file_offset + 40, &moved, 8);
  info = InspectInterpreterElf(dir.Write("libpython3.13.so.1.0", changed));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->outcome, DetectOutcome::kSupported);
  EXPECT_EQ(info->layout.runtime_interpreters_head, 640u);

  // No cookie (a build without debug offsets): the built-in 3.13.0 table.
  changed = bytes;
  changed[file_offset] = 'X';
  info = InspectInterpreterElf(dir.Write("libpython3.13.so.1.0", changed));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->outcome, DetectOutcome::kSupported);
  EXPECT_EQ(info->layout.runtime_interpreters_head, 632u);

  // A free-threaded build.
  changed = bytes;
  uint64_t one = 1;
  std::memcpy(changed.data() + file_offset + 16, &one, 8);
  info = InspectInterpreterElf(dir.Write("libpython3.13.so.1.0", changed));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->outcome, DetectOutcome::kUnsupportedVersion);
  EXPECT_NE(info->reason.find("free-threaded"), std::string::npos) << info->reason;
}

TEST(InterpreterDetectTest, ElfToProcessAddress) {
  InterpreterInfo info;
  info.segments = {{.offset = 0, .vaddr = 0, .file_size = 0x1000, .mem_size = 0x1000},
                   {.offset = 0x1000,
                    .vaddr = 0x2000,
                    .file_size = 0x3000,
                    .mem_size = 0x3000,
                    .executable = true},
                   {.offset = 0x4080, .vaddr = 0x6080, .file_size = 0x100, .mem_size = 0x900}};
  // A PIE mapped at 0x5555_0000_0000: text mapping from offset 0x1000.
  EXPECT_EQ(ElfToProcessAddress(info, 0x2345, {.start = 0x555500002000, .file_offset = 0x1000}),
            0x555500002345u);
  // The data segment's mapping starts on its page: offset 0x4000 -> vaddr 0x6000.
  EXPECT_EQ(ElfToProcessAddress(info, 0x6100, {.start = 0x555500006000, .file_offset = 0x4000}),
            0x555500006100u);
  EXPECT_EQ(ElfToProcessAddress(info, 0x6100, {.start = 0x555500009000, .file_offset = 0x9000}),
            0u);
}

// LLD's layout: code placed 0x1000 further from its file offset than the read-only data before
// it, in the same file page. The executable mapping of that page is the code's.
TEST(InterpreterDetectTest, ElfToProcessAddressOfAnLldLayout) {
  InterpreterInfo info;
  info.segments = {{.offset = 0, .vaddr = 0, .file_size = 0x16ca4, .mem_size = 0x16ca4},
                   {.offset = 0x16cb0,
                    .vaddr = 0x17cb0,
                    .file_size = 0x40400,
                    .mem_size = 0x40400,
                    .executable = true},
                   {.offset = 0x570b0, .vaddr = 0x590b0, .file_size = 0x29c0, .mem_size = 0x2f50}};
  constexpr uint64_t kBias = 0x555500000000;
  EXPECT_EQ(ElfToProcessAddress(info, 0x20000,
                                {.start = kBias + 0x17000,
                                 .end = kBias + 0x59000,
                                 .file_offset = 0x16000,
                                 .executable = true}),
            kBias + 0x20000);
  // The read-only data's own mapping of that page.
  EXPECT_EQ(ElfToProcessAddress(
                info, 0x100,
                {.start = kBias, .end = kBias + 0x17000, .file_offset = 0, .executable = false}),
            kBias + 0x100);
  // The data segment's mapping, from the page it shares with the end of the code.
  EXPECT_EQ(ElfToProcessAddress(info, 0x5a000,
                                {.start = kBias + 0x59000,
                                 .end = kBias + 0x5c000,
                                 .file_offset = 0x57000,
                                 .executable = false}),
            kBias + 0x5a000);
}

}  // namespace
}  // namespace ember::python
