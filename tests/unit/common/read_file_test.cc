// Whole-file reads that never throw: a /proc file of a process that exits between open and read
// (found by bench/overhead.sh's soak, where std::istreambuf_iterator aborted the agent).
#include "common/read_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ember {
namespace {

TEST(ReadFileTest, ReadsAWholeFile) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/read_file_test.txt");
  std::string text(20000, 'x');
  text += "end\n";
  std::ofstream(path) << text;
  EXPECT_EQ(ReadWholeFile(path), text);
  EXPECT_EQ(ReadWholeFile(path, 100), std::nullopt);  // over the limit
  EXPECT_EQ(ReadWholeFile(path + ".missing"), std::nullopt);
  EXPECT_EQ(ReadWholeFile("/"), std::nullopt);  // a directory: read() fails
}

TEST(ReadFileTest, AProcFileOfAnExitedProcessIsNulloptNotAnException) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  int fd = open(absl::StrCat("/proc/", child, "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  // The file was opened while the process lived; reading it now fails with ESRCH.
  EXPECT_EQ(ReadWholeFd(fd), std::nullopt);
  close(fd);
  // A live process's file reads as usual.
  int again = open("/proc/self/stat", O_RDONLY);
  ASSERT_GE(again, 0);
  EXPECT_NE(ReadWholeFd(again), std::nullopt);
  close(again);
}

}  // namespace
}  // namespace ember
