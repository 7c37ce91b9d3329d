// Tests of the /proc/kallsyms parser on fixtures under tests/data/kallsyms.
#include "symbolize/kallsyms.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

namespace ember {
namespace {

const std::string kDataDir = std::string(EMBER_TEST_DATA_DIR) + "/kallsyms/";

// A file of this test's own in the test's temporary folder, removed at the end of its scope.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& text)
      : path_(testing::TempDir() + name + "_" + std::to_string(getpid())) {
    Write(text);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  void Write(const std::string& text) { std::ofstream(path_) << text; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(KernelSymbolsTest, LoadsTextSymbolsAndSkipsJunk) {
  absl::StatusOr<KernelSymbols> symbols = KernelSymbols::Load(kDataDir + "kallsyms.txt");
  ASSERT_TRUE(symbols.ok()) << symbols.status();
  // 8 vmlinux text symbols (t/T/w/W) + 3 module text symbols; A/D/r/b/d and junk lines skipped.
  EXPECT_EQ(symbols->size(), 11u);
}

TEST(KernelSymbolsTest, LookupFindsGreatestSymbolAtOrBelow) {
  absl::StatusOr<KernelSymbols> symbols = KernelSymbols::Load(kDataDir + "kallsyms.txt");
  ASSERT_TRUE(symbols.ok()) << symbols.status();

  EXPECT_FALSE(symbols->Lookup(0xffffffff80ffffffULL).has_value());

  std::optional<KernelSymbol> first = symbols->Lookup(0xffffffff81000000ULL);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->name, "_stext");  // first listed of two at one address
  EXPECT_EQ(first->module, "");

  std::optional<KernelSymbol> verify = symbols->Lookup(0xffffffff810001a5ULL);
  ASSERT_TRUE(verify.has_value());
  EXPECT_EQ(verify->name, "verify_cpu");
  EXPECT_EQ(verify->address, 0xffffffff810001a0ULL);

  std::optional<KernelSymbol> weak = symbols->Lookup(0xffffffff81002150ULL);
  ASSERT_TRUE(weak.has_value());
  EXPECT_EQ(weak->name, "weak_function");
  std::optional<KernelSymbol> local_weak = symbols->Lookup(0xffffffff81002250ULL);
  ASSERT_TRUE(local_weak.has_value());
  EXPECT_EQ(local_weak->name, "local_weak_function");

  // Data symbols are not candidates: an address past some_data belongs to local_weak_function.
  std::optional<KernelSymbol> past_data = symbols->Lookup(0xffffffff81002350ULL);
  ASSERT_TRUE(past_data.has_value());
  EXPECT_EQ(past_data->name, "local_weak_function");
}

TEST(KernelSymbolsTest, ModuleSymbolsCarryTheirModule) {
  absl::StatusOr<KernelSymbols> symbols = KernelSymbols::Load(kDataDir + "kallsyms.txt");
  ASSERT_TRUE(symbols.ok()) << symbols.status();
  std::optional<KernelSymbol> foo = symbols->Lookup(0xffffffffc0a01010ULL);
  ASSERT_TRUE(foo.has_value());
  EXPECT_EQ(foo->name, "ext4_foo");
  EXPECT_EQ(foo->module, "ext4");
  std::optional<KernelSymbol> bar = symbols->Lookup(0xffffffffc0a02010ULL);  // past ext4_data
  ASSERT_TRUE(bar.has_value());
  EXPECT_EQ(bar->name, "ext4_bar");
  std::optional<KernelSymbol> xfs = symbols->Lookup(0xffffffffc0b00001ULL);
  ASSERT_TRUE(xfs.has_value());
  EXPECT_EQ(xfs->name, "xfs_baz");
  EXPECT_EQ(xfs->module, "xfs");
}

TEST(KernelSymbolsTest, AllZeroAddressesIsAnErrorThatExplainsTheFix) {
  absl::StatusOr<KernelSymbols> symbols = KernelSymbols::Load(kDataDir + "kallsyms_restricted.txt");
  ASSERT_FALSE(symbols.ok());
  EXPECT_EQ(symbols.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(symbols.status().message().find("kptr_restrict"), absl::string_view::npos)
      << symbols.status();
}

TEST(KernelSymbolsTest, MissingFileAndEmptyTextAreErrors) {
  absl::StatusOr<KernelSymbols> missing = KernelSymbols::Load(kDataDir + "does_not_exist.txt");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("does_not_exist.txt"), absl::string_view::npos);
  EXPECT_FALSE(KernelSymbols::Parse("").ok());
  EXPECT_FALSE(KernelSymbols::Parse("garbage\nmore garbage\n").ok());
}

TEST(KernelSymbolsTest, ParsesWithoutTrailingNewline) {
  absl::StatusOr<KernelSymbols> symbols = KernelSymbols::Parse("ffffffff81000000 T _stext");
  ASSERT_TRUE(symbols.ok()) << symbols.status();
  ASSERT_EQ(symbols->size(), 1u);
  EXPECT_EQ(symbols->Lookup(0xffffffff81000001ULL)->name, "_stext");
}

// A file the size of a real one is read in pieces; a line a piece boundary cuts must come out
// whole, as Parse of the same text gives it.
TEST(KernelSymbolsTest, LoadReadsALargeFileAsParseReadsItsText) {
  std::string text;
  for (int i = 0; i < 40000; ++i) {
    const uint64_t address = 0xffffffff81000000ULL + uint64_t(i) * 0x40;
    char line[160];
    // Names of varied length, some data symbols, and module symbols at the end.
    std::snprintf(line, sizeof(line), "%016llx %c %s_%0*d%s\n",
                  static_cast<unsigned long long>(address), i % 7 == 3 ? 'd' : "tTwW"[i % 4],
                  i % 2 ? "do_sys" : "x", 1 + i % 23, i, i >= 39000 ? "\t[ext4]" : "");
    text += line;
  }
  TempFile file("kallsyms_large", text);
  absl::StatusOr<KernelSymbols> loaded = KernelSymbols::Load(file.path());
  absl::StatusOr<KernelSymbols> parsed = KernelSymbols::Parse(text);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_GT(text.size(), 1u << 20);
  EXPECT_EQ(loaded->size(), parsed->size());
  EXPECT_EQ(loaded->size(), 40000u - 40000u / 7);
  for (int i = 0; i < 40000; ++i) {
    const uint64_t address = 0xffffffff81000000ULL + uint64_t(i) * 0x40 + 1;
    std::optional<KernelSymbol> from_file = loaded->Lookup(address);
    std::optional<KernelSymbol> from_text = parsed->Lookup(address);
    ASSERT_TRUE(from_file.has_value() && from_text.has_value()) << i;
    ASSERT_EQ(from_file->name, from_text->name) << i;
    ASSERT_EQ(from_file->module, from_text->module) << i;
  }
  EXPECT_EQ(loaded->Lookup(0xffffffff81000000ULL + 39001 * 0x40)->module, "ext4");
}

// A line far longer than any symbol's is dropped whole (its end, which reads like a symbol, too),
// and the lines around it are read.
TEST(KernelSymbolsTest, LoadDropsAnOverlongLineAndKeepsItsNeighbours) {
  const std::string text = "ffffffff81000000 T before\nffffffff81000100 T " +
                           std::string(size_t{1} << 20, ' ') +
                           "ffffffff81000180 T end_of_the_long_line\nffffffff81000200 T after\n";
  TempFile file("kallsyms_long", text);
  absl::StatusOr<KernelSymbols> loaded = KernelSymbols::Load(file.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->size(), 2u);
  EXPECT_EQ(loaded->Lookup(0xffffffff81000190ULL)->name, "before");
  EXPECT_EQ(loaded->Lookup(0xffffffff81000200ULL)->name, "after");
}

// Read again, the kept file gives what it holds now (the agent reads /proc/kallsyms again as
// modules come and go, through the file it opened while it could see the addresses).
TEST(KallsymsFileTest, EachReadGivesTheFileAsItIsNow) {
  TempFile text("kallsyms_reread", "ffffffff81000000 T _stext\n");
  absl::StatusOr<KallsymsFile> file = KallsymsFile::Open(text.path());
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<KernelSymbols> first = file->Read();
  text.Write("ffffffff81000000 T _stext\nffffffffc0a01000 t nf_hook_slow\t[nf_tables]\n");
  absl::StatusOr<KernelSymbols> second = file->Read();
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->size(), 1u);
  ASSERT_EQ(second->size(), 2u);
  EXPECT_EQ(second->Lookup(0xffffffffc0a01000ULL)->module, "nf_tables");
  EXPECT_FALSE(*first == *second);
  EXPECT_TRUE(first->PastKernelImage(0xffffffffc0a01000ULL));
  EXPECT_FALSE(first->PastKernelImage(0xffffffff81000000ULL));
}

}  // namespace
}  // namespace ember
