// VdsoImage on the kernel's real vDSO image (this test's own), checked against binutils' nm and
// readelf on a copy of it, and on a 32-bit image.
#include "symbolize/vdso.h"

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "support/nm_symbols.h"
#include "support/temp_dir.h"

namespace ember {
namespace {

using ::ember::testing::CommandOutput;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

using ::ember::testing::NmSymbol;

// Defined dynamic symbols with sizes, by name, as nm prints them.
std::map<std::string, NmSymbol> DynamicSymbols(const std::string& path) {
  std::map<std::string, NmSymbol> symbols;
  for (const NmSymbol& symbol :
       ::ember::testing::NmSymbols(path, {.dynamic = true, .sized_only = true})) {
    // Versioned names (__vdso_time@@LINUX_2.6) without their version.
    symbols[symbol.name.substr(0, symbol.name.find('@'))] = symbol;
  }
  return symbols;
}

// The file offset of ELF address `address`, from readelf's first LOAD segment.
uint64_t OffsetOf(const std::string& path, uint64_t address) {
  for (absl::string_view line :
       absl::StrSplit(CommandOutput(std::string(EMBER_READELF) + " -lW " + path), '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 3 || f[0] != "LOAD") continue;
    uint64_t offset = 0, vaddr = 0;
    EXPECT_TRUE(absl::SimpleHexAtoi(f[1], &offset) && absl::SimpleHexAtoi(f[2], &vaddr));
    return address - vaddr + offset;
  }
  ADD_FAILURE() << "no LOAD segment in " << path;
  return 0;
}

class VdsoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> own = VdsoImage::OwnImageBytes();
    ASSERT_TRUE(own.ok()) << own.status();
    bytes_ = *own;
    ASSERT_FALSE(dir_.path().empty());
    ::ember::testing::WriteFile(path_, bytes_);
  }
  std::string bytes_;
  const ::ember::testing::TempDir dir_{"ember-vdso"};
  const std::string path_ = dir_.path() + "/vdso.so";
};

TEST_F(VdsoTest, NamesEveryFunctionOfTheRealImageAsNmDoes) {
  absl::StatusOr<std::unique_ptr<VdsoImage>> image =
      VdsoImage::Parse(bytes_ + std::string(4096, 0));
  ASSERT_TRUE(image.ok()) << image.status();
  const std::map<std::string, NmSymbol> symbols = DynamicSymbols(path_);
  ASSERT_TRUE(symbols.count("__vdso_clock_gettime")) << "nm found no __vdso_clock_gettime";
  int checked = 0;
  for (const auto& [name, symbol] : symbols) {
    if (name.rfind("__vdso_", 0) != 0 || symbol.size < 2) continue;
    const uint64_t offset = OffsetOf(path_, symbol.address);
    for (uint64_t at : {offset, offset + symbol.size / 2, offset + symbol.size - 1}) {
      std::optional<absl::string_view> found = (*image)->Symbolize(at);
      ASSERT_TRUE(found.has_value()) << name << " at +" << at;
      EXPECT_EQ(*found, name);
      EXPECT_EQ((*image)->ToElfAddress(at), symbol.address + (at - offset));
    }
    ++checked;
  }
  EXPECT_GE(checked, 3);  // clock_gettime, gettimeofday, time, getcpu, ...
  // The kernel's name wins over its alias at the same address.
  ASSERT_TRUE(symbols.count("clock_gettime"));
  EXPECT_EQ(symbols.at("clock_gettime").address, symbols.at("__vdso_clock_gettime").address);
  const std::string build_id = CommandOutput(std::string(EMBER_READELF) + " -n " + path_);
  if (!(*image)->build_id().empty()) {
    EXPECT_NE(build_id.find((*image)->build_id()), std::string::npos) << build_id;
  }
  EXPECT_FALSE((*image)->identity().empty());
  EXPECT_FALSE((*image)->Symbolize(bytes_.size() + 100).has_value());  // past the image
  EXPECT_FALSE((*image)->Symbolize(0).has_value());                    // the ELF header
}

TEST_F(VdsoTest, A32BitImageIsNamedFromItsOwnSymbols) {
  const std::string path = std::string(EMBER_SYMBOLIZE_FIXTURE_DIR) + "/vdso32_like.so";
  absl::StatusOr<std::unique_ptr<VdsoImage>> image = VdsoImage::Parse(ReadAll(path));
  ASSERT_TRUE(image.ok()) << image.status();
  const std::map<std::string, NmSymbol> symbols = DynamicSymbols(path);
  ASSERT_TRUE(symbols.count("__vdso_time"));
  const uint64_t time_offset = OffsetOf(path, symbols.at("__vdso_time").address);
  EXPECT_EQ((*image)->Symbolize(time_offset), "__vdso_time");
  const uint64_t clock_offset = OffsetOf(path, symbols.at("__vdso_clock_gettime").address);
  EXPECT_EQ((*image)->Symbolize(clock_offset + 1), "__vdso_clock_gettime");
  EXPECT_NE((*image)->identity(), (*VdsoImage::Parse(bytes_))->identity());
}

TEST_F(VdsoTest, ImagesAreParsedOncePerContentAndBadBytesAreRefused) {
  VdsoImages images;
  std::shared_ptr<const VdsoImage> first = images.Find(bytes_ + std::string(100, 0));
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(images.Find(bytes_ + std::string(100, 0)), first);
  EXPECT_EQ(images.size(), 1u);
  // The same image with one changed byte in its code is another image.
  std::string changed = bytes_;
  changed[changed.size() / 2] ^= 0x5a;
  std::shared_ptr<const VdsoImage> other = images.Find(changed);
  EXPECT_NE(other, first);

  EXPECT_EQ(images.Find(""), nullptr);
  EXPECT_EQ(images.Find(std::string(8192, 0)), nullptr);
  EXPECT_EQ(images.Find(bytes_.substr(0, 64)), nullptr);       // headers only
  EXPECT_EQ(images.Find(bytes_.substr(0, 1000)), nullptr);     // cut before its sections
  EXPECT_EQ(images.Find(std::string(2 << 20, 'x')), nullptr);  // far too big
  EXPECT_EQ(images.refusals(), 5u);
  // Cut anywhere, the image is refused or parsed, never read past its end (ASan tier).
  for (size_t size = 0; size < bytes_.size(); size += 97) {
    (void)VdsoImage::Parse(bytes_.substr(0, size));
  }
}

// The bytes come from a process's memory: an image that keeps the kernel's build-id note and
// renames a function is another image, never taken for the kernel's.
TEST_F(VdsoTest, AnImageIsItsBytesNotItsBuildId) {
  std::string renamed = bytes_;
  const size_t at = renamed.find(std::string("__vdso_time\0", 12));
  ASSERT_NE(at, std::string::npos);
  renamed.replace(at, 11, "__vdso_pwnd");
  VdsoImages images;
  std::shared_ptr<const VdsoImage> kernel = images.Find(bytes_);
  std::shared_ptr<const VdsoImage> rewritten = images.Find(renamed);
  ASSERT_NE(kernel, nullptr);
  ASSERT_NE(rewritten, nullptr);
  EXPECT_EQ(rewritten->build_id(), kernel->build_id());
  EXPECT_NE(rewritten->identity(), kernel->identity());
  EXPECT_NE(rewritten->serial(), kernel->serial());
  EXPECT_EQ(images.Find(bytes_ + std::string(4096, 0)), kernel);
  EXPECT_EQ(images.Find(renamed), rewritten);
}

// Images no process holds make room for new ones, least recently found first; one that a process
// holds is never displaced, and a new image that finds every slot held is not kept.
TEST_F(VdsoTest, FullTableKeepsTheImagesProcessesHold) {
  auto variant = [&](char c) {
    std::string bytes = bytes_;
    bytes[bytes.size() / 2] ^= c;
    return bytes;
  };
  VdsoImages images(2);
  std::shared_ptr<const VdsoImage> kernel = images.Find(bytes_);  // held, as a process would
  ASSERT_NE(kernel, nullptr);
  const uint64_t first_other = images.Find(variant(1))->serial();  // released at once
  EXPECT_EQ(images.size(), 2u);
  std::shared_ptr<const VdsoImage> second = images.Find(variant(2));  // takes the free slot
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(images.Find(bytes_), kernel);
  EXPECT_EQ(images.Find(variant(2)), second);
  EXPECT_NE(images.Find(variant(1))->serial(), first_other);  // it went: parsed again
  // Both slots held: a third image is handed out, not kept, and displaces neither.
  std::shared_ptr<const VdsoImage> third = images.Find(variant(3));
  ASSERT_NE(third, nullptr);
  EXPECT_NE(images.Find(variant(3)), third);
  EXPECT_EQ(images.Find(bytes_), kernel);
  EXPECT_EQ(images.Find(variant(2)), second);
  EXPECT_EQ(images.size(), 2u);
}

}  // namespace
}  // namespace ember
