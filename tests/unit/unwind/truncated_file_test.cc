// A library truncated on disk under the agent (overwritten in place, or cut short while a process
// runs it): reading its CFI through the mapping faults with SIGBUS, which must end the file's
// unwinding, not the agent.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "unwind/module_cfi.h"

namespace ember {
namespace {

constexpr char kLibrary[] = "/lib/x86_64-linux-gnu/libz.so.1";

class TruncatedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/ember-unwind-truncated-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    copy_ = dir_ + "/libz-copy.so";
    std::filesystem::copy_file(kLibrary, copy_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
  std::string copy_;
};

// A frame in the library's first page of code, with a stack of zeroes.
StepResult StepAt(ModuleCfi& cfi, uint64_t pc) {
  static const uint8_t kStack[256] = {};
  FrameRegisters frame;
  for (int reg = 0; reg < kCfiRegisterCount; ++reg) frame.Set(reg, 0x7ffd0000);
  frame.Set(kCfiRegisterCount - 1, pc);
  StepResult result;
  cfi.Step(frame, 0, /*is_return_address=*/false, StackMemory{.start = 0x7ffd0000, .bytes = kStack},
           result);
  return result;
}

TEST_F(TruncatedFileTest, AFileCutToNothingAfterOpeningStopsItsStepsNotTheProcess) {
  auto image = ElfImage::Open(copy_);
  ASSERT_TRUE(image.ok()) << image.status();
  const ModulePlacement at = (*image)->AtElfAddresses();
  ModuleCfi cfi(*image);
  ASSERT_EQ(truncate(copy_.c_str(), 0), 0);

  // Opening the libdwfl session reads the headers through the mapping: the fault is caught.
  StepResult result = StepAt(cfi, at.low + 0x1000);
  EXPECT_EQ(result.end, StepEnd::kFailed);
  EXPECT_TRUE(cfi.file_changed());
  // And the module stays done with, without touching the file again.
  result = StepAt(cfi, at.low + 0x1100);
  EXPECT_EQ(result.end, StepEnd::kFailed);
}

TEST_F(TruncatedFileTest, AFileCutAfterItsRowsWereReadFaultsOnTheNextNewRow) {
  auto image = ElfImage::Open(copy_);
  ASSERT_TRUE(image.ok()) << image.status();
  const ModulePlacement at = (*image)->AtElfAddresses();
  ModuleCfi cfi(*image);
  StepAt(cfi, at.low + 0x1000);  // opens the session and reads a row (the stack is zeroes)
  ASSERT_FALSE(cfi.file_changed());
  ASSERT_EQ(truncate(copy_.c_str(), 0), 0);
  // Other addresses need the CFI tables again, which are gone.
  for (uint64_t offset = 0x1200; offset < 0x4000 && !cfi.file_changed(); offset += 0x100) {
    StepAt(cfi, at.low + offset);
  }
  EXPECT_TRUE(cfi.file_changed());
  EXPECT_EQ(StepAt(cfi, at.low + 0x1000).end, StepEnd::kFailed);
}

TEST_F(TruncatedFileTest, OpeningAnEmptiedFileIsAnErrorNotACrash) {
  ASSERT_EQ(truncate(copy_.c_str(), 0), 0);
  ModuleCfiCache cache;
  struct stat st;
  ASSERT_EQ(stat(copy_.c_str(), &st), 0);
  EXPECT_EQ(cache.Get(FileIdentity{.dev = st.st_dev, .inode = st.st_ino}, copy_), nullptr);
}

}  // namespace
}  // namespace ember
