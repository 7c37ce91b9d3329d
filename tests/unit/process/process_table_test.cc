// The process table over a fixture /proc tree.
#include "process/process_table.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace ember {
namespace {

const std::string kProcRoot = std::string(EMBER_TEST_DATA_DIR) + "/proc";

// A writable copy of the fixture tree under the temp dir (its exe links copied as links).
std::string CopyProcTree(const std::string& name) {
  std::string root = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(root);
  std::filesystem::copy(
      kProcRoot, root,
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  return root;
}

TEST(ProcessTableTest, LoadsNameStartTimeAndExecutableMappings) {
  ProcessTable table(kProcRoot);
  Process* process = table.Get(4242);
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(process->name, "phases");
  EXPECT_EQ(process->executable_path, "/usr/bin/phases");
  EXPECT_EQ(process->start_time, 987654u);
  // Only the executable mappings of the fixture: phases text, libc, memfd, spaces, deleted,
  // vdso, vsyscall.
  EXPECT_EQ(process->mappings.size(), 7u);
  const MemoryMapping* libc = process->Find(ProcessAddress{0x7f3a1c028000});
  ASSERT_NE(libc, nullptr);
  EXPECT_EQ(libc->path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
  EXPECT_EQ(process->Find(ProcessAddress{0x7f3a1c17d000}), nullptr);  // end is exclusive
  EXPECT_EQ(process->Find(ProcessAddress{0x55d0c9e5e100}), nullptr);  // heap: not executable
  EXPECT_EQ(process->Find(ProcessAddress{0x10}), nullptr);
  EXPECT_EQ(table.Get(4242), process);  // cached
  EXPECT_EQ(table.size(), 1u);
}

TEST(ProcessTableTest, MissingProcessIsNull) {
  ProcessTable table(kProcRoot);
  EXPECT_EQ(table.Get(1), nullptr);
  EXPECT_EQ(table.size(), 0u);
}

TEST(ProcessTableTest, OpenPathFallsBackToTheProcessRoot) {
  ProcessTable table(kProcRoot);
  Process* process = table.Get(4242);
  ASSERT_NE(process, nullptr);
  FileLocation location = table.OpenPath(*process, process->mappings[0]);
  EXPECT_EQ(location.root, kProcRoot + "/4242/root");
  EXPECT_EQ(location.path, "/usr/bin/phases");
  EXPECT_EQ(location.mapped_file,
            absl::StrFormat("%s/4242/map_files/%x-%x", kProcRoot, process->mappings[0].start,
                            process->mappings[0].end));
  EXPECT_EQ(location.identity, process->mappings[0].file);
}

TEST(ProcessTableTest, DropsExitedAndReusedPids) {
  std::string root = CopyProcTree("ember-proc-test");
  ProcessTable table(root);
  ASSERT_NE(table.Get(4242), nullptr);
  EXPECT_EQ(table.DropExited(), 0);

  // Same pid, another process: a different start time.
  std::ofstream(root + "/4242/stat")
      << "4242 (other) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0\n";
  EXPECT_EQ(table.DropExited(), 1);
  ASSERT_NE(table.Get(4242), nullptr);
  EXPECT_EQ(table.Get(4242)->start_time, 5u);

  std::filesystem::remove_all(root + "/4242");
  EXPECT_EQ(table.DropExited(), 1);
  EXPECT_EQ(table.size(), 0u);
  std::filesystem::remove_all(root);
}

TEST(ProcessTableTest, RefreshAfterExecPicksUpNewMapsAndName) {
  std::string root = CopyProcTree("ember-proc-exec-test");
  ProcessTable table(root, std::chrono::milliseconds(0));
  Process* process = table.Get(4242);
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(process->Find(ProcessAddress{0x400100}), nullptr);

  std::ofstream(root + "/4242/comm") << "new-program\n";
  std::ofstream(root + "/4242/maps")
      << "00400000-00401000 r-xp 00000000 fd:01 5                          /usr/bin/new-program\n";
  ASSERT_TRUE(table.RefreshMaps(process));
  EXPECT_EQ(process->name, "new-program");
  const MemoryMapping* mapping = process->Find(ProcessAddress{0x400100});
  ASSERT_NE(mapping, nullptr);
  EXPECT_EQ(mapping->path, "/usr/bin/new-program");
  std::filesystem::remove_all(root);
}

TEST(ProcessTableTest, NameKeepsItsOwnWhitespaceAndControlBytes) {
  // As the kernel reports it in samples: only /proc's line end is not part of it.
  std::string root = CopyProcTree("ember-proc-name-test");
  std::ofstream(root + "/4242/comm") << "a\x1b[31m\n\n";
  ProcessTable table(root, std::chrono::milliseconds(0));
  Process* process = table.Get(4242);
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(process->name, "a\x1b[31m\n");
  std::filesystem::remove_all(root);
}

TEST(ProcessTableTest, RefreshIsRateLimited) {
  ProcessTable table(kProcRoot, std::chrono::hours(1));
  Process* process = table.Get(4242);
  ASSERT_NE(process, nullptr);
  EXPECT_FALSE(table.RefreshMaps(process));
}

TEST(ProcessTableTest, ReloadIsNotRateLimitedAndFollowsTheExecutable) {
  std::string root = CopyProcTree("ember-proc-reload-test");
  ProcessTable table(root, std::chrono::hours(1));
  Process* process = table.Get(4242);
  ASSERT_NE(process, nullptr);
  const uint64_t version = process->maps_version;

  std::ofstream(root + "/4242/comm") << "new-program\n";
  std::filesystem::remove(root + "/4242/exe");
  std::filesystem::create_symlink("/usr/bin/new-program (deleted)", root + "/4242/exe");
  EXPECT_FALSE(table.RefreshMaps(process));  // rate-limited
  ASSERT_TRUE(table.ReloadMaps(process));    // an exec: at once
  EXPECT_EQ(process->name, "new-program");
  EXPECT_EQ(process->executable_path, "/usr/bin/new-program");
  EXPECT_NE(process->maps_version, version);

  std::filesystem::remove(root + "/4242/exe");  // a kernel thread has no executable
  ASSERT_TRUE(table.ReloadMaps(process));
  EXPECT_EQ(process->executable_path, "");
  std::filesystem::remove_all(root);
}

// A /proc tree of processes 100 to 100 + count - 1, each with the fixture's maps, named "p<pid>".
std::string MakeProcTree(const std::string& name, int count) {
  std::string root = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(root);
  for (int pid = 100; pid < 100 + count; ++pid) {
    const std::string dir = root + "/" + std::to_string(pid);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/stat") << pid << " (p" << pid
                                 << ") S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " << pid * 10
                                 << " 0 0\n";
    std::ofstream(dir + "/comm") << "p" << pid << "\n";
    std::filesystem::copy_file(kProcRoot + "/4242/maps", dir + "/maps");
  }
  return root;
}

TEST(ProcessTableTest, MaxProcessesEvictsTheLeastRecentlyUsed) {
  const std::string root = MakeProcTree("ember-proc-limit-test", 10);
  ProcessTable table(root, std::chrono::hours(1), ProcessTableLimits{.max_processes = 4});
  Process* hot = table.Get(100);
  ASSERT_NE(hot, nullptr);
  const uint64_t hot_version = hot->maps_version;
  for (uint32_t pid = 101; pid < 110; ++pid) {
    Process* process = table.Get(pid);
    ASSERT_NE(process, nullptr);
    EXPECT_EQ(process->name, absl::StrCat("p", pid));
    EXPECT_LE(table.size(), 4u) << "after pid " << pid;
    ASSERT_NE(table.Get(100), nullptr);  // sampled all along: never the least recently used
  }
  EXPECT_EQ(table.size(), 4u);
  EXPECT_EQ(table.stats().evicted, 6u);  // 10 processes, 4 places
  EXPECT_EQ(table.Get(100)->maps_version, hot_version) << "the hot process was read again";

  // An evicted process sampled again is read again, whole.
  Process* again = table.Get(101);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->name, "p101");
  EXPECT_EQ(again->start_time, 1010u);
  EXPECT_EQ(again->mappings.size(), 7u);
  EXPECT_EQ(table.size(), 4u);
  EXPECT_EQ(table.stats().evicted, 7u);
  std::filesystem::remove_all(root);
}

// Maps text of `count` executable mappings, one page apart, of files named by `path_of(i)`.
std::string ManyMappings(int count, const std::function<std::string(int)>& path_of) {
  std::string text;
  for (int i = 0; i < count; ++i) {
    const uint64_t start = 0x10000000 + uint64_t{0x2000} * i;
    text += absl::StrFormat("%x-%x r-xp 00000000 fd:01 %d %s\n", start, start + 0x1000, 1000 + i,
                            path_of(i));
  }
  return text;
}

TEST(ProcessTableTest, MappingsKeptPerProcessAreCappedInNumberAndPathLength) {
  const std::string root = MakeProcTree("ember-proc-mapping-caps-test", 1);
  std::ofstream(root + "/100/maps") << ManyMappings(20, [](int i) {
    return i % 4 == 0 ? "/lib/" + std::string(200, 'x') + std::to_string(i)
                      : absl::StrCat("/lib/lib", i, ".so");
  });
  ProcessTableLimits limits;
  limits.max_mapping_path_bytes = 100;
  limits.max_mappings_per_process = 8;
  ProcessTable table(root, std::chrono::hours(1), limits);
  Process* process = table.Get(100);
  ASSERT_NE(process, nullptr);
  // Files first: the 15 with a path kept; the 5 with a long one are not files any more.
  ASSERT_EQ(process->mappings.size(), 8u);
  for (const MemoryMapping& m : process->mappings) EXPECT_TRUE(m.IsFileBacked()) << m.path;
  EXPECT_EQ(table.stats().mapping_long_paths, 5u);
  EXPECT_EQ(table.stats().mappings_dropped, 12u);
  EXPECT_EQ(process->mapping_bytes, MappingsBytes(process->mappings));
  EXPECT_EQ(table.mapping_bytes(), process->mapping_bytes);

  // Each read counts again.
  ASSERT_TRUE(table.ReloadMaps(process));
  EXPECT_EQ(table.stats().mappings_dropped, 24u);
  EXPECT_EQ(table.mapping_bytes(), process->mapping_bytes);

  // A process that goes takes its mappings' bytes with it.
  std::filesystem::remove_all(root + "/100");
  EXPECT_EQ(table.DropExited(), 1);
  EXPECT_EQ(table.mapping_bytes(), 0u);
  std::filesystem::remove_all(root);
}

TEST(ProcessTableTest, MappingsOfEveryProcessStayWithinTheBudgetLeastRecentlySampledFirst) {
  const std::string root = MakeProcTree("ember-proc-mapping-budget-test", 3);
  for (int pid : {100, 101, 102}) {
    std::ofstream(absl::StrCat(root, "/", pid, "/maps")) << ManyMappings(
        20, [](int i) { return absl::StrCat("/srv/", std::string(900, 'd'), "/lib", i, ".so"); });
  }
  size_t one = 0;  // what one process's mappings take
  {
    ProcessTable unlimited(root);
    ASSERT_NE(unlimited.Get(100), nullptr);
    one = unlimited.mapping_bytes();
  }
  ASSERT_GT(one, 20u * 900);  // the paths' heap blocks count
  ProcessTableLimits limits;
  limits.max_mapping_bytes = one * 5 / 2;
  ProcessTable table(root, std::chrono::hours(1), limits);
  Process* first = table.Get(100);
  ASSERT_NE(first, nullptr);
  const uint64_t first_version = first->maps_version;
  ASSERT_NE(table.Get(101), nullptr);
  EXPECT_EQ(table.mapping_bytes(), 2 * one);
  EXPECT_EQ(table.stats().mapping_evictions, 0u);

  ASSERT_NE(table.Get(102), nullptr);  // a third does not fit: the least recently sampled goes
  EXPECT_EQ(table.stats().mapping_evictions, 1u);
  EXPECT_LE(table.mapping_bytes(), limits.max_mapping_bytes);
  EXPECT_EQ(table.mapping_bytes(), 2 * one);
  EXPECT_TRUE(first->mappings.empty());
  EXPECT_TRUE(first->mappings_evicted);
  EXPECT_EQ(first->mapping_bytes, 0u);
  EXPECT_EQ(table.size(), 3u);  // the process itself stays, with its other state

  // Sampled again, it is read again; now 101 is the least recently sampled.
  Process* again = table.Get(100);
  ASSERT_EQ(again, first);
  EXPECT_EQ(again->mappings.size(), 20u);
  EXPECT_FALSE(again->mappings_evicted);
  EXPECT_NE(again->maps_version, first_version);
  EXPECT_EQ(table.stats().mapping_evictions, 2u);
  EXPECT_EQ(table.mapping_bytes(), 2 * one);
  std::filesystem::remove_all(root);
}

TEST(ProcessTableTest, StatStartTimeSurvivesOddCommNames) {
  EXPECT_EQ(ParseStatStartTime("1 (a) b) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0 0"), 77u);
  EXPECT_EQ(ParseStatStartTime("1 (x) S 1"), 0u);
  EXPECT_EQ(ParseStatStartTime(""), 0u);
  EXPECT_EQ(ParseStatStartTime("no paren at all"), 0u);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

void WriteText(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::trunc) << text;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Hostile host (issue 8): a process whose main thread exited while another thread runs on. Its
// /proc/PID/maps reads empty and its exe and root are gone; its thread's task/TID has them.
TEST(ProcessTableTest, LeaderThatExitedIsReadThroughALiveThread) {
  std::string root = CopyProcTree("ember-proc-leader-test");
  const std::string pid_dir = root + "/4243";
  WriteText(pid_dir + "/stat", ReadText(root + "/4242/stat"));
  WriteText(pid_dir + "/comm", "phases\n");
  WriteText(pid_dir + "/maps", "");
  WriteText(pid_dir + "/task/4243/maps", "");  // the zombie leader
  WriteText(pid_dir + "/task/4244/maps", ReadText(root + "/4242/maps"));
  std::filesystem::create_symlink("/usr/bin/phases", pid_dir + "/task/4244/exe");

  ProcessTable table(root);
  Process* process = table.Get(4243);
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(process->mappings.size(), 7u);
  EXPECT_EQ(process->executable_path, "/usr/bin/phases");
  EXPECT_EQ(process->proc_dir, pid_dir + "/task/4244");
  EXPECT_EQ(table.OpenPath(*process, process->mappings[0]).Display(),
            pid_dir + "/task/4244/root/usr/bin/phases");
  EXPECT_EQ(table.read_failures().maps, 0u);
  std::filesystem::remove_all(root);
}

// A process that exited before its samples were symbolized: its files are opened by their own
// path when that is the same file (device and inode), else not at all ("" for the caches).
TEST(ProcessTableTest, OpenPathOfAProcessThatIsGoneIsItsOwnFileOrNothing) {
  std::string root = CopyProcTree("ember-proc-gone-test");
  const std::string program = root + "/program";
  WriteText(program, "not really a program");
  struct stat file;
  ASSERT_EQ(stat(program.c_str(), &file), 0);
  WriteText(root + "/4242/maps",
            absl::StrFormat("55d0c9c00000-55d0c9c01000 r-xp 00000000 %x:%x %u %s\n"
                            "55d0c9d00000-55d0c9d01000 r-xp 00000000 %x:%x %u %s\n",
                            major(file.st_dev), minor(file.st_dev), file.st_ino, program,
                            major(file.st_dev), minor(file.st_dev), file.st_ino + 1,
                            "/usr/bin/replaced"));
  ProcessTable table(root);
  Process* process = table.Get(4242);
  ASSERT_NE(process, nullptr);
  ASSERT_EQ(process->mappings.size(), 2u);
  // While it runs: under its root, whatever is there.
  EXPECT_EQ(table.OpenPath(*process, process->mappings[0]).Display(),
            root + "/4242/root" + program);
  std::filesystem::remove_all(root + "/4242");
  FileLocation gone = table.OpenPath(*process, process->mappings[0]);
  EXPECT_EQ(gone.Display(), program);
  EXPECT_EQ(gone.root, "");
  EXPECT_EQ(gone.identity, process->mappings[0].file);                  // checked again as it opens
  EXPECT_TRUE(table.OpenPath(*process, process->mappings[1]).empty());  // not the file it mapped
  std::filesystem::remove_all(root);
}

TEST(ProcessTableTest, KernelThreadHasNoMappingsAndIsNoFailure) {
  std::string root = CopyProcTree("ember-proc-kthread-test");
  WriteText(root + "/4245/stat", ReadText(root + "/4242/stat"));
  WriteText(root + "/4245/comm", "kworker/0:1\n");
  WriteText(root + "/4245/maps", "");
  WriteText(root + "/4245/task/4245/maps", "");
  ProcessTable table(root);
  Process* process = table.Get(4245);
  ASSERT_NE(process, nullptr);
  EXPECT_TRUE(process->mappings.empty());
  EXPECT_EQ(table.read_failures().maps, 0u);
  std::filesystem::remove_all(root);
}

TEST(ProcessTableTest, UnreadableStatAndMapsAreCounted) {
  std::string root = CopyProcTree("ember-proc-unreadable-test");
  WriteText(root + "/4246/stat", ReadText(root + "/4242/stat"));  // no maps, no task/
  ProcessTable table(root);
  EXPECT_EQ(table.Get(4246), nullptr);
  EXPECT_EQ(table.read_failures().maps, 1u);
  EXPECT_EQ(table.Get(4247), nullptr);  // no /proc entry at all: exited, or hidden
  EXPECT_EQ(table.read_failures().stat, 1u);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace ember
