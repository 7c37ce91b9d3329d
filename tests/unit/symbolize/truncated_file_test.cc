// A mapped file truncated under the symbolizer (issue 8, hostile host): reads of the cut-off
// pages fault with SIGBUS, which must cost the module's names, never the agent.
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "elf/sigbus_guard.h"
#include "support/elf_layout.h"
#include "support/nm_symbols.h"
#include "support/temp_dir.h"
#include "symbolize/elf_module.h"

namespace ember {
namespace {

// tests/fixtures/profiled/spin_lib.so: its symbol table and DWARF lie pages past its last loaded
// segment.
const std::string kSpinLib = EMBER_SPIN_LIB;

// A copy of `from` named `name` in `dir`; empty when the directory could not be made.
std::string CopyInto(const testing::TempDir& dir, const std::string& from,
                     const std::string& name) {
  if (dir.path().empty()) return "";
  std::string to = dir.path() + "/" + name;
  std::filesystem::copy_file(from, to);
  return to;
}

// The address nm gives `symbol` in `path`; 0 when it has none.
uint64_t NmAddress(const std::string& path, const std::string& symbol) {
  uint64_t address = 0;
  for (const testing::NmSymbol& s : testing::NmSymbols(path, {})) {
    if (s.name == symbol) address = s.address;
  }
  return address;
}

TEST(SigbusGuardTest, AFaultInAGuardedReadOfATruncatedMappingIsReported) {
  const testing::TempDir dir("ember-trunc");
  std::string path = CopyInto(dir, kSpinLib, "mapped");
  ASSERT_FALSE(path.empty());
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto* bytes =
      static_cast<volatile const char*>(mmap(nullptr, 4 * page, PROT_READ, MAP_PRIVATE, fd, 0));
  close(fd);
  ASSERT_NE(bytes, MAP_FAILED);
  char first = 0;
  EXPECT_TRUE(internal::RunCatchingSigbus([&] { first = bytes[3 * page]; }));
  std::filesystem::resize_file(path, page);
  EXPECT_TRUE(internal::RunCatchingSigbus([&] { first = bytes[0]; }));
  EXPECT_EQ(first, ELFMAG[0]);
  EXPECT_FALSE(internal::RunCatchingSigbus([&] { first = bytes[3 * page]; }));
  // Guards nest, and each read after a fault is guarded afresh.
  bool inner = true;
  EXPECT_TRUE(internal::RunCatchingSigbus(
      [&] { inner = internal::RunCatchingSigbus([&] { first = bytes[2 * page]; }); }));
  EXPECT_FALSE(inner);
  EXPECT_FALSE(internal::RunCatchingSigbus([&] { first = bytes[3 * page]; }));
  // The jump out of the handler leaves SIGBUS unblocked: a later fault is caught, not fatal.
  sigset_t mask;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &mask), 0);
  EXPECT_FALSE(sigismember(&mask, SIGBUS));
  munmap(const_cast<char*>(bytes), 4 * page);
}

TEST(SigbusGuardTest, AFaultOutsideAGuardedReadStillEndsTheProcess) {
  const testing::TempDir dir("ember-trunc");
  std::string path = CopyInto(dir, kSpinLib, "mapped");
  ASSERT_FALSE(path.empty());
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // Killed by SIGBUS; under ASan, its own SIGBUS report and exit.
  EXPECT_DEATH(
      {
        int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        auto* bytes = static_cast<volatile const char*>(
            mmap(nullptr, 4 * page, PROT_READ, MAP_PRIVATE, fd, 0));
        internal::RunCatchingSigbus([&] {});  // the handler is installed
        truncate(path.c_str(), static_cast<off_t>(page));
        char byte = bytes[3 * page];
        std::exit(byte);
      },
      "");
}

TEST(TruncatedFileTest, ALibraryCutToItsLoadedSegmentsLosesItsNamesNotTheAgent) {
  const testing::TempDir dir("ember-trunc");
  std::string path = CopyInto(dir, kSpinLib, "spin-truncated.so");
  ASSERT_FALSE(path.empty());
  const uint64_t first = NmAddress(path, "spin_lib_first");
  const uint64_t second = NmAddress(path, "spin_lib_second");
  ASSERT_NE(first, 0u);
  ASSERT_NE(second, 0u);
  auto module = ElfModule::Open(path, path);
  ASSERT_TRUE(module.ok()) << module.status();
  std::optional<SourceSymbol> named = (*module)->Symbolize(ElfAddress{first});
  ASSERT_TRUE(named.has_value());
  EXPECT_EQ(named->function, "spin_lib_first");
  EXPECT_FALSE((*module)->file_changed());

  const uint64_t loaded_end = testing::LoadedEnd(path);
  ASSERT_LT(loaded_end, std::filesystem::file_size(path));
  std::filesystem::resize_file(path, loaded_end);
  EXPECT_EQ((*module)->Symbolize(ElfAddress{second}), std::nullopt);
  EXPECT_TRUE((*module)->file_changed());
  EXPECT_EQ((*module)->Symbolize(ElfAddress{first}), std::nullopt);
  module->reset();  // leaks what the fault left behind instead of freeing it

  // Opened after the cut, the file is refused up front with a clear error.
  auto reopened = ElfModule::Open(path, path);
  EXPECT_FALSE(reopened.ok());
  EXPECT_NE(reopened.status().message().find("past the end of the file"), std::string::npos)
      << reopened.status();
}

}  // namespace
}  // namespace ember
