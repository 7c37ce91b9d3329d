// BuildUnwindTable on this machine's libc and on this test's own binary, checked address by
// address against libdw's row for the same address; and on files with a missing or damaged
// .eh_frame_hdr, which must give an error, never a crash or a wrong table.
#include "unwind/unwind_table.h"

#include <elfutils/libdw.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ember {
namespace {

bool SameRule(const ember_unwind_row& a, const ember_unwind_row& b) {
  return a.kind == b.kind && a.cfa_offset == b.cfa_offset && a.bp_offset == b.bp_offset &&
         a.bp_rule == b.bp_rule;
}

std::string Describe(const ember_unwind_row& row) {
  char text[128];
  std::snprintf(text, sizeof(text), "{pc 0x%llx kind %d cfa_offset %d bp_rule %d bp_offset %d}",
                static_cast<unsigned long long>(row.pc), row.kind, row.cfa_offset, row.bp_rule,
                row.bp_offset);
  return text;
}

// What the BPF walk does: the last row with pc <= address, nullptr before the first.
const ember_unwind_row* Lookup(const std::vector<ember_unwind_row>& table, uint64_t address) {
  auto after =
      std::upper_bound(table.begin(), table.end(), address,
                       [](uint64_t value, const ember_unwind_row& row) { return value < row.pc; });
  return after == table.begin() ? nullptr : &*(after - 1);
}

std::string LibcPath() {
  std::string path;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        if (std::strstr(info->dlpi_name, "/libc.so") == nullptr) return 0;
        *static_cast<std::string*>(out) = info->dlpi_name;
        return 1;
      },
      &path);
  return path;
}

std::string SelfPath() { return std::filesystem::read_symlink("/proc/self/exe"); }

struct Built {
  std::shared_ptr<ElfImage> image;
  std::vector<ember_unwind_row> table;
  UnwindTableStats stats;
  double milliseconds = 0;
};

Built Build(const std::string& path) {
  Built built;
  auto image = ElfImage::Open(path);
  EXPECT_TRUE(image.ok()) << image.status();
  if (!image.ok()) return built;
  built.image = *image;
  const auto start = std::chrono::steady_clock::now();
  auto table = BuildUnwindTable(*built.image, &built.stats);
  built.milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(table.ok()) << table.status();
  if (table.ok()) built.table = *std::move(table);
  return built;
}

// What a table must hold for any file: ascending, merged, closed by a NONE row.
void ExpectWellFormed(const std::vector<ember_unwind_row>& table, const UnwindTableStats& stats) {
  ASSERT_FALSE(table.empty());
  size_t none = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].kind == EMBER_UNWIND_ROW_NONE) {
      ++none;
      EXPECT_EQ(table[i].cfa_offset, 0) << Describe(table[i]);
    }
    if (i == 0) continue;
    ASSERT_LT(table[i - 1].pc, table[i].pc) << "row " << i;
    ASSERT_FALSE(SameRule(table[i - 1], table[i])) << "row " << i << " not merged";
  }
  EXPECT_EQ(stats.rows_none, none);
  EXPECT_GT(stats.fdes, 0u);
  // The last FDE ends somewhere, and no other starts there.
  EXPECT_EQ(table.back().kind, EMBER_UNWIND_ROW_NONE);
}

struct Agreement {
  size_t checked = 0;
  size_t uncovered = 0;   // addresses no FDE covers
  size_t applicable = 0;  // random covered addresses on CFA_SP/CFA_BP rows
  size_t covered_random = 0;
};

// Looks every address up in the table and in libdw, which must agree on the row.
Agreement CompareWithLibdw(const Built& built, const std::vector<uint64_t>& addresses,
                           size_t random_from) {
  Agreement agreement;
  Dwarf_CFI* cfi = dwarf_getcfi_elf(built.image->elf());
  EXPECT_NE(cfi, nullptr) << dwarf_errmsg(-1);
  if (cfi == nullptr) return agreement;
  int mismatches = 0;
  for (size_t i = 0; i < addresses.size(); ++i) {
    const uint64_t address = addresses[i];
    const ember_unwind_row* found = Lookup(built.table, address);
    Dwarf_Frame* frame = nullptr;
    ++agreement.checked;
    if (dwarf_cfi_addrframe(cfi, address, &frame) != 0) {
      ++agreement.uncovered;
      if (found != nullptr && found->kind != EMBER_UNWIND_ROW_NONE && ++mismatches <= 10) {
        ADD_FAILURE() << "0x" << std::hex << address << " has no FDE but finds "
                      << Describe(*found);
      }
      continue;
    }
    const ember_unwind_row expected =
        UnwindRowOf(CompactRowOf(frame, RowRegisters::kWalk), address);
    std::free(frame);
    if (found == nullptr || !SameRule(*found, expected)) {
      if (++mismatches <= 10) {
        ADD_FAILURE() << "0x" << std::hex << address << ": libdw's row is " << Describe(expected)
                      << ", the table's " << (found ? Describe(*found) : "none");
      }
      continue;
    }
    if (i >= random_from) {
      ++agreement.covered_random;
      if (found->kind == EMBER_UNWIND_ROW_CFA_SP || found->kind == EMBER_UNWIND_ROW_CFA_BP) {
        ++agreement.applicable;
      }
    }
  }
  dwarf_cfi_end(cfi);
  EXPECT_EQ(mismatches, 0);
  return agreement;
}

// NONE rows inside an FDE: CFI the walk cannot apply, as against the gaps between FDEs.
size_t NoneRowsInsideFdes(const Built& built) {
  Dwarf_CFI* cfi = dwarf_getcfi_elf(built.image->elf());
  if (cfi == nullptr) return 0;
  size_t inside = 0;
  for (const ember_unwind_row& row : built.table) {
    Dwarf_Frame* frame = nullptr;
    if (row.kind != EMBER_UNWIND_ROW_NONE || dwarf_cfi_addrframe(cfi, row.pc, &frame) != 0)
      continue;
    std::free(frame);
    ++inside;
  }
  dwarf_cfi_end(cfi);
  return inside;
}

// Both sides of every row boundary, then `random` addresses over the table's span and a little
// beyond it (fixed seed): the index of the first random one goes to *random_from.
std::vector<uint64_t> Addresses(const std::vector<ember_unwind_row>& table, size_t random,
                                size_t* random_from) {
  std::vector<uint64_t> addresses;
  for (const ember_unwind_row& row : table) {
    addresses.push_back(row.pc - 1);
    addresses.push_back(row.pc);
  }
  *random_from = addresses.size();
  std::mt19937_64 generator(20240611);
  std::uniform_int_distribution<uint64_t> spread(table.front().pc, table.back().pc + 256);
  for (size_t i = 0; i < random; ++i) addresses.push_back(spread(generator));
  return addresses;
}

TEST(UnwindTableTest, LibcRowsAgreeWithLibdwAndMostAreApplicable) {
  const std::string libc = LibcPath();
  ASSERT_FALSE(libc.empty()) << "libc not among this process's objects";
  const Built built = Build(libc);
  ASSERT_NO_FATAL_FAILURE(ExpectWellFormed(built.table, built.stats));

  size_t random_from = 0;
  const std::vector<uint64_t> addresses = Addresses(built.table, 20000, &random_from);
  const Agreement agreement = CompareWithLibdw(built, addresses, random_from);
  EXPECT_EQ(Lookup(built.table, built.table.front().pc - 1), nullptr);
  EXPECT_GT(agreement.uncovered, 0u);  // the NONE rows were looked at too
  ASSERT_GT(agreement.covered_random, 1000u);
  const double share = static_cast<double>(agreement.applicable) / agreement.covered_random;
  // Debian's libc is built without frame pointers: these rows are what lets the walk through it.
  EXPECT_GE(share, 0.9);
  std::printf(
      "[   INFO   ] %s: %zu rows (%zu NONE, %.1f%%, %zu of them inside FDEs) from %zu FDEs, %zu "
      "bytes, built in %.1f ms; %.1f%% of %zu random covered addresses on applicable rows; %zu "
      "addresses checked\n",
      libc.c_str(), built.table.size(), built.stats.rows_none,
      100.0 * built.stats.rows_none / built.table.size(), NoneRowsInsideFdes(built),
      built.stats.fdes, built.table.size() * sizeof(ember_unwind_row), built.milliseconds,
      100.0 * share, agreement.covered_random, agreement.checked);
}

// The BPF walk's lookup through the buckets (bpf/cfi_walk.bpf.h, unwind__row): the bucket's row,
// then the rows up to the next bucket's. nullptr before the first row.
const ember_unwind_row* LookupByBuckets(const std::vector<ember_unwind_row>& table,
                                        const UnwindBuckets& buckets, uint64_t address,
                                        size_t* looked_at) {
  if (table.empty() || address < buckets.base) return nullptr;
  const uint64_t bucket = (address - buckets.base) >> buckets.shift;
  size_t found = table.size() - 1;
  size_t end = table.size();
  if (bucket < buckets.first_rows.size()) {
    found = buckets.first_rows[bucket];
    if (bucket + 1 < buckets.first_rows.size()) end = buckets.first_rows[bucket + 1] + 1;
  }
  *looked_at = end - found;
  while (found + 1 < end && table[found + 1].pc <= address) ++found;
  return &table[found];
}

TEST(UnwindBucketsTest, LookupsThroughTheBucketsFindTheRowInForce) {
  const std::string libc = LibcPath();
  ASSERT_FALSE(libc.empty());
  const Built built = Build(libc);
  ASSERT_FALSE(built.table.empty());
  const UnwindBuckets buckets = BucketsOf(built.table);
  ASSERT_FALSE(buckets.first_rows.empty());
  EXPECT_LE(buckets.first_rows.size(), built.table.size());  // room: at the rows' own place
  EXPECT_EQ(buckets.base, built.table.front().pc);

  size_t random_from = 0;
  const std::vector<uint64_t> addresses = Addresses(built.table, 20000, &random_from);
  size_t most_looked_at = 0;
  double looked_at_sum = 0;
  for (size_t i = 0; i < addresses.size(); ++i) {
    size_t looked_at = 0;
    const ember_unwind_row* by_buckets =
        LookupByBuckets(built.table, buckets, addresses[i], &looked_at);
    ASSERT_EQ(by_buckets, Lookup(built.table, addresses[i])) << std::hex << addresses[i];
    // Row boundaries crowd where rows are dense: the random addresses say what a sample meets.
    if (i < random_from) continue;
    most_looked_at = std::max(most_looked_at, looked_at);
    looked_at_sum += looked_at;
  }
  // Few rows per bucket: the BPF walk looks at two in turn before it searches.
  const double mean = looked_at_sum / (addresses.size() - random_from);
  std::printf(
      "[   INFO   ] buckets of %d bytes: %zu for %zu rows; rows per lookup mean %.2f, "
      "most %zu\n",
      1 << buckets.shift, buckets.first_rows.size(), built.table.size(), mean, most_looked_at);
  EXPECT_LE(mean, 4.0);
}

TEST(UnwindBucketsTest, EmptyAndSingleRowTables) {
  EXPECT_TRUE(BucketsOf({}).first_rows.empty());
  ember_unwind_row row{};
  row.pc = 0x1000;
  const UnwindBuckets one = BucketsOf({row});
  ASSERT_EQ(one.first_rows.size(), 1u);
  EXPECT_EQ(one.first_rows[0], 0u);
  EXPECT_EQ(one.base, 0x1000u);
}

TEST(UnwindTableTest, OwnBinaryRowsAgreeWithLibdw) {
  const Built built = Build(SelfPath());
  ASSERT_NO_FATAL_FAILURE(ExpectWellFormed(built.table, built.stats));
  size_t random_from = 0;
  const std::vector<uint64_t> addresses = Addresses(built.table, 5000, &random_from);
  const Agreement agreement = CompareWithLibdw(built, addresses, random_from);
  EXPECT_GT(agreement.covered_random, 0u);
  std::printf("[   INFO   ] own binary: %zu rows (%zu NONE) from %zu FDEs, %.1f ms\n",
              built.table.size(), built.stats.rows_none, built.stats.fdes, built.milliseconds);
}

// The vDSO is an image in memory, not a file: its table comes from the same bytes.
TEST(UnwindTableTest, OwnVdsoRowsAgreeWithLibdw) {
  auto image = ElfImage::OpenOwnVdso();
  // Valgrind, for one, hides the vDSO from its guest.
  if (absl::IsNotFound(image.status())) GTEST_SKIP() << image.status();
  ASSERT_TRUE(image.ok()) << image.status();
  Built built;
  built.image = *image;
  auto table = BuildUnwindTable(*built.image, &built.stats);
  ASSERT_TRUE(table.ok()) << table.status();
  built.table = *std::move(table);
  ASSERT_NO_FATAL_FAILURE(ExpectWellFormed(built.table, built.stats));
  size_t random_from = 0;
  const std::vector<uint64_t> addresses = Addresses(built.table, 2000, &random_from);
  EXPECT_GT(CompareWithLibdw(built, addresses, random_from).covered_random, 0u);
}

TEST(UnwindTableTest, StartOfAnExecutableIsTheOutermostFrame) {
  const Built built = Build(SelfPath());
  ASSERT_FALSE(built.table.empty());
  GElf_Ehdr ehdr;
  ASSERT_NE(gelf_getehdr(built.image->elf(), &ehdr), nullptr);
  // e_entry is _start, whose CFI marks the return address undefined.
  const ember_unwind_row* row = Lookup(built.table, ehdr.e_entry);
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->kind, EMBER_UNWIND_ROW_OUTERMOST) << Describe(*row);
}

// UnwindRowOf on hand-made rows: what each CFI rule becomes for the walk.
CfiRow FramelessRow() {
  CfiRow row;
  row.compact = true;
  row.cfa_register = 7;
  row.cfa_offset = 16;
  for (int i = 0; i < CfiRow::kTrackedCount; ++i) {
    switch (CfiRow::kTracked[i]) {
      case 7:
        row.rules[i] = {.kind = CfiRule::Kind::kCfaPlus, .offset = 0};
        break;
      case 16:
        row.rules[i] = {.kind = CfiRule::Kind::kSavedAt, .offset = -8};
        break;
      default:
        row.rules[i] = {.kind = CfiRule::Kind::kSame};
    }
  }
  return row;
}

CfiRule& RuleOf(CfiRow& row, int reg) {
  for (int i = 0; i < CfiRow::kTrackedCount; ++i) {
    if (CfiRow::kTracked[i] == reg) return row.rules[i];
  }
  std::abort();
}

TEST(UnwindRowOfTest, FramelessRowKeepsTheStackPointerOffset) {
  const ember_unwind_row out = UnwindRowOf(FramelessRow(), 0x1234);
  EXPECT_EQ(out.pc, 0x1234u);
  EXPECT_EQ(out.kind, EMBER_UNWIND_ROW_CFA_SP);
  EXPECT_EQ(out.cfa_offset, 16);
  EXPECT_EQ(out.bp_rule, EMBER_UNWIND_BP_SAME);
  EXPECT_EQ(out.bp_offset, 0);
}

TEST(UnwindRowOfTest, FramePointerRowSavesRbpBelowTheCfa) {
  CfiRow row = FramelessRow();
  row.cfa_register = 6;
  RuleOf(row, 6) = {.kind = CfiRule::Kind::kSavedAt, .offset = -16};
  const ember_unwind_row out = UnwindRowOf(row, 1);
  EXPECT_EQ(out.kind, EMBER_UNWIND_ROW_CFA_BP);
  EXPECT_EQ(out.cfa_offset, 16);
  EXPECT_EQ(out.bp_rule, EMBER_UNWIND_BP_SAVED);
  EXPECT_EQ(out.bp_offset, -16);

  RuleOf(row, 6) = {.kind = CfiRule::Kind::kUndefined};
  EXPECT_EQ(UnwindRowOf(row, 1).bp_rule, EMBER_UNWIND_BP_UNDEFINED);
}

TEST(UnwindRowOfTest, UndefinedReturnAddressIsOutermostAndCarriesNothingElse) {
  CfiRow row = FramelessRow();
  RuleOf(row, 16) = {.kind = CfiRule::Kind::kUndefined};
  const ember_unwind_row out = UnwindRowOf(row, 7);
  EXPECT_EQ(out.kind, EMBER_UNWIND_ROW_OUTERMOST);
  EXPECT_EQ(out.cfa_offset, 0);
  EXPECT_EQ(out.bp_rule, 0);
  EXPECT_EQ(out.bp_offset, 0);
}

TEST(UnwindRowOfTest, RowsTheWalkCannotApplyAreNoneAndCarryNothingElse) {
  struct Case {
    const char* what;
    void (*change)(CfiRow&);
  };
  const Case cases[] = {
      {"not compact", [](CfiRow& row) { row.compact = false; }},
      {"CFA from rbx", [](CfiRow& row) { row.cfa_register = 3; }},
      {"return address at CFA-16",
       [](CfiRow& row) { RuleOf(row, 16) = {.kind = CfiRule::Kind::kSavedAt, .offset = -16}; }},
      {"return address unchanged",
       [](CfiRow& row) { RuleOf(row, 16) = {.kind = CfiRule::Kind::kSame}; }},
      {"rsp saved", [](CfiRow& row) { RuleOf(row, 7) = {.kind = CfiRule::Kind::kSavedAt}; }},
      {"rsp CFA+8",
       [](CfiRow& row) { RuleOf(row, 7) = {.kind = CfiRule::Kind::kCfaPlus, .offset = 8}; }},
      {"rbp the value CFA-16",
       [](CfiRow& row) { RuleOf(row, 6) = {.kind = CfiRule::Kind::kCfaPlus, .offset = -16}; }},
      {"rbp saved beyond int16",
       [](CfiRow& row) { RuleOf(row, 6) = {.kind = CfiRule::Kind::kSavedAt, .offset = -40000}; }},
  };
  for (const Case& c : cases) {
    CfiRow row = FramelessRow();
    c.change(row);
    const ember_unwind_row out = UnwindRowOf(row, 9);
    EXPECT_EQ(out.kind, EMBER_UNWIND_ROW_NONE) << c.what;
    EXPECT_EQ(out.pc, 9u) << c.what;
    EXPECT_EQ(out.cfa_offset, 0) << c.what;
    EXPECT_EQ(out.bp_offset, 0) << c.what;
    EXPECT_EQ(out.bp_rule, 0) << c.what;
  }
}

// Files with a missing or damaged .eh_frame_hdr, made from copies of this test's binary.
class UnwindTableDamagedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/ember-unwind-table-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    copy_ = dir_ + "/copy";
    std::filesystem::copy_file(SelfPath(), copy_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Where .eh_frame_hdr's bytes and its section header's sh_size lie in the copy.
  struct Where {
    uint64_t data = 0;
    uint64_t size_field = 0;
  };
  Where FindHeader() {
    Where where;
    elf_version(EV_CURRENT);
    const int fd = open(copy_.c_str(), O_RDONLY | O_CLOEXEC);
    Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
    GElf_Ehdr ehdr;
    size_t names = 0;
    if (elf != nullptr && gelf_getehdr(elf, &ehdr) != nullptr &&
        elf_getshdrstrndx(elf, &names) == 0) {
      for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
        GElf_Shdr shdr;
        if (gelf_getshdr(scn, &shdr) == nullptr) continue;
        const char* name = elf_strptr(elf, names, shdr.sh_name);
        if (name == nullptr || std::strcmp(name, ".eh_frame_hdr") != 0) continue;
        where.data = shdr.sh_offset;
        where.size_field =
            ehdr.e_shoff + elf_ndxscn(scn) * ehdr.e_shentsize + offsetof(Elf64_Shdr, sh_size);
      }
    }
    elf_end(elf);
    close(fd);
    return where;
  }

  void Patch(uint64_t offset, const void* bytes, size_t size) {
    std::fstream file(copy_, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(offset));
    file.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(size));
    ASSERT_TRUE(file.good());
  }

  // BuildUnwindTable's status on the copy as it is now.
  absl::Status BuildCopy() {
    auto image = ElfImage::Open(copy_);
    if (!image.ok()) return image.status();
    return BuildUnwindTable(**image).status();
  }

  std::string dir_;
  std::string copy_;
};

TEST_F(UnwindTableDamagedFileTest, TheUndamagedCopyBuilds) {
  EXPECT_TRUE(BuildCopy().ok()) << BuildCopy();
}

TEST_F(UnwindTableDamagedFileTest, NoEhFrameHdrSectionIsAnError) {
  const std::string objcopy = EMBER_OBJCOPY;
  ASSERT_FALSE(objcopy.empty()) << "CMake found no objcopy (binutils)";
  const std::string stripped = dir_ + "/no-hdr";
  const std::string command =
      objcopy + " --remove-section .eh_frame_hdr '" + copy_ + "' '" + stripped + "' 2>/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  auto image = ElfImage::Open(stripped);
  ASSERT_TRUE(image.ok()) << image.status();
  const auto table = BuildUnwindTable(**image);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kNotFound) << table.status();
  EXPECT_NE(table.status().message().find(".eh_frame_hdr"), std::string::npos) << table.status();
}

TEST_F(UnwindTableDamagedFileTest, UnknownVersionIsAnError) {
  const Where where = FindHeader();
  ASSERT_NE(where.data, 0u);
  const uint8_t version = 2;
  Patch(where.data, &version, 1);
  EXPECT_EQ(BuildCopy().code(), absl::StatusCode::kUnimplemented) << BuildCopy();
}

TEST_F(UnwindTableDamagedFileTest, UnsupportedTableEncodingIsAnError) {
  const Where where = FindHeader();
  ASSERT_NE(where.data, 0u);
  const uint8_t pcrel_sdata4 = 0x1b;
  Patch(where.data + 3, &pcrel_sdata4, 1);
  EXPECT_EQ(BuildCopy().code(), absl::StatusCode::kUnimplemented) << BuildCopy();
}

TEST_F(UnwindTableDamagedFileTest, FdeCountPastTheSectionIsAnError) {
  const Where where = FindHeader();
  ASSERT_NE(where.data, 0u);
  const uint32_t count = 0x7fffffff;
  Patch(where.data + 8, &count, sizeof(count));
  EXPECT_EQ(BuildCopy().code(), absl::StatusCode::kDataLoss) << BuildCopy();
}

TEST_F(UnwindTableDamagedFileTest, SectionShorterThanItsHeaderIsAnError) {
  const Where where = FindHeader();
  ASSERT_NE(where.size_field, 0u);
  const uint64_t size = 6;
  Patch(where.size_field, &size, sizeof(size));
  EXPECT_EQ(BuildCopy().code(), absl::StatusCode::kDataLoss) << BuildCopy();
}

TEST_F(UnwindTableDamagedFileTest, SectionPastTheEndOfTheFileIsAnError) {
  const Where where = FindHeader();
  ASSERT_NE(where.size_field, 0u);
  const uint64_t size = uint64_t{1} << 40;
  Patch(where.size_field, &size, sizeof(size));
  EXPECT_FALSE(BuildCopy().ok());
}

TEST_F(UnwindTableDamagedFileTest, TruncatedOrGarbageFilesFailCleanly) {
  const uintmax_t size = std::filesystem::file_size(copy_);
  for (const uintmax_t keep : {uintmax_t{0}, uintmax_t{64}, uintmax_t{4096}, size / 2, size - 1}) {
    std::filesystem::resize_file(copy_, keep);
    EXPECT_FALSE(BuildCopy().ok()) << "cut to " << keep << " bytes";
    std::filesystem::remove(copy_);
    std::filesystem::copy_file(SelfPath(), copy_);
  }
  std::mt19937 generator(7);
  std::vector<char> garbage(1 << 16);
  for (char& byte : garbage) byte = static_cast<char>(generator());
  std::memcpy(garbage.data(),
              "\x7f"
              "ELF\x02\x01\x01",
              7);  // an ELF header, then noise
  std::ofstream(copy_, std::ios::binary | std::ios::trunc).write(garbage.data(), garbage.size());
  EXPECT_FALSE(BuildCopy().ok());
}

}  // namespace
}  // namespace ember
