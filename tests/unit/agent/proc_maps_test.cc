// /proc/PID/maps parsing on a fixture with the shapes the kernel writes.
#include "agent/proc_maps.h"

#include <sys/sysmacros.h>

#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace ember {
namespace {

std::string ReadFixture(const std::string& name) {
  std::ifstream in(std::string(EMBER_TEST_DATA_DIR) + "/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ProcMapsTest, ParsesEveryLineShape) {
  auto maps = ParseProcMaps(ReadFixture("maps/typical.txt"));
  ASSERT_TRUE(maps.ok()) << maps.status();
  ASSERT_EQ(maps->size(), 11u);

  const MemoryMapping& text = (*maps)[1];
  EXPECT_EQ(text.start, 0x55d0c8a02000u);
  EXPECT_EQ(text.end, 0x55d0c8a03000u);
  EXPECT_EQ(text.offset, 0x2000u);
  EXPECT_TRUE(text.executable);
  EXPECT_EQ(text.file.dev, makedev(0xfd, 0x01));
  EXPECT_EQ(text.file.inode, 1835012u);
  EXPECT_EQ(text.path, "/usr/bin/phases");
  EXPECT_TRUE(text.IsFileBacked());
  EXPECT_EQ(text.ToFileOffset(ProcessAddress{0x55d0c8a02010}).value, 0x2010u);

  EXPECT_FALSE((*maps)[3].IsFileBacked());  // [heap]
  EXPECT_EQ((*maps)[3].path, "[heap]");
  EXPECT_TRUE((*maps)[5].deleted);  // memfd
  EXPECT_EQ((*maps)[6].path, "/opt/my app/lib with spaces.so");
  EXPECT_EQ((*maps)[6].file.dev, makedev(0x103, 0x02));
  EXPECT_TRUE((*maps)[7].deleted);
  EXPECT_EQ((*maps)[7].path, "/tmp/replaced-binary");
  EXPECT_FALSE((*maps)[9].IsFileBacked());  // [vdso]
  EXPECT_EQ((*maps)[10].path, "[vsyscall]");
}

TEST(ProcMapsTest, EmptyIsNoMappings) {
  auto maps = ParseProcMaps("");
  ASSERT_TRUE(maps.ok());
  EXPECT_TRUE(maps->empty());
}

TEST(ProcMapsTest, MalformedLinesAreErrorsNamingTheLine) {
  for (absl::string_view junk : {
           "garbage\n",
           "55d0c8a00000 r--p 00000000 fd:01 1835012 /x\n",          // no range
           "55d0c8a02000-55d0c8a00000 r--p 00000000 fd:01 1 /x\n",   // end < start
           "55d0c8a00000-55d0c8a02000 r--p zz fd:01 1 /x\n",         // bad offset
           "55d0c8a00000-55d0c8a02000 r--p 00000000 fd01 1 /x\n",    // bad device
           "55d0c8a00000-55d0c8a02000 r--p 00000000 fd:01 -1 /x\n",  // bad inode
           "55d0c8a00000-55d0c8a02000 rx 00000000 fd:01 1 /x\n",     // bad perms
           "55d0c8a00000-55d0c8a02000 r--p 00000000 fd:01\n",        // truncated
       }) {
    auto maps = ParseProcMaps(std::string("7f00-7f10 r-xp 00000000 00:00 0\n") + std::string(junk));
    ASSERT_FALSE(maps.ok()) << junk;
    EXPECT_NE(maps.status().message().find("line 2"), std::string::npos) << maps.status();
  }
}

}  // namespace
}  // namespace ember
