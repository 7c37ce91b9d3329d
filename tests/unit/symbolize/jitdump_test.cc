// JitDump on byte images (well-formed, growing a byte at a time, corrupt) and JitDumpFile on real
// files that grow and get replaced.
#include "symbolize/jitdump.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "otlp/log_capture.h"
#include "support/jitdump_image.h"
#include "support/temp_dir.h"

namespace ember {
namespace {

using testing::JitDumpImage;

class StringSource : public JitDumpSource {
 public:
  explicit StringSource(std::string bytes) : bytes_(std::move(bytes)) {}
  uint64_t size() const override { return bytes_.size(); }
  bool Read(uint64_t offset, size_t size, char* out) override {
    if (offset > bytes_.size() || size > bytes_.size() - offset) return false;
    std::memcpy(out, bytes_.data() + offset, size);
    return true;
  }

 private:
  std::string bytes_;
};

std::string NameAt(const JitDump& dump, uint64_t address) {
  std::optional<PerfMapSymbol> symbol = dump.names().Lookup(address);
  return symbol ? std::string(symbol->name) : "<none>";
}

std::string LineAt(const JitDump& dump, uint64_t address) {
  std::optional<JitDumpLine> line = dump.LineAt(address);
  return line ? std::string(line->file) + ":" + std::to_string(line->line) : "<none>";
}

size_t ReadAll(JitDump& dump, const std::string& bytes) {
  StringSource source(bytes);
  return dump.Read(source, uint64_t{1} << 30);
}

// A V8-like dump: a function with its line table, a second one, unwinding info, a re-JIT of the
// first at a new address, and a move.
JitDumpImage WellFormed() {
  JitDumpImage image;
  image
      .DebugInfo(0x1000, {{0x1000 + 64, 10, "/srv/app.js"},
                          {0x1000 + 64 + 0x20, 11, "\xff"},
                          {0x1000 + 64 + 0x40, 3, "/srv/lib.js"}})
      .CodeLoad(0x1000, 0x80, "JS:~hot /srv/app.js:10:1")
      .UnwindingInfo(40)
      .CodeLoad(0x2000, 0x40, "JS:*cold /srv/app.js:20:1")
      .CodeLoad(0x3000, 0x100, "JS:*hot /srv/app.js:10:1")
      .CodeMove(0x2000, 0x5000, 0x40);
  return image;
}

TEST(JitDumpTest, NamesCodeAndLinesFromAWellFormedDump) {
  JitDump dump({}, JitDumpWriter::kV8);
  const std::string bytes = WellFormed().bytes();
  EXPECT_EQ(ReadAll(dump, bytes), 6u);
  EXPECT_EQ(dump.refusal(), JitDumpRefusal::kNone);
  EXPECT_EQ(dump.offset(), bytes.size());
  EXPECT_EQ(NameAt(dump, 0x1000), "JS:~hot /srv/app.js:10:1");
  EXPECT_EQ(NameAt(dump, 0x107f), "JS:~hot /srv/app.js:10:1");
  EXPECT_EQ(NameAt(dump, 0x1080), "<none>");
  EXPECT_EQ(NameAt(dump, 0x30ff), "JS:*hot /srv/app.js:10:1");
  // Moved: named at its new address (the old one keeps the name until code lands there).
  EXPECT_EQ(NameAt(dump, 0x5010), "JS:*cold /srv/app.js:20:1");
  // Lines: offsets from the code's start, the addresses less perf's 64-byte ELF header.
  EXPECT_EQ(LineAt(dump, 0x1000), "/srv/app.js:10");
  EXPECT_EQ(LineAt(dump, 0x101f), "/srv/app.js:10");
  EXPECT_EQ(LineAt(dump, 0x1020), "/srv/app.js:11");  // "\xff": the same file
  EXPECT_EQ(LineAt(dump, 0x1045), "/srv/lib.js:3");
  EXPECT_EQ(LineAt(dump, 0x1080), "<none>");
  EXPECT_EQ(LineAt(dump, 0x3000), "<none>");  // loaded without a line table
  EXPECT_EQ(dump.stats().code_loads, 3u);
  EXPECT_EQ(dump.stats().code_moves, 1u);
  EXPECT_EQ(dump.stats().debug_infos, 1u);
  EXPECT_EQ(dump.stats().other_records, 1u);
}

// Only V8 adds an ELF header's size to its debug-info addresses (64 bytes, 52 on its 32-bit
// targets); perf's own convention, which its JVMTI agent follows, is the code's own addresses.
TEST(JitDumpTest, DebugAddressesAreTheCodesOwnButForV8s) {
  const auto lines_of = [](uint64_t bias) {
    JitDumpImage image;
    image.DebugInfo(0x1000, {{0x1000 + bias, 10, "App.java"}, {0x1000 + bias + 0x20, 11, "\xff"}})
        .CodeLoad(0x1000, 0x80, "App::run");
    return image;
  };
  JitDump jvm;
  ReadAll(jvm, lines_of(0).bytes());
  EXPECT_EQ(LineAt(jvm, 0x1000), "App.java:10");
  EXPECT_EQ(LineAt(jvm, 0x101f), "App.java:10");
  EXPECT_EQ(LineAt(jvm, 0x1020), "App.java:11");
  JitDump v8({}, JitDumpWriter::kV8);
  ReadAll(v8, lines_of(64).bytes());
  EXPECT_EQ(LineAt(v8, 0x101f), "App.java:10");
  EXPECT_EQ(LineAt(v8, 0x1020), "App.java:11");
  JitDump v8_ia32({}, JitDumpWriter::kV8);
  ReadAll(v8_ia32, lines_of(0x34).Machine(3).bytes());
  EXPECT_EQ(LineAt(v8_ia32, 0x101f), "App.java:10");
  EXPECT_EQ(LineAt(v8_ia32, 0x1020), "App.java:11");
}

TEST(JitDumpTest, NewestLoadAtAnAddressWinsWithItsOwnLines) {
  JitDumpImage image;
  image.DebugInfo(0x1000, {{0x1000 + 64, 7, "/a.js"}})
      .CodeLoad(0x1000, 0x100, "JS:~first /a.js:7:1")
      .CodeLoad(0x1000, 0x80, "JS:*second /a.js:30:1");
  JitDump dump({}, JitDumpWriter::kV8);
  ReadAll(dump, image.bytes());
  EXPECT_EQ(NameAt(dump, 0x1010), "JS:*second /a.js:30:1");
  EXPECT_EQ(LineAt(dump, 0x1010), "<none>");               // the first one's table went with it
  EXPECT_EQ(NameAt(dump, 0x10a0), "JS:~first /a.js:7:1");  // not covered by the second
  // A debug info for other code does not stick to the next load.
  JitDumpImage other;
  other.DebugInfo(0x9000, {{0x9000 + 64, 1, "/b.js"}}).CodeLoad(0x2000, 0x10, "JS:x");
  JitDump second;
  ReadAll(second, other.bytes());
  EXPECT_EQ(LineAt(second, 0x2000), "<none>");
}

// V8 writes junk bytes as the file of code without a script; names are the runtime's bytes too.
TEST(JitDumpTest, NamesAndFilesThatAreNotUtf8AreNotPassedOn) {
  JitDumpImage image;
  image.DebugInfo(0x1000, {{0x1000 + 64, 5, "\x80\x1d\x03"}, {0x1000 + 64 + 0x10, 6, "/ok.js"}})
      .CodeLoad(0x1000, 0x20, "JS:caf\xe9");
  JitDump dump({}, JitDumpWriter::kV8);
  ReadAll(dump, image.bytes());
  EXPECT_EQ(NameAt(dump, 0x1000), "JS:caf\xEF\xBF\xBD");
  EXPECT_EQ(LineAt(dump, 0x1000), "<none>");
  EXPECT_EQ(LineAt(dump, 0x1010), "/ok.js:6");
}

TEST(JitDumpTest, ADumpGrowingAByteAtATimeReadsAsTheWhole) {
  const std::string bytes = WellFormed().Close().bytes();
  JitDump dump({}, JitDumpWriter::kV8);
  size_t records = 0;
  for (size_t size = 0; size <= bytes.size(); ++size) {
    StringSource source(bytes.substr(0, size));
    records += dump.Read(source, uint64_t{1} << 30);
    ASSERT_EQ(dump.refusal(), JitDumpRefusal::kNone) << "at " << size;
    ASSERT_LE(dump.offset(), size);
  }
  EXPECT_EQ(records, 7u);
  EXPECT_TRUE(dump.closed());
  EXPECT_EQ(NameAt(dump, 0x5010), "JS:*cold /srv/app.js:20:1");
  EXPECT_EQ(LineAt(dump, 0x1020), "/srv/app.js:11");
  // Records past a close are not read.
  StringSource more(bytes +
                    JitDumpImage(0x4A695444).CodeLoad(0x8000, 8, "late").bytes().substr(40));
  EXPECT_EQ(dump.Read(more, 1 << 20), 0u);
}

TEST(JitDumpTest, ReadsAtMostAboutMaxBytesPerCall) {
  JitDumpImage image;
  for (int i = 0; i < 100; ++i)
    image.CodeLoad(0x10000 + i * 0x100, 0x100, "JS:f" + std::to_string(i));
  JitDump dump;
  StringSource source(image.bytes());
  const size_t first = dump.Read(source, 1000);
  EXPECT_GT(first, 0u);
  EXPECT_LT(first, 100u);
  size_t total = first;
  for (int i = 0; i < 100 && total < 100; ++i) total += dump.Read(source, 1000);
  EXPECT_EQ(total, 100u);
  EXPECT_EQ(NameAt(dump, 0x10000 + 99 * 0x100), "JS:f99");
}

struct Corrupt {
  const char* what;
  std::string bytes;
  JitDumpRefusal refusal;
};

std::vector<Corrupt> CorruptDumps() {
  std::vector<Corrupt> cases;
  cases.push_back({"bad magic", JitDumpImage(0x12345678).bytes(), JitDumpRefusal::kBadMagic});
  cases.push_back(
      {"other byte order", JitDumpImage(0x4454694A).bytes(), JitDumpRefusal::kByteOrder});
  cases.push_back({"version 2", JitDumpImage(0x4A695444, 2).bytes(), JitDumpRefusal::kVersion});
  cases.push_back(
      {"header of 8 bytes", JitDumpImage(0x4A695444, 1, 8).bytes(), JitDumpRefusal::kBadHeader});
  cases.push_back({"header of 1 MiB", JitDumpImage(0x4A695444, 1, 1 << 20).bytes().substr(0, 40),
                   JitDumpRefusal::kBadHeader});
  {
    JitDumpImage image;
    image.CodeLoad(0x1000, 16, "ok");
    image.Put32(0);
    image.Put32(8);  // a record smaller than its prefix
    image.Put64(0);
    cases.push_back({"record of 8 bytes", image.bytes(), JitDumpRefusal::kBadRecord});
  }
  {
    JitDumpImage image;
    image.Put32(0);
    image.Put32(0xfffffff0);  // 4 GiB
    image.Put64(0);
    cases.push_back({"record of 4 GiB", image.bytes(), JitDumpRefusal::kBadRecord});
  }
  {
    JitDumpImage image;  // code_size bigger than its record
    image.Put32(0);
    image.Put32(16 + 40 + 4);
    image.Put64(0);
    image.Put32(1);
    image.Put32(1);
    image.Put64(0x1000);
    image.Put64(0x1000);
    image.Put64(uint64_t{1} << 40);
    image.Put64(0);
    image.Raw(std::string("abc\0", 4));
    cases.push_back({"code bigger than its record", image.bytes(), JitDumpRefusal::kBadRecord});
  }
  {
    JitDumpImage image;  // a debug info claiming a billion entries
    image.Put32(2);
    image.Put32(16 + 16 + 17);
    image.Put64(0);
    image.Put64(0x1000);
    image.Put64(1'000'000'000);
    image.Raw(std::string(17, 'a'));
    cases.push_back({"debug info with absurd count", image.bytes(), JitDumpRefusal::kBadRecord});
  }
  {
    JitDumpImage image;  // a debug entry's file name runs off the record
    image.Put32(2);
    image.Put32(16 + 16 + 17);
    image.Put64(0);
    image.Put64(0x1000);
    image.Put64(1);
    image.Put64(0x1040);
    image.Put32(1);
    image.Put32(0);
    image.Raw("x");
    image.Raw(std::string("\0\0\0\0", 4));  // bytes after the record
    cases.push_back({"debug file name without end", image.bytes(), JitDumpRefusal::kBadRecord});
  }
  {
    JitDumpImage image;  // a move record too short for its fields
    image.Put32(1);
    image.Put32(24);
    image.Put64(0);
    image.Put64(0);
    cases.push_back({"short move", image.bytes(), JitDumpRefusal::kBadRecord});
  }
  return cases;
}

TEST(JitDumpTest, CorruptDumpsAreRefusedAndCounted) {
  for (const Corrupt& c : CorruptDumps()) {
    SCOPED_TRACE(c.what);
    const uint64_t before = JitDumpRefusalCount(c.refusal);
    JitDump dump;
    ReadAll(dump, c.bytes);
    EXPECT_EQ(dump.refusal(), c.refusal);
    EXPECT_EQ(JitDumpRefusalCount(c.refusal), before + 1);
    // Refused for good: reading again changes nothing and counts nothing.
    ReadAll(dump, c.bytes);
    EXPECT_EQ(JitDumpRefusalCount(c.refusal), before + 1);
  }
  // What was read before a bad record stays.
  JitDumpImage image;
  image.CodeLoad(0x1000, 16, "JS:good").Raw(std::string("\0\0\0\0\x08\0\0\0\0\0\0\0\0\0\0\0", 16));
  JitDump dump;
  ReadAll(dump, image.bytes());
  EXPECT_EQ(dump.refusal(), JitDumpRefusal::kBadRecord);
  EXPECT_EQ(NameAt(dump, 0x1008), "JS:good");
}

TEST(JitDumpTest, NamesAndLinesStayWithinTheLimits) {
  PerfMapLimits limits;
  limits.max_bytes = 64 << 10;
  limits.max_line_bytes = 200;
  JitDumpImage image;
  for (int i = 0; i < 2000; ++i) {
    const uint64_t addr = 0x100000 + i * 0x100;
    image
        .DebugInfo(addr, {{addr + 64, static_cast<uint32_t>(i),
                           "/srv/a-long-file-name-" + std::string(40, 'x') + ".js"}})
        .CodeLoad(addr, 0x100, "JS:f" + std::to_string(i) + std::string(60, 'y'));
  }
  image.CodeLoad(0x900000, 0x10, std::string(300, 'n'));  // a name over max_line_bytes
  JitDump dump(limits, JitDumpWriter::kV8);
  ReadAll(dump, image.bytes());
  EXPECT_EQ(dump.refusal(), JitDumpRefusal::kNone);
  EXPECT_LE(dump.names().EstimatedBytes(), limits.max_bytes);
  EXPECT_LE(dump.EstimatedBytes(), limits.max_bytes + limits.max_bytes / 4);
  EXPECT_GT(dump.names().stats().evictions, 0u);
  EXPECT_GT(dump.stats().line_evictions, 0u);
  EXPECT_EQ(dump.names().stats().long_lines, 1u);
  // The newest code stays named, with its line.
  EXPECT_EQ(NameAt(dump, 0x100000 + 1999 * 0x100), "JS:f1999" + std::string(60, 'y'));
  EXPECT_EQ(LineAt(dump, 0x100000 + 1999 * 0x100 + 8),
            "/srv/a-long-file-name-" + std::string(40, 'x') + ".js:1999");
}

class JitDumpFileTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(temp_.path().empty()); }
  void Append(const std::string& bytes) { testing::WriteFile(path_, bytes, /*append=*/true); }
  const testing::TempDir temp_{"ember-jitdump"};
  const std::string path_ = temp_.path() + "/jit-4242.dump";
};

TEST_F(JitDumpFileTest, ReadsWhatIsAppendedAndReadsAReplacedFileAgain) {
  JitDumpFile file(FileLocation(path_), "/tmp/jit-4242.dump");
  EXPECT_EQ(file.Refresh(), JitDumpFile::Result::kMissing);
  JitDumpImage image;
  image.CodeLoad(0x1000, 0x10, "JS:a").CodeLoad(0x2000, 0x10, "JS:b");
  const std::string& bytes = image.bytes();
  const size_t cut = bytes.size() - 5;  // the second record half written
  Append(bytes.substr(0, cut));
  EXPECT_EQ(file.Refresh(), JitDumpFile::Result::kReloaded);
  EXPECT_EQ(NameAt(file.dump(), 0x1000), "JS:a");
  EXPECT_EQ(NameAt(file.dump(), 0x2000), "<none>");
  EXPECT_EQ(file.Refresh(), JitDumpFile::Result::kUnchanged);
  Append(bytes.substr(cut));
  EXPECT_EQ(file.Refresh(), JitDumpFile::Result::kGrew);
  EXPECT_EQ(NameAt(file.dump(), 0x2000), "JS:b");

  // Replaced (a new process with the pid, or a rewrite): read from the start.
  std::filesystem::remove(path_);
  JitDumpImage other;
  other.CodeLoad(0x3000, 0x10, "JS:c");
  Append(other.bytes());
  EXPECT_EQ(file.Refresh(), JitDumpFile::Result::kReloaded);
  EXPECT_EQ(NameAt(file.dump(), 0x1000), "<none>");
  EXPECT_EQ(NameAt(file.dump(), 0x3000), "JS:c");

  // A FIFO in its place is refused by the open, not read.
  std::filesystem::remove(path_);
  ASSERT_EQ(mkfifo(path_.c_str(), 0600), 0);
  EXPECT_EQ(file.Refresh(), JitDumpFile::Result::kMissing);
}

TEST_F(JitDumpFileTest, ARefusedFileIsLoggedOnceAndNotReadAgain) {
  Append(JitDumpImage(0x12345678).CodeLoad(0x1000, 0x10, "JS:a").bytes());
  JitDumpFile file(FileLocation(path_), "/tmp/jit-4242.dump");
  testing::LogCapture log;
  file.Refresh();
  EXPECT_EQ(file.dump().refusal(), JitDumpRefusal::kBadMagic);
  Append(JitDumpImage().CodeLoad(0x2000, 0x10, "JS:b").bytes().substr(40));
  EXPECT_EQ(file.Refresh(), JitDumpFile::Result::kUnchanged);
  EXPECT_EQ(NameAt(file.dump(), 0x1000), "<none>");
  ASSERT_EQ(log.lines().size(), 1u) << log.text();
  EXPECT_NE(log.lines()[0].find("bad_magic at byte 0"), std::string::npos) << log.text();
}

}  // namespace
}  // namespace ember
