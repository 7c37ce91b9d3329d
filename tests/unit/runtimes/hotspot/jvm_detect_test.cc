// libjvm detection on the maps of live JVMs of both local JDKs, on a process that is no JVM, and
// on broken libjvm.so files.
#include "runtimes/hotspot/jvm_detect.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtimes/process_memory.h"
#include "support/temp_dir.h"
#include "vm_live_jvm.h"

namespace ember::hotspot {
namespace {

std::string Libjvm(const char* jdk) { return std::string(jdk) + "/lib/server/libjvm.so"; }

TEST(JvmDetectTest, LooksLikeLibjvmPath) {
  EXPECT_TRUE(LooksLikeLibjvmPath("/usr/lib/jvm/x/lib/server/libjvm.so"));
  EXPECT_TRUE(LooksLikeLibjvmPath("libjvm.so"));
  EXPECT_FALSE(LooksLikeLibjvmPath("/usr/lib/libjvm.so.1"));
  EXPECT_FALSE(LooksLikeLibjvmPath("/usr/lib/notlibjvm.so"));
  EXPECT_FALSE(LooksLikeLibjvmPath("/usr/lib/libjvm.so/x"));
  EXPECT_FALSE(LooksLikeLibjvmPath(""));
}

TEST(JvmDetectTest, InspectsBothJdksFiles) {
  for (const char* jdk : {live::kJdk17, live::kJdk25}) {
    absl::StatusOr<LibjvmInfo> info = InspectLibjvm(Libjvm(jdk));
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->build_id.size(), 40u);
    EXPECT_FALSE(info->segments.empty());
    const VMStructsSymbols& s = info->symbols;
    // The table pointers are distinct .data words, the strides distinct .bss words.
    EXPECT_NE(s.structs, 0u);
    EXPECT_NE(s.types, s.structs);
    EXPECT_NE(s.int_constants, 0u);
    EXPECT_NE(s.long_constants, 0u);
    EXPECT_NE(s.struct_stride, 0u);
    EXPECT_NE(s.struct_address, s.struct_offset);
    EXPECT_NE(s.type_size, 0u);
    EXPECT_NE(s.long_value, s.long_name);
  }
  // Addresses as nm prints them for Debian 17's file.
  absl::StatusOr<LibjvmInfo> info = InspectLibjvm(Libjvm(live::kJdk17));
  ASSERT_TRUE(info.ok());
  if (info->build_id == "97da31b249941f25ff26a6126471221bb579d67f") {
    EXPECT_EQ(info->symbols.structs, 0x12f89f8u);
    EXPECT_EQ(info->symbols.types, 0x12f89f0u);
    EXPECT_EQ(info->symbols.struct_stride, 0x13668b8u);
    EXPECT_EQ(info->symbols.struct_type_name, 0x13668e8u);
    EXPECT_EQ(info->symbols.type_size, 0x1366888u);
    EXPECT_EQ(info->symbols.int_value, 0x1366870u);
    EXPECT_EQ(info->symbols.long_name, 0x1366860u);
  }
}

TEST(JvmDetectTest, DetectsLiveJvmsThroughTheirRoot) {
  for (const char* jdk : {live::kJdk17, live::kJdk25}) {
    live::LiveJvm jvm(jdk);
    ASSERT_TRUE(jvm.ok());
    std::vector<MemoryMapping> maps = jvm.Mappings();
    LibjvmFiles files;
    absl::StatusOr<std::optional<JvmProcess>> found = DetectJvm(maps, jvm.root(), &files);
    ASSERT_TRUE(found.ok()) << found.status();
    ASSERT_TRUE(found->has_value());
    const JvmProcess& process = **found;
    EXPECT_TRUE(absl::StartsWith(process.libjvm->path, jvm.root())) << process.libjvm->path;
    EXPECT_TRUE(absl::EndsWith(process.libjvm->path, "/libjvm.so"));
    // The bias places the file's first segment at the lowest mapping of libjvm.so.
    uint64_t lowest = ~uint64_t{0};
    for (const MemoryMapping& m : maps) {
      if (LooksLikeLibjvmPath(m.path) && m.offset == 0) lowest = std::min(lowest, m.start);
    }
    EXPECT_EQ(process.bias + process.libjvm->segments.front().vaddr -
                  process.libjvm->segments.front().offset,
              lowest);
    EXPECT_EQ(process.bias % 4096, 0u);
    // The .data table pointer holds a process address inside the process (not 0).
    uint64_t table = 0;
    ProcessMemoryReader reader(jvm.pid());
    ASSERT_TRUE(reader.Read(process.ToProcess(process.libjvm->symbols.structs), &table, 8));
    EXPECT_NE(table, 0u);
    // A second detection of the same file comes from the cache.
    absl::StatusOr<std::optional<JvmProcess>> again = DetectJvm(maps, jvm.root(), &files);
    ASSERT_TRUE(again.ok() && again->has_value());
    EXPECT_EQ((*again)->libjvm.get(), process.libjvm.get());
    EXPECT_EQ(files.size(), 1u);
    // The module a process's Java frames name is libjvm's path as that process maps it, not the
    // root another process had it opened through.
    std::string mapped;
    for (const MemoryMapping& m : maps) {
      if (LooksLikeLibjvmPath(m.path)) mapped = m.path;
    }
    EXPECT_EQ(process.mapped_path, mapped);
    absl::StatusOr<std::optional<JvmProcess>> other_root = DetectJvm(maps, "/", &files);
    ASSERT_TRUE(other_root.ok() && other_root->has_value());
    EXPECT_EQ((*other_root)->libjvm.get(), process.libjvm.get());
    EXPECT_EQ((*other_root)->mapped_path, mapped);
    EXPECT_FALSE(absl::StrContains(mapped, "/proc/"));
  }
}

TEST(JvmDetectTest, ReplacedLibjvmIsReadThroughMapFiles) {
  // This process maps a copy of libjvm.so, whose path then names another file, as a JDK upgraded
  // under a running JVM leaves it. The map_files entry (a magic link only CAP_SYS_ADMIN may open)
  // is stood in for by a hard link to the mapped file, under a directory of the test's own.
  testing::TempDir dir("ember_jvm_replaced");
  std::filesystem::create_directories(dir.path() + "/lib/server");
  std::filesystem::create_directories(dir.path() + "/proc/map_files");
  const std::string path = dir.path() + "/lib/server/libjvm.so";
  std::filesystem::copy_file(Libjvm(live::kJdk17), path);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  void* image = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  ASSERT_NE(image, MAP_FAILED);
  const auto start = reinterpret_cast<uint64_t>(image);
  std::filesystem::create_hard_link(
      path, absl::StrFormat("%s/proc/map_files/%x-%x", dir.path(), start, start + 4096));
  std::filesystem::remove(path);
  testing::WriteFile(path, "not the file the process maps");

  const std::string self = absl::StrCat("/proc/", getpid());
  absl::StatusOr<std::vector<MemoryMapping>> maps = ParseProcMaps(live::ReadText(self + "/maps"));
  munmap(image, 4096);
  ASSERT_TRUE(maps.ok()) << maps.status();
  absl::StatusOr<std::optional<JvmProcess>> by_path = DetectJvm(*maps, self + "/root");
  EXPECT_FALSE(by_path.ok());  // the path names another file now
  absl::StatusOr<std::optional<JvmProcess>> found =
      DetectJvm(*maps, self + "/root", nullptr, dir.path() + "/proc");
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_TRUE(found->has_value());
  absl::StatusOr<LibjvmInfo> original = InspectLibjvm(Libjvm(live::kJdk17));
  ASSERT_TRUE(original.ok());
  EXPECT_EQ((*found)->libjvm->build_id, original->build_id);
  EXPECT_EQ((*found)->bias, start);
}

TEST(JvmDetectTest, ProcessWithoutJvmIsNotDetected) {
  const std::string self = absl::StrCat("/proc/", getpid());
  absl::StatusOr<std::vector<MemoryMapping>> maps = ParseProcMaps(live::ReadText(self + "/maps"));
  ASSERT_TRUE(maps.ok()) << maps.status();
  ASSERT_FALSE(maps->empty());
  absl::StatusOr<std::optional<JvmProcess>> found = DetectJvm(*maps, self + "/root");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_FALSE(found->has_value());
}

TEST(JvmDetectTest, BrokenLibjvmGivesAClearError) {
  testing::TempDir dir("ember_jvm_detect");
  const std::string original = live::ReadText(Libjvm(live::kJdk17));
  ASSERT_GT(original.size(), 1u << 20);
  struct Case {
    const char* name;
    std::string bytes;
    const char* message;
  };
  std::string bad_magic = original;
  bad_magic[1] = 'X';
  std::string no_symbols = original;
  // Rename every gHotSpotVM in the string tables: the file is still valid ELF.
  for (size_t at = no_symbols.find("gHotSpotVM"); at != std::string::npos;
       at = no_symbols.find("gHotSpotVM", at + 1)) {
    no_symbols[at] = 'x';
  }
  const std::vector<Case> cases = {
      {"empty", "", ""},
      {"garbage", std::string(4096, '\x5a'), ""},
      {"bad_magic", bad_magic, ""},
      {"truncated", original.substr(0, original.size() / 3), ""},
      {"no_symbols", no_symbols, "no symbol gHotSpotVMStructs"},
  };
  for (const Case& c : cases) {
    const std::string dir_path = dir.path() + "/" + c.name;
    std::filesystem::create_directories(dir_path + "/lib/server");
    const std::string path = dir_path + "/lib/server/libjvm.so";
    testing::WriteFile(path, c.bytes);
    absl::StatusOr<LibjvmInfo> info = InspectLibjvm(path);
    ASSERT_FALSE(info.ok()) << c.name;
    EXPECT_TRUE(absl::StrContains(info.status().message(), path)) << info.status();
    EXPECT_TRUE(absl::StrContains(info.status().message(), c.message)) << info.status();
    EXPECT_EQ(OutcomeOf(info.status()), std::string(c.name) == "no_symbols"
                                            ? JvmOutcome::kUnsupported
                                            : JvmOutcome::kUnreadableLibjvm)
        << c.name;

    // Through DetectJvm, as a process's mapping of it.
    MemoryMapping mapping;
    mapping.start = 0x7f0000000000;
    mapping.end = mapping.start + 0x1000;
    mapping.path = path;
    mapping.file = FileIdentity{1, 1};
    mapping.readable = true;
    mapping.file.dev = 0;
    std::filesystem::path p(path);
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    mapping.file = FileIdentity{st.st_dev, st.st_ino};
    std::vector<MemoryMapping> maps = {mapping};
    absl::StatusOr<std::optional<JvmProcess>> found = DetectJvm(maps, "");
    ASSERT_FALSE(found.ok()) << c.name;
    EXPECT_TRUE(absl::StrContains(found.status().message(), "libjvm.so")) << found.status();
  }
}

TEST(JvmDetectTest, MissingFileIsAnError) {
  MemoryMapping mapping;
  mapping.start = 0x7f0000000000;
  mapping.end = mapping.start + 0x1000;
  mapping.path = "/nonexistent/lib/server/libjvm.so";
  mapping.file = FileIdentity{1, 12345};
  std::vector<MemoryMapping> maps = {mapping};
  absl::StatusOr<std::optional<JvmProcess>> found = DetectJvm(maps, "");
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(OutcomeOf(found.status()), JvmOutcome::kUnreadableLibjvm);
}

}  // namespace
}  // namespace ember::hotspot
