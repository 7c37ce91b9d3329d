// When the agent reads the kernel's symbols again: a module list that changed, or frames above
// the kernel image once per recheck period.
#include "stacks/kernel_symbols_refresh.h"

#include <chrono>

#include "gtest/gtest.h"

namespace ember {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;

constexpr char kModules[] =
    "ext4 1040384 3 - Live 0xffffffffc0a00000\n"
    "overlay 176128 0 - Live 0xffffffffc0b00000\n";

class KernelSymbolsRefreshTest : public ::testing::Test {
 protected:
  KernelSymbolsRefresh::Clock::time_point start{seconds(1000)};
  KernelSymbolsRefresh refresh{kModules, start, minutes(5)};
};

TEST_F(KernelSymbolsRefreshTest, NothingNewIsNeverDue) {
  EXPECT_FALSE(refresh.Check(kModules, 0, start + seconds(10)));
  EXPECT_FALSE(refresh.Check(kModules, 0, start + minutes(60)));
}

TEST_F(KernelSymbolsRefreshTest, AModuleLoadedOrUnloadedIsDueAtOnce) {
  const char loaded[] =
      "ext4 1040384 3 - Live 0xffffffffc0a00000\n"
      "overlay 176128 0 - Live 0xffffffffc0b00000\n"
      "nf_tables 299008 0 - Live 0xffffffffc0c00000\n";
  EXPECT_TRUE(refresh.Check(loaded, 0, start + seconds(10)));
  EXPECT_FALSE(refresh.Check(loaded, 0, start + seconds(20)));   // read with it already
  EXPECT_TRUE(refresh.Check(kModules, 0, start + seconds(30)));  // nf_tables unloaded
  EXPECT_FALSE(refresh.Check(kModules, 0, start + seconds(40)));
}

TEST_F(KernelSymbolsRefreshTest, AModuleInUseOrSeenWithoutAddressesIsNotAChange) {
  // The use count moves with every mount; without CAP_SYSLOG the addresses read 0.
  EXPECT_FALSE(refresh.Check(
      "ext4 1040384 9 - Live 0x0000000000000000\noverlay 176128 4 - Live 0x0000000000000000\n", 0,
      start + seconds(10)));
}

TEST_F(KernelSymbolsRefreshTest, FramesAboveTheImageAreDueOncePerRecheck) {
  EXPECT_FALSE(refresh.Check(kModules, 7, start + minutes(4)));
  EXPECT_TRUE(refresh.Check(kModules, 7, start + minutes(5)));
  EXPECT_FALSE(refresh.Check(kModules, 7, start + minutes(30)));  // none since
  EXPECT_FALSE(refresh.Check(kModules, 9, start + minutes(9)));
  EXPECT_TRUE(refresh.Check(kModules, 9, start + minutes(10)));
  EXPECT_FALSE(refresh.Check(kModules, 10, start + minutes(11)));
}

TEST(KernelSymbolsRefreshNoModulesTest, AKernelWithoutModulesRechecksForBpfProgramsOnly) {
  const KernelSymbolsRefresh::Clock::time_point start{seconds(1000)};
  KernelSymbolsRefresh refresh(std::nullopt, start, minutes(5));
  EXPECT_FALSE(refresh.Check(std::nullopt, 0, start + minutes(60)));
  EXPECT_TRUE(refresh.Check(std::nullopt, 1, start + minutes(60)));
}

}  // namespace
}  // namespace ember
