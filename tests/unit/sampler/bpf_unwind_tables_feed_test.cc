// BpfUnwindTables fed by the process table (BpfUnwindTablesFeed) over a fixture /proc tree, how the
// row map's freed room joins up again, and the default liveness check.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "process/process_table.h"
#include "sampler/bpf_unwind_tables.h"

namespace ember {
namespace {

// The BPF maps, accepting every write: these tests look at the tables' own accounting.
class EntryMaps : public UnwindMaps {
 public:
  absl::Status WriteRows(uint32_t, std::span<const ember_unwind_row>) override {
    return absl::OkStatus();
  }
  absl::Status WriteBuckets(uint32_t, std::span<const uint32_t>) override {
    return absl::OkStatus();
  }
  absl::Status SetProcess(uint32_t, const ember_unwind_proc&) override { return absl::OkStatus(); }
  void RemoveProcess(uint32_t) override {}
};

// Tables of `rows` rows (3 unless told) per file, by path; records which paths were read.
class RowSource {
 public:
  BpfUnwindTables::TableSource Source() {
    return [this](const ExecutableMapping& m) -> absl::StatusOr<FileUnwindTable> {
      read.push_back(m.path);
      auto it = rows.find(m.path);
      FileUnwindTable table;
      table.rows.resize(it == rows.end() ? 3 : it->second);
      for (size_t i = 0; i < table.rows.size(); ++i) {
        table.rows[i] = {.pc = 0x1000 + 16 * i,
                         .cfa_offset = 16,
                         .bp_offset = -16,
                         .kind = EMBER_UNWIND_ROW_CFA_SP,
                         .bp_rule = EMBER_UNWIND_BP_SAVED};
      }
      return table;
    };
  }
  std::map<std::string, uint32_t> rows;
  std::vector<std::string> read;
};

constexpr BpfUnwindTables::BuildThreshold kBuildAtOnce{.min_short_walks = 0};
bool AllRunning(uint32_t) { return true; }
int BuildAll(BpfUnwindTables& tables) {
  return tables.BuildPending(std::chrono::steady_clock::now());
}

ExecutableMapping File(int n, uint64_t start) {
  const std::string path = absl::StrCat("/usr/lib/lib", n, ".so");
  return {{.start = start,
           .end = start + 0x1000,
           .file = {.dev = 0xfd01, .inode = 500 + static_cast<uint64_t>(n)},
           .path = path},
          path};
}

class BpfUnwindTablesFeedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "ember-unwind-feed-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    std::filesystem::copy(
        std::string(EMBER_TEST_DATA_DIR) + "/proc", root_,
        std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::string root_;
};

TEST_F(BpfUnwindTablesFeedTest, ProcessesFollowTheTablesReadsAndExits) {
  ProcessTable table(root_, std::chrono::hours(1));
  EntryMaps maps;
  RowSource source;
  BpfUnwindTables tables(maps, 256, source.Source(), 1.0, AllRunning, kBuildAtOnce);
  BpfUnwindTablesFeed feed(table, tables);
  table.Subscribe(&feed);

  Process* process = table.Get(4242);
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(tables.stats().processes, 0u);  // nothing until the read is published
  table.Publish(process);
  EXPECT_EQ(tables.stats().processes, 1u);
  EXPECT_GT(BuildAll(tables), 0);
  // The files of its executable mappings, not its [heap] or [stack].
  const std::set<std::string> read(source.read.begin(), source.read.end());
  EXPECT_TRUE(read.count("/usr/bin/phases")) << "phases not read";
  EXPECT_TRUE(read.count("/usr/lib/x86_64-linux-gnu/libc.so.6")) << "libc not read";
  EXPECT_FALSE(read.count("[heap]"));
  EXPECT_FALSE(read.count("[stack]"));
  const size_t loaded = tables.stats().files_loaded;
  EXPECT_EQ(loaded, source.read.size());
  EXPECT_EQ(tables.stats().rows_used, 3 * loaded);

  // Gone from /proc: the table's sweep tells the tables, which forget the process and, a
  // generation later, its files' rows.
  std::filesystem::remove_all(root_ + "/4242");
  EXPECT_EQ(table.DropExited(), 1);
  EXPECT_EQ(tables.stats().processes, 0u);
  tables.NextGeneration(/*keep_generations=*/0);
  EXPECT_EQ(tables.stats().files_loaded, 0u);
  EXPECT_EQ(tables.stats().rows_used, 0u);
}

TEST(BpfUnwindTablesRoomTest, FreedNeighbouringRunsJoinSoALongerTableFits) {
  EntryMaps maps;
  RowSource source;
  // Room for exactly three tables of three rows.
  BpfUnwindTables tables(maps, 9, source.Source(), 1.0, AllRunning, kBuildAtOnce);
  tables.SetProcess(1, {File(1, 0x10000)});
  tables.SetProcess(2, {File(2, 0x20000)});
  tables.SetProcess(3, {File(3, 0x30000)});
  ASSERT_EQ(BuildAll(tables), 3);
  ASSERT_EQ(tables.stats().rows_used, 9u);

  // The middle table's rows are freed first, then those before them: one run of six.
  tables.RemoveProcess(2);
  tables.NextGeneration(0);
  tables.RemoveProcess(1);
  tables.NextGeneration(0);
  EXPECT_EQ(tables.stats().rows_used, 3u);

  source.rows["/usr/lib/lib4.so"] = 6;
  tables.SetProcess(4, {File(4, 0x40000)});
  const auto before = std::chrono::steady_clock::now();
  EXPECT_EQ(BuildAll(tables), 1);
  EXPECT_GE(tables.next_build_at(), before);  // a build spends the time share from now on
  EXPECT_EQ(tables.stats().out_of_room, 0u);
  EXPECT_EQ(tables.stats().files_loaded, 2u);
  EXPECT_EQ(tables.stats().rows_used, 9u);
  EXPECT_EQ(tables.build_time(), tables.stats().build_time);
}

TEST(BpfUnwindTablesRoomTest, ATableLongerThanAnyFreeRunIsOutOfRoom) {
  EntryMaps maps;
  RowSource source;
  BpfUnwindTables tables(maps, 9, source.Source(), 1.0, AllRunning, kBuildAtOnce);
  tables.SetProcess(1, {File(1, 0x10000)});
  tables.SetProcess(2, {File(2, 0x20000)});
  tables.SetProcess(3, {File(3, 0x30000)});
  ASSERT_EQ(BuildAll(tables), 3);
  // Two runs of three apart from each other: no room for six, and file 2 is still mapped.
  tables.RemoveProcess(1);
  tables.RemoveProcess(3);
  tables.NextGeneration(0);
  source.rows["/usr/lib/lib4.so"] = 6;
  tables.SetProcess(4, {File(4, 0x40000)});
  BuildAll(tables);
  EXPECT_EQ(tables.stats().out_of_room, 1u);
  EXPECT_EQ(tables.stats().files_without_rows, 1u);
  EXPECT_EQ(tables.stats().rows_used, 3u);
}

TEST(BpfUnwindTablesTest, ProcessExistsLooksForItsProcEntry) {
  EXPECT_TRUE(BpfUnwindTables::ProcessExists(static_cast<uint32_t>(getpid())));
  // Above the kernel's largest pid_max (2^22).
  EXPECT_FALSE(BpfUnwindTables::ProcessExists(uint32_t{1} << 30));
}

}  // namespace
}  // namespace ember
