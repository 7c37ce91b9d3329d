// PerfMap on byte strings (growth in pieces, garbage, overlaps, caps) and PerfMapFile on real files
// that grow, shrink, get replaced and get rewritten in place.
#include "symbolize/perf_map.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "support/temp_dir.h"

namespace ember {
namespace {

using testing::WriteFile;

std::string NameAt(const PerfMap& map, uint64_t address) {
  std::optional<PerfMapSymbol> symbol = map.Lookup(address);
  return symbol ? std::string(symbol->name) : "<none>";
}

TEST(PerfMapTest, ParsesNodeAndJvmLines) {
  PerfMap map;
  EXPECT_EQ(map.Append("18c4000 300 Builtin:DeoptimizationEntry_Eager\n"
                       "7f27d37c6040 278 JS:*f /tmp/t.js:1:11\n"
                       "0x00007f5f3d0f0b00 0x0000000000000150 java.lang.String::hashCode()\n"),
            3u);
  EXPECT_EQ(NameAt(map, 0x18c4000), "Builtin:DeoptimizationEntry_Eager");
  EXPECT_EQ(NameAt(map, 0x18c42ff), "Builtin:DeoptimizationEntry_Eager");
  EXPECT_EQ(NameAt(map, 0x18c4300), "<none>");
  EXPECT_EQ(NameAt(map, 0x18c3fff), "<none>");
  EXPECT_EQ(NameAt(map, 0x7f27d37c6100), "JS:*f /tmp/t.js:1:11");  // spaces kept
  EXPECT_EQ(NameAt(map, 0x7f5f3d0f0b00), "java.lang.String::hashCode()");
  EXPECT_EQ(NameAt(map, 0x7f5f3d0f0c4f), "java.lang.String::hashCode()");
  EXPECT_EQ(NameAt(map, 0x7f5f3d0f0c50), "<none>");
  EXPECT_EQ(map.stats().entries, 3u);
  EXPECT_EQ(map.stats().bad_lines, 0u);
}

TEST(PerfMapTest, LookupEdges) {
  PerfMap map;
  // The highest range that has an end: [2^64 - 0x20, 2^64 - 0x10).
  map.Append("0 10 at_zero\nffffffffffffffe0 10 at_top\n10 1 one_byte\n");
  EXPECT_EQ(NameAt(map, 0), "at_zero");
  EXPECT_EQ(NameAt(map, 0xf), "at_zero");
  EXPECT_EQ(NameAt(map, 0x10), "one_byte");
  EXPECT_EQ(NameAt(map, 0x11), "<none>");
  EXPECT_EQ(NameAt(map, 0xffffffffffffffe0), "at_top");
  EXPECT_EQ(NameAt(map, 0xffffffffffffffef), "at_top");
  EXPECT_EQ(NameAt(map, 0xffffffffffffffdf), "<none>");
  EXPECT_EQ(NameAt(map, 0xfffffffffffffff0), "<none>");
  EXPECT_EQ(NameAt(map, 0xffffffffffffffff), "<none>");
  PerfMap empty;
  EXPECT_EQ(NameAt(empty, 0), "<none>");
  EXPECT_EQ(NameAt(empty, 0xffffffffffffffff), "<none>");
}

TEST(PerfMapTest, GrowsByHalfLines) {
  PerfMap map;
  EXPECT_EQ(map.Append("1000 10 first\n2000 20 sec"), 1u);
  EXPECT_EQ(NameAt(map, 0x1000), "first");
  EXPECT_EQ(NameAt(map, 0x2000), "<none>");  // its line has not ended yet
  EXPECT_EQ(map.Append("ond name"), 0u);
  EXPECT_EQ(map.Append(" here\n3000 "), 1u);
  EXPECT_EQ(NameAt(map, 0x201f), "second name here");
  EXPECT_EQ(map.Append("1 third\n"), 1u);
  EXPECT_EQ(NameAt(map, 0x3000), "third");

  // Byte by byte gives the same.
  PerfMap bytewise;
  for (char c : std::string("1000 10 first\n2000 20 second name here\n3000 1 third\n")) {
    bytewise.Append(absl::string_view(&c, 1));
  }
  EXPECT_EQ(bytewise.size(), 3u);
  EXPECT_EQ(NameAt(bytewise, 0x2010), "second name here");
}

TEST(PerfMapTest, SkipsAndCountsGarbage) {
  PerfMap map;
  map.Append(
      "not a line at all\n"
      "xyz 10 bad_start\n"
      "1000 zz bad_size\n"
      "1000 0 zero_size\n"
      "1000 10\n"                      // no name
      "1000 10 \n"                     // empty name
      "ffffffffffffffff 2 overflow\n"  // start + size wraps
      "12345678901234567 10 seventeen_digits\n"
      "0x 10 bare_prefix\n"
      "-1000 10 negative\n"
      "\n"  // blank: ignored, not counted
      "\x01\xff\x80 garbage bytes\n"
      "5000 10 good\r\n"                 // CRLF
      "  6000   20   spaced  name \n");  // extra spaces between fields are fine
  EXPECT_EQ(map.stats().bad_lines, 11u);
  EXPECT_EQ(map.stats().entries, 2u);
  EXPECT_EQ(NameAt(map, 0x5000), "good");
  EXPECT_EQ(NameAt(map, 0x6000), "spaced  name ");
  EXPECT_EQ(NameAt(map, 0x1000), "<none>");
}

TEST(PerfMapTest, LaterEntriesWinWhereTheyOverlap) {
  PerfMap map;
  map.Append("1000 100 old\n");
  map.Append("1040 20 inner\n");  // splits old in two
  EXPECT_EQ(NameAt(map, 0x103f), "old");
  EXPECT_EQ(NameAt(map, 0x1040), "inner");
  EXPECT_EQ(NameAt(map, 0x105f), "inner");
  EXPECT_EQ(NameAt(map, 0x1060), "old");
  EXPECT_EQ(NameAt(map, 0x10ff), "old");
  std::optional<PerfMapSymbol> tail = map.Lookup(0x1080);
  ASSERT_TRUE(tail);
  EXPECT_EQ(tail->start, 0x1060u);
  EXPECT_EQ(tail->end, 0x1100u);

  map.Append("0f80 100 over_the_start\n");  // [f80, 1080): covers old's head and inner
  EXPECT_EQ(NameAt(map, 0xf80), "over_the_start");
  EXPECT_EQ(NameAt(map, 0x1050), "over_the_start");
  EXPECT_EQ(NameAt(map, 0x107f), "over_the_start");
  EXPECT_EQ(NameAt(map, 0x1080), "old");

  map.Append("1000 1000 everything\n");  // covers all of them whole
  EXPECT_EQ(NameAt(map, 0xf80), "over_the_start");
  EXPECT_EQ(NameAt(map, 0x1000), "everything");
  EXPECT_EQ(NameAt(map, 0x1fff), "everything");
  EXPECT_EQ(map.size(), 2u);

  map.Append("1000 1000 same_range_again\n");  // the same range written again: the new name
  EXPECT_EQ(NameAt(map, 0x1800), "same_range_again");
  EXPECT_EQ(map.size(), 2u);
}

TEST(PerfMapTest, HugeLinesAreSkippedWithoutHoldingThem) {
  PerfMap map(PerfMapLimits{.max_line_bytes = 100});
  map.Append("1000 10 ");
  map.Append(std::string(1000, 'a'));  // over the limit before its newline
  map.Append(std::string(1000, 'b'));
  map.Append("\n2000 10 after\n");
  map.Append(absl::StrCat("3000 10 ", std::string(200, 'c'), "\n4000 10 last\n"));
  EXPECT_EQ(map.stats().long_lines, 2u);
  EXPECT_EQ(NameAt(map, 0x1000), "<none>");
  EXPECT_EQ(NameAt(map, 0x2000), "after");
  EXPECT_EQ(NameAt(map, 0x3000), "<none>");
  EXPECT_EQ(NameAt(map, 0x4000), "last");
}

TEST(PerfMapTest, EntryCapEvictsTheOldestEntries) {
  PerfMap map(PerfMapLimits{.max_entries = 100});
  std::string text;
  for (int i = 0; i < 1000; ++i) absl::StrAppendFormat(&text, "%x 10 f%d\n", 0x1000 + i * 0x10, i);
  const uint64_t version = map.version();
  map.Append(text);
  EXPECT_LE(map.size(), 100u);
  EXPECT_GE(map.size(), 50u);
  EXPECT_GT(map.stats().evictions, 0u);
  EXPECT_EQ(map.stats().entries, 1000u);
  EXPECT_EQ(map.stats().dropped, 0u);
  EXPECT_EQ(map.stats().entries - map.stats().evicted, map.size());
  EXPECT_NE(map.version(), version);                    // names known before may be gone
  EXPECT_EQ(NameAt(map, 0x1000), "<none>");             // the oldest went
  EXPECT_EQ(NameAt(map, 0x1000 + 999 * 0x10), "f999");  // the newest is named
  // An evicted address named again by a later line (the code was placed again) comes back.
  map.Append("1000 10 again\n");
  EXPECT_EQ(NameAt(map, 0x1000), "again");
  map.Reset();
  map.Append("1000 10 fresh\n");
  EXPECT_EQ(NameAt(map, 0x1000), "fresh");
}

TEST(PerfMapTest, ByteLimitIsNeverExceeded) {
  const PerfMapLimits limits{.max_bytes = 64 * 1024, .max_line_bytes = 128 * 1024};
  PerfMap map(limits);
  for (int i = 0; i < 20000; ++i) {
    map.Append(absl::StrFormat("%x 10 LazyCompile:*function_%d /srv/app.js:%d:1\n",
                               0x100000 + i * 0x10, i, i));
    ASSERT_LE(map.EstimatedBytes(), limits.max_bytes) << "after line " << i;
  }
  EXPECT_EQ(map.EstimatedBytes(), map.name_bytes() + map.size() * kPerfMapEntryBytes);
  EXPECT_GT(map.stats().evicted, 15000u);
  EXPECT_EQ(NameAt(map, 0x100000 + 19999 * 0x10),
            "LazyCompile:*function_19999 /srv/app.js:19999:1");
  // A name that cannot fit even alone is refused and counted; the map keeps what it has.
  const size_t size = map.size();
  map.Append(absl::StrCat("1 10 ", std::string(64 * 1024, 'x'), "\n"));
  EXPECT_EQ(map.stats().dropped, 1u);
  EXPECT_EQ(map.size(), size);
}

TEST(PerfMapTest, NameCapCompactsNamesOfCoveredEntriesFirst) {
  // A JIT that keeps rewriting the same code space: covered names are garbage and compacted away,
  // so the live names never hit the cap.
  PerfMap map(PerfMapLimits{.max_name_bytes = 4096});
  for (int round = 0; round < 1000; ++round) {
    map.Append(absl::StrFormat("1000 100 function_number_%08d\n", round));
  }
  EXPECT_EQ(map.stats().evictions, 0u);
  EXPECT_EQ(map.stats().entries, 1000u);
  EXPECT_EQ(NameAt(map, 0x1000), "function_number_00000999");
  EXPECT_LE(map.name_bytes(), 4096u);

  // Distinct live names past the cap evict the oldest, and are counted.
  PerfMap full(PerfMapLimits{.max_name_bytes = 4096});
  for (int i = 0; i < 1000; ++i) {
    full.Append(absl::StrFormat("%x 10 function_number_%08d\n", 0x1000 + i * 0x10, i));
  }
  EXPECT_GT(full.stats().evicted, 800u);
  EXPECT_EQ(full.stats().entries, 1000u);
  EXPECT_LE(full.name_bytes(), 4096u);
  EXPECT_EQ(NameAt(full, 0x1000), "<none>");
  EXPECT_EQ(NameAt(full, 0x1000 + 999 * 0x10), "function_number_00000999");
}

TEST(PerfMapTest, ResetForgetsEntriesAndUnfinishedLine) {
  PerfMap map;
  map.Append("1000 10 kept\n2000 10 unfin");
  const uint64_t version = map.version();
  map.Reset();
  EXPECT_NE(map.version(), version);
  EXPECT_EQ(map.size(), 0u);
  map.Append("ished\n3000 10 fresh\n");  // "ished" alone is a bad line, not the old line's end
  EXPECT_EQ(NameAt(map, 0x1000), "<none>");
  EXPECT_EQ(NameAt(map, 0x2000), "<none>");
  EXPECT_EQ(NameAt(map, 0x3000), "fresh");
  EXPECT_EQ(map.stats().resets, 1u);
  EXPECT_EQ(map.stats().bad_lines, 1u);
}

TEST(PerfMapTest, VersionChangesOnlyWhenANamedAddressMayBeRenamed) {
  PerfMap map;
  uint64_t version = map.version();
  map.Append("1000 10 a\n2000 10 b\n");  // new names where there were none
  EXPECT_EQ(map.version(), version);
  map.Append("1010 ff0 c\n");  // touches neither a nor b
  EXPECT_EQ(map.version(), version);
  map.Append("1008 4 d\n");  // inside a: a's addresses there are named d now
  EXPECT_NE(map.version(), version);
  version = map.version();
  map.Append("2000 10 b\n");  // the same entry again still replaces one
  EXPECT_NE(map.version(), version);
  version = map.version();
  map.Append("garbage\n3000 1");
  EXPECT_EQ(map.version(), version);
  map.Reset();
  EXPECT_NE(map.version(), version);
}

TEST(PerfMapTest, ShedOldestHalvesTheEntriesOldestFirstAndRenews) {
  PerfMap map;
  std::string text;
  for (int i = 0; i < 100; ++i) text += absl::StrFormat("%x 10 f%d\n", i * 16, i);
  ASSERT_EQ(map.Append(text), 100u);
  const size_t bytes = map.EstimatedBytes();
  const uint64_t version = map.version();
  map.ShedOldest();
  EXPECT_EQ(map.size(), 50u);
  EXPECT_LT(map.EstimatedBytes(), bytes / 2 + PerfMap::kEntryBytes);
  EXPECT_EQ(NameAt(map, 49 * 16), "<none>");
  EXPECT_EQ(NameAt(map, 50 * 16), "f50");
  EXPECT_EQ(map.stats().evictions, 1u);
  EXPECT_EQ(map.stats().evicted, 50u);
  EXPECT_NE(map.version(), version);  // f0 to f49 are unnamed now
  map.ShedOldest();
  EXPECT_EQ(map.size(), 25u);
  // Appending after works as before; an empty map has nothing to shed.
  EXPECT_EQ(map.Append("9000 10 later\n"), 1u);
  EXPECT_EQ(NameAt(map, 0x9000), "later");
  PerfMap empty;
  empty.ShedOldest();
  EXPECT_EQ(empty.stats().evictions, 0u);
}

TEST(PerfMapTest, VersionsDifferAcrossMaps) {
  PerfMap a;
  PerfMap b;
  EXPECT_NE(a.version(), b.version());
}

TEST(NamespacePidTest, LastNsPidField) {
  EXPECT_EQ(NamespacePid("Name:\tnode\nPid:\t4242\nNSpid:\t4242\t17\t1\nPPid:\t1\n", 4242), 1u);
  EXPECT_EQ(NamespacePid("Name:\tnode\nNSpid:\t4242\n", 4242), 4242u);
  EXPECT_EQ(NamespacePid("Name:\tnode\nPid:\t4242\n", 4242), 4242u);  // no NSpid line
  EXPECT_EQ(NamespacePid("NSpid:\tgarbage\n", 7), 7u);
  EXPECT_EQ(NamespacePid("", 7), 7u);
}

class PerfMapFileTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.empty()); }

  void Write(const std::string& text, bool append = false) { WriteFile(path_, text, append); }

  const testing::TempDir temp_{"ember-perf-map"};
  const std::string dir_ = temp_.path();
  const std::string path_ = dir_ + "/perf-1.map";
};

TEST_F(PerfMapFileTest, ReadsWhatWasAppendedOnly) {
  PerfMapFile file(path_, "/tmp/perf-1.map");
  EXPECT_EQ(file.Refresh(), PerfMapFile::Result::kMissing);
  Write("1000 10 one\n2000 10 tw");
  EXPECT_EQ(file.Refresh(), PerfMapFile::Result::kReloaded);  // first read
  EXPECT_EQ(NameAt(file.map(), 0x1000), "one");
  EXPECT_EQ(NameAt(file.map(), 0x2000), "<none>");
  EXPECT_EQ(file.Refresh(), PerfMapFile::Result::kUnchanged);
  Write("o\n3000 10 three\n", /*append=*/true);
  EXPECT_EQ(file.Refresh(), PerfMapFile::Result::kGrew);
  EXPECT_EQ(NameAt(file.map(), 0x2000), "two");
  EXPECT_EQ(NameAt(file.map(), 0x3000), "three");
  EXPECT_EQ(file.map().stats().entries, 3u);  // nothing parsed twice
  EXPECT_EQ(file.map().stats().resets, 0u);
  EXPECT_EQ(file.name(), "/tmp/perf-1.map");
}

TEST_F(PerfMapFileTest, RereadsAShrunkFile) {
  PerfMapFile file(path_, "m");
  Write("1000 10 one\n2000 10 two\n");
  file.Refresh();
  Write("5000 10 five\n");  // truncated and rewritten shorter
  EXPECT_EQ(file.Refresh(), PerfMapFile::Result::kReloaded);
  EXPECT_EQ(NameAt(file.map(), 0x1000), "<none>");
  EXPECT_EQ(NameAt(file.map(), 0x5000), "five");
}

TEST_F(PerfMapFileTest, RereadsAFileRewrittenInPlaceLonger) {
  // jcmd Compiler.perfmap truncates and rewrites the same file, usually longer than before.
  PerfMapFile file(path_, "m");
  Write("1000 10 one\n");
  file.Refresh();
  Write("0x7000 0x10 seven\n0x8000 0x10 eight\n0x9000 0x10 nine\n");
  EXPECT_EQ(file.Refresh(), PerfMapFile::Result::kReloaded);
  EXPECT_EQ(NameAt(file.map(), 0x1000), "<none>");
  EXPECT_EQ(NameAt(file.map(), 0x7000), "seven");
  EXPECT_EQ(NameAt(file.map(), 0x9000), "nine");
}

TEST_F(PerfMapFileTest, RereadsAReplacedFile) {
  PerfMapFile file(path_, "m");
  Write("1000 10 one\n");
  file.Refresh();
  const std::string other = dir_ + "/other";
  WriteFile(other, "1000 10 one\n6000 10 six\n");  // same first line, so only the inode tells
  std::filesystem::rename(other, path_);
  EXPECT_EQ(file.Refresh(), PerfMapFile::Result::kReloaded);
  EXPECT_EQ(NameAt(file.map(), 0x6000), "six");
  EXPECT_EQ(file.map().stats().resets, 1u);
}

TEST_F(PerfMapFileTest, KeepsEntriesWhileTheFileIsGone) {
  PerfMapFile file(path_, "m");
  Write("1000 10 one\n");
  file.Refresh();
  std::filesystem::remove(path_);
  EXPECT_EQ(file.Refresh(), PerfMapFile::Result::kMissing);
  EXPECT_EQ(NameAt(file.map(), 0x1000), "one");
}

// The map is opened under its process's root (here dir_): a link at its path to a file outside
// that root finds nothing, and a FIFO there is refused at once.
TEST_F(PerfMapFileTest, LinksStayInsideTheProcessRootAndNonRegularFilesAreRefused) {
  const std::string outside = dir_ + ".outside";
  WriteFile(outside, "1000 10 secret\n");
  const std::string name = path_.substr(dir_.size());
  std::filesystem::create_symlink(outside, path_);
  PerfMapFile file(FileLocation(dir_, name), name);
  EXPECT_EQ(file.Refresh(), PerfMapFile::Result::kMissing);
  EXPECT_EQ(file.map().size(), 0u);
  // The same link's target inside the root is what is read.
  std::filesystem::create_directories(std::filesystem::path(dir_ + outside).parent_path());
  WriteFile(dir_ + outside, "2000 10 inside\n");
  EXPECT_EQ(file.Refresh(), PerfMapFile::Result::kReloaded);
  EXPECT_EQ(NameAt(file.map(), 0x2000), "inside");
  EXPECT_EQ(NameAt(file.map(), 0x1000), "<none>");
  std::filesystem::remove(path_);
  ASSERT_EQ(mkfifo(path_.c_str(), 0600), 0);
  alarm(20);  // a blocking open ends the test
  EXPECT_EQ(file.Refresh(), PerfMapFile::Result::kMissing);
  alarm(0);
  PerfMapFile directory(FileLocation(dir_, "/"), "m");
  EXPECT_EQ(directory.Refresh(), PerfMapFile::Result::kMissing);
  std::filesystem::remove(outside);
}

TEST_F(PerfMapFileTest, HugeFileIsReadInSlicesAndEvictsItsOldestEntries) {
  // 200k entries, 8 MB of text, against a cap of 50k entries and 1 MB read per refresh.
  std::string text;
  for (int i = 0; i < 200000; ++i) {
    absl::StrAppendFormat(&text, "%x 10 LazyCompile:*function_%d /srv/app/file.js:%d:1\n",
                          0x10000000 + i * 0x10, i, i);
  }
  Write(text);
  PerfMapFile file(path_, "m", PerfMapLimits{.max_entries = 50000}, size_t{1} << 20);
  file.Refresh();
  const uint64_t first = file.map().stats().entries;
  EXPECT_GT(first, 0u);
  EXPECT_LT(first, 200000u);  // one slice only
  int refreshes = 1;
  while (file.Refresh() != PerfMapFile::Result::kUnchanged && refreshes < 100) ++refreshes;
  EXPECT_GE(refreshes, 8);
  EXPECT_EQ(file.map().stats().entries, 200000u);
  EXPECT_GT(file.map().stats().evictions, 0u);
  EXPECT_LE(file.map().size(), 50000u);
  EXPECT_EQ(NameAt(file.map(), 0x10000000 + 199999 * 0x10),
            "LazyCompile:*function_199999 /srv/app/file.js:199999:1");
  EXPECT_EQ(file.map().stats().bad_lines, 0u);  // slices cut lines, the parser joins them
}

}  // namespace
}  // namespace ember
