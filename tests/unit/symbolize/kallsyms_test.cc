// Tests of the /proc/kallsyms parser on fixtures under tests/data/kallsyms.
#include "symbolize/kallsyms.h"

#include <gtest/gtest.h>

#include <string>

namespace ember {
namespace {

const std::string kDataDir = std::string(EMBER_TEST_DATA_DIR) + "/kallsyms/";

TEST(KernelSymbolsTest, LoadsTextSymbolsAndSkipsJunk) {
  absl::StatusOr<KernelSymbols> symbols = KernelSymbols::Load(kDataDir + "kallsyms.txt");
  ASSERT_TRUE(symbols.ok()) << symbols.status();
  // 8 vmlinux text symbols (t/T/w/W) + 3 module text symbols; A/D/r/b/d and junk lines skipped.
  EXPECT_EQ(symbols->size(), 11u);
}

TEST(KernelSymbolsTest, LookupFindsGreatestSymbolAtOrBelow) {
  absl::StatusOr<KernelSymbols> symbols = KernelSymbols::Load(kDataDir + "kallsyms.txt");
  ASSERT_TRUE(symbols.ok()) << symbols.status();

  EXPECT_EQ(symbols->Lookup(0xffffffff80ffffffULL), nullptr);

  const KernelSymbol* first = symbols->Lookup(0xffffffff81000000ULL);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->name, "_stext");  // first listed of two at one address
  EXPECT_EQ(first->module, "");

  const KernelSymbol* verify = symbols->Lookup(0xffffffff810001a5ULL);
  ASSERT_NE(verify, nullptr);
  EXPECT_EQ(verify->name, "verify_cpu");
  EXPECT_EQ(verify->address, 0xffffffff810001a0ULL);

  const KernelSymbol* weak = symbols->Lookup(0xffffffff81002150ULL);
  ASSERT_NE(weak, nullptr);
  EXPECT_EQ(weak->name, "weak_function");
  const KernelSymbol* local_weak = symbols->Lookup(0xffffffff81002250ULL);
  ASSERT_NE(local_weak, nullptr);
  EXPECT_EQ(local_weak->name, "local_weak_function");

  // Data symbols are not candidates: an address past some_data belongs to local_weak_function.
  const KernelSymbol* past_data = symbols->Lookup(0xffffffff81002350ULL);
  ASSERT_NE(past_data, nullptr);
  EXPECT_EQ(past_data->name, "local_weak_function");
}

TEST(KernelSymbolsTest, ModuleSymbolsCarryTheirModule) {
  absl::StatusOr<KernelSymbols> symbols = KernelSymbols::Load(kDataDir + "kallsyms.txt");
  ASSERT_TRUE(symbols.ok()) << symbols.status();
  const KernelSymbol* foo = symbols->Lookup(0xffffffffc0a01010ULL);
  ASSERT_NE(foo, nullptr);
  EXPECT_EQ(foo->name, "ext4_foo");
  EXPECT_EQ(foo->module, "ext4");
  const KernelSymbol* bar = symbols->Lookup(0xffffffffc0a02010ULL);  // past ext4_data
  ASSERT_NE(bar, nullptr);
  EXPECT_EQ(bar->name, "ext4_bar");
  const KernelSymbol* xfs = symbols->Lookup(0xffffffffc0b00001ULL);
  ASSERT_NE(xfs, nullptr);
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

}  // namespace
}  // namespace ember
