// Thread ids to process ids, over this test's own /proc entries and fixture status files.
#include "process/process_ids.h"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/temp_dir.h"

namespace ember {
namespace {

using ::testing::ElementsAre;

// Runs `check` with the kernel id of a second thread of this process, while that thread lives.
template <typename Check>
void WithSecondThread(Check check) {
  std::promise<uint32_t> tid;
  std::atomic<bool> done{false};
  std::thread thread([&] {
    tid.set_value(static_cast<uint32_t>(syscall(SYS_gettid)));
    while (!done.load()) std::this_thread::yield();
  });
  const uint32_t id = tid.get_future().get();
  check(id);
  done.store(true);
  thread.join();
}

TEST(ThreadGroupOfTest, ThreadIdGivesItsProcessId) {
  const auto pid = static_cast<uint32_t>(getpid());
  EXPECT_EQ(ThreadGroupOf(pid), pid);
  WithSecondThread([&](uint32_t tid) {
    ASSERT_NE(tid, pid);
    EXPECT_EQ(ThreadGroupOf(tid), pid);
  });
}

TEST(ThreadGroupOfTest, StatusWithoutTgidOrNoStatusIsNothing) {
  testing::TempDir root("ember-process-ids");
  ASSERT_EQ(mkdir((root.path() + "/41").c_str(), 0755), 0);
  testing::WriteFile(root.path() + "/41/status", "Name:\tx\nTgid:\t40\nPid:\t41\n");
  ASSERT_EQ(mkdir((root.path() + "/42").c_str(), 0755), 0);
  testing::WriteFile(root.path() + "/42/status", "Name:\tx\nPid:\t42\nPPid:\t1\n");
  ASSERT_EQ(mkdir((root.path() + "/43").c_str(), 0755), 0);
  testing::WriteFile(root.path() + "/43/status", "Name:\tx\nTgid:\tmany\n");

  EXPECT_EQ(ThreadGroupOf(41, root.path()), 40u);
  EXPECT_EQ(ThreadGroupOf(42, root.path()), std::nullopt);
  EXPECT_EQ(ThreadGroupOf(43, root.path()), std::nullopt);
  EXPECT_EQ(ThreadGroupOf(44, root.path()), std::nullopt);
}

TEST(ThreadGroupsOfTest, EachIdBecomesItsProcessInOrder) {
  const auto pid = static_cast<uint32_t>(getpid());
  WithSecondThread([&](uint32_t tid) {
    absl::StatusOr<std::vector<uint32_t>> tgids = ThreadGroupsOf({tid, pid}, "--pid");
    ASSERT_TRUE(tgids.ok()) << tgids.status();
    EXPECT_THAT(*tgids, ElementsAre(pid, pid));
  });
}

TEST(ThreadGroupsOfTest, MissingIdIsAnErrorNamingTheFlagAndTheId) {
  testing::TempDir root("ember-process-ids");
  ASSERT_EQ(mkdir((root.path() + "/7").c_str(), 0755), 0);
  testing::WriteFile(root.path() + "/7/status", "Tgid:\t7\n");
  absl::StatusOr<std::vector<uint32_t>> tgids = ThreadGroupsOf({7, 4194000}, "--pid", root.path());
  EXPECT_EQ(tgids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tgids.status().message(), "--pid: no running process with id 4194000");
  // A status file without Tgid names no process either.
  testing::WriteFile(root.path() + "/7/status", "Pid:\t7\n");
  EXPECT_EQ(ThreadGroupsOf({7}, "--pid", root.path()).status().message(),
            "--pid: no running process with id 7");
}

TEST(OwnTgidInInitialPidNamespaceTest, ZeroWithoutThePidNamespaceOfTheInitialOne) {
  testing::TempDir root("ember-process-ids");
  EXPECT_EQ(OwnTgidInInitialPidNamespace(root.path()), 0u);
  // Here: this process's id exactly when /proc says it runs in the initial pid namespace.
  struct stat ns;
  ASSERT_EQ(stat("/proc/self/ns/pid", &ns), 0);
  EXPECT_EQ(OwnTgidInInitialPidNamespace(),
            ns.st_ino == 0xEFFFFFFC ? static_cast<uint32_t>(getpid()) : 0u);
}

}  // namespace
}  // namespace ember
