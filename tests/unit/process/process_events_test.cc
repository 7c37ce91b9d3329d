// The process table's events over a fixture /proc tree: each change of a process's life reaches
// every subscriber once.
#include "process/process_events.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "process/process_table.h"

namespace ember {
namespace {

const std::string kProcRoot = std::string(EMBER_TEST_DATA_DIR) + "/proc";

// A /proc tree under the temp dir with processes `pids`, each the fixture's 4242 but for its
// stat (start time pid * 10) and its name "p<pid>".
class ProcTree {
 public:
  ProcTree(const std::string& name, const std::vector<uint32_t>& pids)
      : root_(std::filesystem::temp_directory_path() / name) {
    std::filesystem::remove_all(root_);
    for (uint32_t pid : pids) Start(pid, pid * 10);
  }
  ~ProcTree() { std::filesystem::remove_all(root_); }

  // A process of pid `pid` that started at `start_time`, in place of any that had the pid.
  void Start(uint32_t pid, uint64_t start_time) {
    const std::string dir = Dir(pid);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/stat") << pid << " (p" << pid
                                 << ") S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " << start_time
                                 << " 0 0\n";
    std::ofstream(dir + "/comm") << "p" << pid << "\n";
    std::filesystem::copy_file(kProcRoot + "/4242/maps", dir + "/maps");
    std::filesystem::create_symlink("/usr/bin/phases", dir + "/exe");
  }
  void Exit(uint32_t pid) { std::filesystem::remove_all(Dir(pid)); }
  // What an exec leaves: another program's name, executable and maps.
  void Exec(uint32_t pid, const std::string& program) {
    const std::string dir = Dir(pid);
    std::ofstream(dir + "/comm") << program << "\n";
    std::ofstream(dir + "/maps") << "00400000-00401000 r-xp 00000000 fd:01 5 /usr/bin/" << program
                                 << "\n";
    std::filesystem::remove(dir + "/exe");
    std::filesystem::create_symlink("/usr/bin/" + program, dir + "/exe");
  }
  const std::string& root() const { return root_; }

 private:
  std::string Dir(uint32_t pid) const { return absl::StrCat(root_, "/", pid); }
  std::string root_;
};

// Records the events it is told, in order.
class Recorder : public ProcessEvents {
 public:
  void OnMapsChanged(const Process& process) override {
    events.push_back(absl::StrCat("maps ", process.pid, " ", process.name));
  }
  void OnExited(uint32_t pid) override { events.push_back(absl::StrCat("exited ", pid)); }
  std::vector<std::string> Take() { return std::exchange(events, {}); }
  std::vector<std::string> events;
};

using Events = std::vector<std::string>;

TEST(ProcessEventsTest, ANewProcessIsOneMapsChangeToEverySubscriber) {
  ProcTree tree("ember-events-new", {100, 101});
  ProcessTable table(tree.root(), std::chrono::milliseconds(0));
  Recorder first, second;
  table.Subscribe(&first);
  table.Subscribe(&second);
  Process* process = table.Get(100);
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(first.events, Events{}) << "told when a sample's reads are done, not at the read";
  table.Publish(process);
  table.Publish(process);
  ASSERT_EQ(table.Get(100), process);
  table.Publish(process);
  EXPECT_EQ(first.Take(), Events{"maps 100 p100"});
  EXPECT_EQ(second.Take(), Events{"maps 100 p100"});
  table.Publish(table.Get(101));
  EXPECT_EQ(first.Take(), Events{"maps 101 p101"});
}

TEST(ProcessEventsTest, ReadsOfTheMapsBetweenTwoPublicationsAreOneEvent) {
  ProcTree tree("ember-events-maps", {100});
  ProcessTable table(tree.root(), std::chrono::milliseconds(0));
  Recorder recorder;
  table.Subscribe(&recorder);
  Process* process = table.Get(100);
  table.Publish(process);
  recorder.Take();

  ASSERT_TRUE(table.RefreshMaps(process));  // a dlopen
  table.Publish(process);
  EXPECT_EQ(recorder.Take(), Events{"maps 100 p100"});
  ASSERT_TRUE(table.ReloadMaps(process));
  ASSERT_TRUE(table.ReloadMaps(process));  // an exec's read, then the settling read
  table.Publish(process);
  EXPECT_EQ(recorder.Take(), Events{"maps 100 p100"});
  table.Publish(process);
  EXPECT_EQ(recorder.Take(), Events{});
}

TEST(ProcessEventsTest, AnExecIsOneMapsChangeOfTheNewProgram) {
  ProcTree tree("ember-events-exec", {100});
  ProcessTable table(tree.root(), std::chrono::hours(1));
  Recorder recorder;
  table.Subscribe(&recorder);
  Process* process = table.Get(100);
  table.Publish(process);
  recorder.Take();
  const uint64_t execs = process->execs;

  tree.Exec(100, "next");
  ASSERT_TRUE(table.ReloadAfterExec(process));
  table.Publish(process);
  EXPECT_EQ(recorder.Take(), Events{"maps 100 next"});
  EXPECT_GT(process->execs, execs);
  ASSERT_NE(process->Find(ProcessAddress{0x400100}), nullptr);
  EXPECT_EQ(table.DropExited(), 0);
  EXPECT_EQ(recorder.Take(), Events{}) << "an exec keeps the pid and its start time";
}

TEST(ProcessEventsTest, AnExitedProcessIsOneExitAtTheNextDrop) {
  ProcTree tree("ember-events-exit", {100, 101});
  ProcessTable table(tree.root());
  Recorder recorder;
  table.Subscribe(&recorder);
  table.Publish(table.Get(100));
  table.Publish(table.Get(101));
  recorder.Take();

  EXPECT_EQ(table.DropExited(), 0);
  EXPECT_EQ(recorder.Take(), Events{});
  tree.Exit(101);
  EXPECT_EQ(table.DropExited(), 1);
  EXPECT_EQ(recorder.Take(), Events{"exited 101"});
  EXPECT_EQ(table.DropExited(), 0);
  EXPECT_EQ(recorder.Take(), Events{}) << "told once";
  EXPECT_EQ(table.size(), 1u);
}

TEST(ProcessEventsTest, AReusedPidIsAnExitThenANewProcess) {
  ProcTree tree("ember-events-reuse", {100});
  ProcessTable table(tree.root());
  Recorder recorder;
  table.Subscribe(&recorder);
  table.Publish(table.Get(100));
  recorder.Take();

  tree.Start(100, 5);  // another process, same pid and program
  EXPECT_EQ(table.DropExited(), 1);
  EXPECT_EQ(recorder.Take(), Events{"exited 100"});
  Process* process = table.Get(100);
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(process->start_time, 5u);
  table.Publish(process);
  EXPECT_EQ(recorder.Take(), Events{"maps 100 p100"});
  EXPECT_EQ(table.DropExited(), 0);
  EXPECT_EQ(recorder.Take(), Events{});
}

// A table of two places: 100 and 101 read and published, then 102 evicts 100.
class EvictionTest : public ::testing::Test {
 protected:
  EvictionTest()
      : tree_(absl::StrCat("ember-events-",
                           ::testing::UnitTest::GetInstance()->current_test_info()->name()),
              {100, 101, 102}),
        table_(tree_.root(), std::chrono::hours(1), ProcessTableLimits{.max_processes = 2}) {
    table_.Subscribe(&recorder_);
    table_.Publish(table_.Get(100));
    table_.Publish(table_.Get(101));
    recorder_.Take();
    table_.Publish(table_.Get(102));
  }

  ProcTree tree_;
  ProcessTable table_;
  Recorder recorder_;
};

TEST_F(EvictionTest, AProcessEvictedToMakeRoomIsNotAnExit) {
  EXPECT_EQ(recorder_.Take(), (Events{"maps 102 p102"}));
  EXPECT_EQ(table_.size(), 2u);
  EXPECT_EQ(table_.evicted_size(), 1u);
  EXPECT_TRUE(table_.WasEvicted(100));
  EXPECT_FALSE(table_.WasEvicted(101));
  EXPECT_EQ(table_.DropExited(), 0);
  EXPECT_EQ(recorder_.Take(), Events{}) << "it still runs";
}

TEST_F(EvictionTest, AnEvictedProcessReadAgainIsPublishedWithNoExit) {
  ASSERT_EQ(recorder_.Take(), (Events{"maps 102 p102"})) << "100 evicted, not exited";
  table_.Publish(table_.Get(100));  // evicts 101
  EXPECT_EQ(recorder_.Take(), (Events{"maps 100 p100"})) << "its maps may have changed meanwhile";
  EXPECT_EQ(table_.evicted_size(), 1u);
  tree_.Exit(101);
  EXPECT_EQ(table_.DropExited(), 1);
  EXPECT_EQ(recorder_.Take(), (Events{"exited 101"})) << "100 is no longer remembered as evicted";
}

TEST_F(EvictionTest, AnEvictedProcessThatExitsIsOneExitAtTheNextDrop) {
  ASSERT_EQ(recorder_.Take(), (Events{"maps 102 p102"})) << "100 evicted, not exited";
  tree_.Exit(100);
  EXPECT_EQ(table_.DropExited(), 1);
  EXPECT_EQ(recorder_.Take(), Events{"exited 100"});
  EXPECT_EQ(table_.evicted_size(), 0u);
  EXPECT_FALSE(table_.WasEvicted(100)) << "an exited process is no longer evicted";
  EXPECT_EQ(table_.DropExited(), 0);
  EXPECT_EQ(recorder_.Take(), Events{}) << "told once";
  EXPECT_EQ(table_.Get(100), nullptr);
  EXPECT_EQ(recorder_.Take(), Events{});
}

TEST_F(EvictionTest, APidReusedAfterEvictionIsAnExitThenANewProcess) {
  ASSERT_EQ(recorder_.Take(), (Events{"maps 102 p102"})) << "100 evicted, not exited";
  tree_.Start(100, 5);
  Process* process = table_.Get(100);
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(process->start_time, 5u);
  table_.Publish(process);
  EXPECT_EQ(recorder_.Take(), (Events{"exited 100", "maps 100 p100"}));
  EXPECT_EQ(table_.DropExited(), 0);
  EXPECT_EQ(recorder_.Take(), Events{});

  tree_.Start(101, 6);  // 101 was evicted by that read of 100, and its pid reused since
  EXPECT_EQ(table_.DropExited(), 1);
  EXPECT_EQ(recorder_.Take(), Events{"exited 101"});
}

TEST(ProcessEventsTest, PastTheBoundTheLongestEvictedAreToldExited) {
  std::vector<uint32_t> pids;
  for (uint32_t pid = 100; pid < 112; ++pid) pids.push_back(pid);
  ProcTree tree("ember-events-evict-bound", pids);
  ProcessTable table(tree.root(), std::chrono::hours(1), ProcessTableLimits{.max_processes = 2});
  Recorder recorder;
  table.Subscribe(&recorder);
  for (uint32_t pid : pids) table.Publish(table.Get(pid));
  // Ten evicted, eight remembered (four per place): the first two evicted are forgotten.
  EXPECT_EQ(table.evicted_size(), 8u);
  Events exits;
  for (const std::string& event : recorder.Take()) {
    if (event.starts_with("exited")) exits.push_back(event);
  }
  EXPECT_EQ(exits, (Events{"exited 100", "exited 101"}));
}

TEST(ProcessEventsTest, StatIsReadOncePerProcessPerDrop) {
  ProcTree tree("ember-events-stat", {100, 101, 102});
  ProcessTable table(tree.root());
  for (uint32_t pid : {100, 101, 102}) ASSERT_NE(table.Get(pid), nullptr);
  EXPECT_EQ(table.stats().stat_reads, 3u);  // at first sight
  ASSERT_NE(table.Get(100), nullptr);
  EXPECT_EQ(table.stats().stat_reads, 3u);  // not per sample
  table.DropExited();
  EXPECT_EQ(table.stats().stat_reads, 6u);
  tree.Exit(102);
  table.DropExited();
  EXPECT_EQ(table.stats().stat_reads, 9u);
  table.DropExited();
  EXPECT_EQ(table.stats().stat_reads, 11u);
}

TEST(ProcessEventsTest, StatIsReadOncePerEvictedProcessPerDrop) {
  ProcTree tree("ember-events-stat-evicted", {100, 101, 102});
  ProcessTable table(tree.root(), std::chrono::hours(1), ProcessTableLimits{.max_processes = 2});
  for (uint32_t pid : {100, 101, 102}) ASSERT_NE(table.Get(pid), nullptr);
  EXPECT_EQ(table.stats().stat_reads, 3u);
  table.DropExited();
  EXPECT_EQ(table.stats().stat_reads, 6u);
  ASSERT_NE(table.Get(100), nullptr);  // read again: evicts 101
  EXPECT_EQ(table.stats().stat_reads, 7u);
  table.DropExited();
  EXPECT_EQ(table.stats().stat_reads, 10u);
}

TEST(ProcessEventsTest, FindNeitherReadsNorTouchesNorEvicts) {
  ProcTree tree("ember-events-find", {100, 101, 102});
  ProcessTable table(tree.root(), std::chrono::hours(1), ProcessTableLimits{.max_processes = 2});
  const Process* first = table.Get(100);
  ASSERT_NE(table.Get(101), nullptr);
  EXPECT_EQ(table.Find(100), first);
  EXPECT_EQ(table.Find(102), nullptr);
  EXPECT_EQ(table.stats().stat_reads, 2u);
  EXPECT_EQ(table.size(), 2u);
  ASSERT_NE(table.Get(102), nullptr);
  EXPECT_EQ(table.Find(100), nullptr) << "Find did not make 100 the most recently used";
  EXPECT_NE(table.Find(101), nullptr);
}

}  // namespace
}  // namespace ember
