// The kernel CPU list format.
#include "sampler/cpu_list.h"

#include "gtest/gtest.h"

namespace ember {
namespace {

TEST(CpuListTest, ParsesRangesAndSingles) {
  EXPECT_EQ(*ParseCpuList("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(*ParseCpuList("0"), (std::vector<int>{0}));
}

TEST(CpuListTest, RejectsJunk) {
  for (absl::string_view junk : {"", "a", "3-1", "1-", "-1", "0,,1", "0-99999999"}) {
    EXPECT_FALSE(ParseCpuList(junk).ok()) << junk;
  }
}

}  // namespace
}  // namespace ember
