// /proc/PID/maps parsing on a fixture with the shapes the kernel writes.
#include "process/proc_maps.h"

#include <sys/sysmacros.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
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

std::string Line(uint64_t start, const std::string& perms, uint64_t inode,
                 const std::string& path) {
  return absl::StrFormat("%x-%x %s 00000000 fd:01 %d %s\n", start, start + 0x1000, perms, inode,
                         path);
}

TEST(ProcMapsTest, PathsOverTheLimitKeepRangeAndIdentityButNotThePath) {
  const std::string long_path = "/" + std::string(300, 'd') + "/libx.so";
  const std::string text = Line(0x1000, "r-xp", 7, "/usr/lib/liba.so") +
                           Line(0x3000, "r-xp", 8, long_path) +
                           Line(0x5000, "r-xp", 9, long_path + " (deleted)");
  ProcMapsStats stats;
  auto maps = ParseProcMaps(text, 256, &stats);
  ASSERT_TRUE(maps.ok()) << maps.status();
  ASSERT_EQ(maps->size(), 3u);
  EXPECT_EQ((*maps)[0].path, "/usr/lib/liba.so");
  EXPECT_TRUE((*maps)[0].IsFileBacked());
  for (int i : {1, 2}) {
    const MemoryMapping& m = (*maps)[i];
    EXPECT_EQ(m.path, kLongPathMarker);
    EXPECT_EQ(m.start, 0x3000u + 0x2000u * (i - 1));
    EXPECT_EQ(m.end, m.start + 0x1000);
    EXPECT_EQ(m.file.inode, 7u + i);
    EXPECT_EQ(m.file.dev, makedev(0xfd, 0x01));
    // Nothing to open it by: no frame of it is named after another file.
    EXPECT_FALSE(m.IsFileBacked());
  }
  EXPECT_TRUE((*maps)[2].deleted);
  EXPECT_EQ(stats.long_paths, 2u);

  // Without a limit, the path is kept whole.
  auto whole = ParseProcMaps(text);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ((*whole)[1].path, long_path);
}

TEST(ProcMapsTest, KeepsExecutableMappingsProgramFirstThenFilesThenAnonymous) {
  std::string text;
  text += Line(0x1000, "r-xp", 0, "");                  // anonymous code (JIT)
  text += Line(0x2000, "r-xp", 5, "/usr/lib/liba.so");  // a library
  text += Line(0x3000, "rw-p", 5, "/usr/lib/liba.so");  // data: never kept
  text += Line(0x4000, "r-xp", 6, "/usr/bin/prog");     // the program
  text += Line(0x5000, "r-xp", 7, "/usr/lib/libb.so");  // another library
  text += Line(0x6000, "r-xp", 0, "[vdso]");            // special
  text += Line(0x7000, "r-xp", 8, "/usr/bin/prog");     // the program again
  auto maps = ParseProcMaps(text);
  ASSERT_TRUE(maps.ok());

  ProcMapsStats stats;
  std::vector<MemoryMapping> all = KeepExecutableMappings(*maps, "/usr/bin/prog", 100, &stats);
  ASSERT_EQ(all.size(), 6u);  // every executable one, in address order
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LT(all[i - 1].start, all[i].start);
  EXPECT_EQ(stats.dropped_mappings, 0u);

  std::vector<MemoryMapping> three = KeepExecutableMappings(*maps, "/usr/bin/prog", 3, &stats);
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[0].start, 0x2000u);  // liba: the first other file, by address
  EXPECT_EQ(three[1].start, 0x4000u);  // the program, both of its mappings
  EXPECT_EQ(three[2].start, 0x7000u);
  EXPECT_EQ(stats.dropped_mappings, 3u);

  std::vector<MemoryMapping> five = KeepExecutableMappings(*maps, "/usr/bin/prog", 5, &stats);
  ASSERT_EQ(five.size(), 5u);
  // The vDSO (signal frames unwind through it) ranks with the files; anonymous code goes first.
  EXPECT_EQ(five[0].start, 0x2000u);
  EXPECT_EQ(five[3].start, 0x6000u);
  EXPECT_EQ(five[4].start, 0x7000u);
  EXPECT_EQ(stats.dropped_mappings, 4u);
}

TEST(ProcMapsTest, ParserTakesTheTextInAnyPiecesAndKeepsOnlyExecutableOnes) {
  const std::string text = ReadFixture("maps/typical.txt");
  auto whole = ParseProcMaps(text);
  ASSERT_TRUE(whole.ok());
  for (size_t piece : {size_t{1}, size_t{7}, size_t{100}, text.size()}) {
    ProcMapsParser parser(SIZE_MAX, /*executable_only=*/true);
    for (size_t at = 0; at < text.size(); at += piece) {
      parser.Append(absl::string_view(text).substr(at, piece));
    }
    EXPECT_EQ(parser.bytes(), text.size());
    auto maps = std::move(parser).Finish();
    ASSERT_TRUE(maps.ok()) << maps.status();
    std::vector<MemoryMapping> executable;
    for (const MemoryMapping& m : *whole) {
      if (m.executable) executable.push_back(m);
    }
    ASSERT_EQ(maps->size(), executable.size()) << "pieces of " << piece;
    for (size_t i = 0; i < maps->size(); ++i) {
      EXPECT_EQ((*maps)[i].start, executable[i].start);
      EXPECT_EQ((*maps)[i].path, executable[i].path);
    }
  }
  // The last line need not end in a newline; its long path is counted too.
  ProcMapsParser parser(16);
  parser.Append("1000-2000 r-xp 00000000 fd:01 7 /usr/lib/a-long-library-name.so");
  auto last = std::move(parser).Finish();
  ASSERT_TRUE(last.ok());
  ASSERT_EQ(last->size(), 1u);
  EXPECT_EQ((*last)[0].path, kLongPathMarker);
  EXPECT_EQ(parser.stats().long_paths, 1u);
}

TEST(ProcMapsTest, ParserRefusesALineNoKernelWrites) {
  ProcMapsParser parser;
  parser.Append("1000-2000 r-xp 00000000 fd:01 7 /a\n");
  for (int i = 0; i < 100; ++i) parser.Append(std::string(1024, 'x'));  // no newline: 100 KiB
  auto maps = std::move(parser).Finish();
  ASSERT_FALSE(maps.ok());
  EXPECT_NE(maps.status().message().find("line 2 is over 65536 bytes"), std::string::npos)
      << maps.status();
}

TEST(ProcMapsTest, MappingsBytesCountsThePathsHeapBlocks) {
  std::vector<MemoryMapping> mappings(2);
  mappings.shrink_to_fit();
  const size_t objects = 2 * sizeof(MemoryMapping);
  EXPECT_EQ(MappingsBytes(mappings), objects);
  mappings[0].path = "/short";  // inside the string
  EXPECT_EQ(MappingsBytes(mappings), objects);
  mappings[1].path = std::string(4000, 'p');
  EXPECT_GE(MappingsBytes(mappings), objects + 4001);
  EXPECT_EQ(MappingsBytes(mappings), objects + mappings[1].path.capacity() + 1);
}

}  // namespace
}  // namespace ember
