// KnownProcesses over a fixture /proc tree: when a sampled process is read again, when the BPF side
// is told it is known, and that its events reach the table's subscribers once.
#include "sampler/known_processes.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ember {
namespace {

const std::string kProcRoot = std::string(EMBER_TEST_DATA_DIR) + "/proc";
constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kT0 = 1'000'000 * kMs;
constexpr uint64_t kPhasesPc = 0x55d0c8a02100;  // in the fixture's /usr/bin/phases text

class KnownProcessesTest : public ::testing::Test {
 protected:
  KnownProcessesTest()
      : root_(std::filesystem::temp_directory_path() /
              absl::StrCat("ember-known-",
                           ::testing::UnitTest::GetInstance()->current_test_info()->name())),
        table_((std::filesystem::remove_all(root_), CopyTree(root_)), std::chrono::hours(1)),
        known_(
            table_, [this](uint32_t pid) { marks_.push_back(pid); },
            [this](uint32_t pid) { forgets_.push_back(pid); }),
        events_([this](const Process& p) { maps_events_.push_back(p.name); }, nullptr) {
    table_.Subscribe(&events_);
  }
  ~KnownProcessesTest() override { std::filesystem::remove_all(root_); }

  static std::string CopyTree(const std::string& root) {
    std::filesystem::copy(
        kProcRoot, root,
        std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
    return root;
  }

  // A sample of the main thread of 4242 named `comm`, at `pc`.
  Process* Sample(uint64_t timestamp_ns, const char* comm = "phases", uint32_t flags = 0,
                  uint64_t pc = kPhasesPc, uint32_t pid = 4242) {
    header_ = {};
    header_.pid = pid;
    header_.tid = pid;
    header_.flags = flags;
    header_.timestamp_ns = timestamp_ns;
    std::strncpy(header_.comm, comm, sizeof(header_.comm) - 1);
    regs_[EMBER_USER_REG_IP] = pc;
    SampleView view;
    view.header = &header_;
    view.user_regs = regs_;
    return sampler_->OnSample(view);
  }

  std::string root_;
  ProcessTable table_;
  std::vector<uint32_t> marks_;
  std::vector<uint32_t> forgets_;
  std::vector<std::string> maps_events_;
  KnownProcesses known_;
  KnownProcesses* sampler_ = &known_;  // whom Sample gives its samples to
  ProcessEventCallbacks events_;
  ember_sample header_{};
  std::vector<uint64_t> regs_ = std::vector<uint64_t>(EMBER_USER_REG_COUNT, 0);
};

using Names = std::vector<std::string>;

TEST_F(KnownProcessesTest, ANewProcessIsMarkedKnownOnceItsMapsSettled) {
  Process* process = Sample(kT0);
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(maps_events_, Names{"phases"});
  Sample(kT0 + 50 * kMs);
  EXPECT_EQ(marks_, std::vector<uint32_t>{}) << "settling";
  EXPECT_EQ(maps_events_.size(), 1u) << "no read while its pc is mapped";
  Sample(kT0 + 60 * kMs, "phases", 0, /*pc=*/0x10);
  EXPECT_EQ(maps_events_.size(), 2u) << "a pc the maps lack is read again while settling";
  Sample(kT0 + kProcessSettleTimeNs);
  EXPECT_EQ(marks_, std::vector<uint32_t>{4242});
  EXPECT_EQ(maps_events_.size(), 3u) << "the settling read";
  Sample(kT0 + 2 * kProcessSettleTimeNs, "phases", 0, /*pc=*/0x10);
  EXPECT_EQ(marks_.size(), 1u);
  EXPECT_EQ(maps_events_.size(), 3u);
}

TEST_F(KnownProcessesTest, ARenamedMainThreadIsOneExecAndSettlesAgain) {
  Process* process = Sample(kT0);
  Sample(kT0 + kProcessSettleTimeNs);
  ASSERT_EQ(marks_.size(), 1u);
  maps_events_.clear();
  const uint64_t execs = process->execs;

  std::ofstream(root_ + "/4242/comm") << "next\n";
  Sample(kT0 + 2 * kProcessSettleTimeNs, "next");
  EXPECT_EQ(maps_events_, Names{"next"});
  EXPECT_EQ(process->execs, execs + 1);
  EXPECT_FALSE(known_.IsMarked(4242));
  Sample(kT0 + 2 * kProcessSettleTimeNs + kMs, "next");
  EXPECT_EQ(maps_events_.size(), 1u) << "once per rename";
  EXPECT_EQ(marks_.size(), 1u);
  Sample(kT0 + 3 * kProcessSettleTimeNs, "next");
  EXPECT_EQ(marks_.size(), 2u);
}

TEST_F(KnownProcessesTest, UnknownToTheBpfSideTwoPollsAfterTheMarkIsAnExec) {
  known_.OnPoll();
  Process* process = Sample(kT0);
  Sample(kT0 + kProcessSettleTimeNs);
  ASSERT_EQ(marks_.size(), 1u);
  maps_events_.clear();
  const uint64_t execs = process->execs;

  // Taken before the mark reached the BPF side: the flag says nothing yet.
  Sample(kT0 + kProcessSettleTimeNs + kMs, "phases", EMBER_SAMPLE_PROCESS_UNKNOWN);
  known_.OnPoll();
  Sample(kT0 + kProcessSettleTimeNs + 2 * kMs, "phases", EMBER_SAMPLE_PROCESS_UNKNOWN);
  EXPECT_EQ(maps_events_, Names{});
  EXPECT_TRUE(known_.IsMarked(4242));
  known_.OnPoll();
  Sample(kT0 + kProcessSettleTimeNs + 3 * kMs, "phases", EMBER_SAMPLE_PROCESS_UNKNOWN);
  EXPECT_EQ(maps_events_, Names{"phases"});
  EXPECT_EQ(process->execs, execs + 1);
  EXPECT_FALSE(known_.IsMarked(4242));
  Sample(kT0 + 2 * kProcessSettleTimeNs + 3 * kMs);
  EXPECT_EQ(marks_.size(), 2u);
}

TEST_F(KnownProcessesTest, AnExitedProcessIsForgottenOnceAtTheDrop) {
  Sample(kT0);
  Sample(kT0 + kProcessSettleTimeNs);
  table_.DropExited();
  EXPECT_EQ(forgets_, std::vector<uint32_t>{});
  std::filesystem::remove_all(root_ + "/4242");
  table_.DropExited();
  table_.DropExited();
  EXPECT_EQ(forgets_, std::vector<uint32_t>{4242});
}

TEST_F(KnownProcessesTest, APidReusedAfterAnExitSettlesAnew) {
  Sample(kT0);
  Sample(kT0 + kProcessSettleTimeNs);
  ASSERT_EQ(marks_, std::vector<uint32_t>{4242});
  std::ofstream(root_ + "/4242/stat")
      << "4242 (phases) R 1 4242 4242 0 -1 4194304 100 0 0 0 50 3 0 0 20 0 1 0 999999 1 2\n";
  table_.DropExited();
  ASSERT_EQ(forgets_, std::vector<uint32_t>{4242});
  EXPECT_FALSE(known_.IsMarked(4242));
  Sample(kT0 + 2 * kProcessSettleTimeNs);
  Sample(kT0 + 2 * kProcessSettleTimeNs + kMs);
  EXPECT_EQ(marks_.size(), 1u) << "the new process settles";
  Sample(kT0 + 3 * kProcessSettleTimeNs);
  EXPECT_EQ(marks_, (std::vector<uint32_t>{4242, 4242}));
}

TEST_F(KnownProcessesTest, AProcessEvictedAndReadAgainKeepsItsMark) {
  std::filesystem::copy(
      root_ + "/4242", root_ + "/4243",
      std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  ProcessTable table(root_, std::chrono::hours(1), ProcessTableLimits{.max_processes = 1});
  std::vector<uint32_t> marks, forgets;
  KnownProcesses known(
      table, [&](uint32_t pid) { marks.push_back(pid); },
      [&](uint32_t pid) { forgets.push_back(pid); });
  sampler_ = &known;
  ASSERT_NE(Sample(kT0), nullptr);
  Sample(kT0 + kProcessSettleTimeNs);
  ASSERT_EQ(marks, std::vector<uint32_t>{4242});

  ASSERT_NE(Sample(kT0 + kProcessSettleTimeNs + kMs, "phases", 0, kPhasesPc, 4243), nullptr);
  ASSERT_EQ(table.evicted_size(), 1u) << "4243 took 4242's place";
  EXPECT_EQ(forgets, std::vector<uint32_t>{}) << "4242 still runs";
  ASSERT_NE(Sample(kT0 + kProcessSettleTimeNs + 2 * kMs), nullptr);  // read again
  EXPECT_TRUE(known.IsMarked(4242));
  Sample(kT0 + 3 * kProcessSettleTimeNs);
  EXPECT_EQ(marks, (std::vector<uint32_t>{4242})) << "no second settle, no second mark";
  EXPECT_EQ(forgets, std::vector<uint32_t>{});
  sampler_ = &known_;
}

TEST_F(KnownProcessesTest, AProcessGoneBeforeItsFirstReadIsMarkedKnown) {
  EXPECT_EQ(Sample(kT0, "gone", 0, kPhasesPc, /*pid=*/77), nullptr);
  EXPECT_EQ(marks_, std::vector<uint32_t>{77});
  EXPECT_EQ(maps_events_, Names{});
}

}  // namespace
}  // namespace ember
