// Tests of ModuleCache: identity keying, cached failures, generation and size eviction.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "elf/elf_file.h"
#include "support/nm_symbols.h"
#include "symbolize/elf_module.h"

namespace ember {
namespace {

const std::string kProgram = std::string(EMBER_SYMBOLIZE_FIXTURE_DIR) + "/ember_sym_fixture";
const std::string kLibrary =
    std::string(EMBER_SYMBOLIZE_FIXTURE_DIR) + "/libember_sym_fixture_lib.so";
const std::string kMissing = "/nonexistent/ember/module";

TEST(ModuleCacheTest, CachesByIdentity) {
  ModuleCache cache;
  ElfModule* first = cache.Get({1, 100}, kProgram, "/proc/1/root/bin/a");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->path(), "/proc/1/root/bin/a");
  // Same identity from another process and path: the opened module is shared, not reopened.
  EXPECT_EQ(cache.Get({1, 100}, kMissing, "/proc/2/root/bin/a"), first);
  EXPECT_EQ(cache.size(), 1u);
  // Same inode on another device is another file.
  ElfModule* other = cache.Get({2, 100}, kLibrary, kLibrary);
  ASSERT_NE(other, nullptr);
  EXPECT_NE(other, first);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(ModuleCacheTest, CachesFailures) {
  ModuleCache cache;
  EXPECT_EQ(cache.Get({1, 7}, kMissing, kMissing), nullptr);
  EXPECT_EQ(cache.size(), 1u);
  // Not retried: even a now-valid path for the same identity gives the cached failure.
  EXPECT_EQ(cache.Get({1, 7}, kProgram, kProgram), nullptr);
  EXPECT_EQ(cache.size(), 1u);
}

// A file whose only process is gone has no path (ProcessTable::OpenPath gives ""). That is not
// a fact about the file: a process that maps it later still gets it symbolized.
TEST(ModuleCacheTest, UnreachableFileIsNotCachedAsAFailure) {
  ModuleCache cache;
  EXPECT_EQ(cache.Get({1, 9}, "", kProgram), nullptr);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.stats().unreachable, 1u);
  EXPECT_NE(cache.Get({1, 9}, kProgram, kProgram), nullptr);
  // Once open, it serves a process that is gone too.
  EXPECT_NE(cache.Get({1, 9}, "", kProgram), nullptr);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(ModuleCacheTest, EvictsEntriesUnusedForKeepGenerations) {
  ModuleCache cache;
  ASSERT_NE(cache.Get({1, 1}, kProgram, kProgram), nullptr);
  ASSERT_NE(cache.Get({1, 2}, kLibrary, kLibrary), nullptr);
  cache.NextGeneration(2);
  ASSERT_NE(cache.Get({1, 1}, kProgram, kProgram), nullptr);
  cache.NextGeneration(2);
  EXPECT_EQ(cache.size(), 2u);  // {1,2} was used in one of the last two generations
  cache.NextGeneration(2);
  EXPECT_EQ(cache.size(), 1u);  // {1,2} unused for two generations
  // The survivor is still the cached module: a bogus path does not matter.
  EXPECT_NE(cache.Get({1, 1}, kMissing, kMissing), nullptr);
  // The evicted one is opened afresh (and here fails, showing it was not cached).
  EXPECT_EQ(cache.Get({1, 2}, kMissing, kMissing), nullptr);
}

TEST(ModuleCacheTest, FailuresAreEvictedLikeModules) {
  ModuleCache cache;
  EXPECT_EQ(cache.Get({1, 9}, kMissing, kMissing), nullptr);
  cache.NextGeneration(1);
  cache.NextGeneration(1);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_NE(cache.Get({1, 9}, kProgram, kProgram), nullptr);  // retried after eviction
}

TEST(ModuleCacheTest, CountBoundEvictsLeastRecentlyUsed) {
  ModuleCache cache(/*max_modules=*/2);
  ASSERT_NE(cache.Get({1, 1}, kProgram, kProgram), nullptr);
  ASSERT_NE(cache.Get({1, 2}, kLibrary, kLibrary), nullptr);
  ASSERT_NE(cache.Get({1, 1}, kProgram, kProgram), nullptr);  // {1,2} is now least recent
  ASSERT_NE(cache.Get({1, 3}, kProgram, kProgram), nullptr);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.stats().evicted, 1u);
  cache.NextGeneration();
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.Get({1, 1}, kMissing, kMissing), nullptr);
  EXPECT_NE(cache.Get({1, 3}, kMissing, kMissing), nullptr);
  EXPECT_EQ(cache.Get({1, 2}, kMissing, kMissing), nullptr);  // evicted, reopen fails
  EXPECT_EQ(cache.stats().hits, 3u);
  EXPECT_EQ(cache.stats().misses, 4u);
}

// The first address of the fixture program that symbolizes with a source line.
std::optional<std::pair<ElfAddress, SourceSymbol>> FirstSymbolizedAddress(const ElfModule& module) {
  for (uint64_t address = 0x1000; address < 0x100000; address += 4) {
    std::optional<SourceSymbol> symbol = module.Symbolize(ElfAddress{address});
    if (symbol && symbol->line != 0) return std::make_pair(ElfAddress{address}, *symbol);
  }
  return std::nullopt;
}

TEST(ModuleCacheTest, ByteBoundHoldsWhileFedMoreThanItAndEvictedModulesComeBack) {
  // One module's bytes with its symbols and some DWARF loaded.
  ModuleCache probe;
  ElfModule* one = probe.Get({9, 9}, kProgram, kProgram);
  ASSERT_NE(one, nullptr);
  const size_t unloaded = probe.bytes();
  auto known = FirstSymbolizedAddress(*one);
  ASSERT_TRUE(known.has_value()) << "the fixture program has no line information";
  const size_t loaded = probe.bytes();
  ASSERT_GT(loaded, unloaded) << "loading symbols and DWARF did not count";
  EXPECT_GE(unloaded, ElfModule::kElfHandleBytes);

  // Room for three and a half loaded modules.
  const size_t max_bytes = loaded * 7 / 2;
  ModuleCache cache(/*max_modules=*/1024, ElfModuleOptions{}, max_bytes);
  for (uint64_t inode = 1; inode <= 20; ++inode) {
    ElfModule* module = cache.Get({1, inode}, kProgram, kProgram);
    ASSERT_NE(module, nullptr);
    ASSERT_LE(cache.bytes(), max_bytes) << "after module " << inode;
    ASSERT_TRUE(module->Symbolize(known->first).has_value());
    FirstSymbolizedAddress(*module);  // the same DWARF the probe loaded
  }
  EXPECT_GT(cache.stats().evicted, 10u);
  EXPECT_LE(cache.size(), 4u);
  cache.NextGeneration();
  EXPECT_LE(cache.bytes(), max_bytes);
  EXPECT_EQ(cache.stats().misses, 20u);

  // The first module was evicted: it is opened again, and names the address as before.
  ElfModule* again = cache.Get({1, 1}, kProgram, kProgram);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(cache.stats().misses, 21u);
  std::optional<SourceSymbol> symbol = again->Symbolize(known->first);
  ASSERT_TRUE(symbol.has_value());
  EXPECT_EQ(symbol->function, known->second.function);
  EXPECT_EQ(symbol->source_file, known->second.source_file);
  EXPECT_EQ(symbol->line, known->second.line);
  // Growth counted at a hit is bounded too: three modules opened, then loaded one by one, each
  // through a hit.
  ASSERT_LT(3 * unloaded, loaded) << "the premise: three unloaded modules fit beside a loaded one";
  const size_t small_max = loaded * 3 / 2;
  ModuleCache hits(/*max_modules=*/1024, ElfModuleOptions{}, small_max);
  for (uint64_t inode : {1, 2, 3}) ASSERT_NE(hits.Get({2, inode}, kProgram, kProgram), nullptr);
  for (uint64_t inode : {1, 2, 3}) {
    const uint64_t hits_before = hits.stats().hits;
    ElfModule* module = hits.Get({2, inode}, kProgram, kProgram);
    ASSERT_NE(module, nullptr);
    EXPECT_EQ(hits.stats().hits, hits_before + 1) << inode;
    ASSERT_LE(hits.bytes(), small_max) << "after a hit on module " << inode;
    FirstSymbolizedAddress(*module);
  }
  EXPECT_GT(hits.stats().evicted, 0u);

  // The most recent one is still there.
  EXPECT_EQ(cache.Get({1, 20}, kMissing, kMissing) != nullptr, true);
  EXPECT_EQ(cache.stats().hits, 1u);
}

// Resident kB of this process's mappings of `path`, from /proc/self/smaps.
int64_t ResidentKbOf(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_path = false;
  int64_t kb = 0;
  while (std::getline(smaps, line)) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
        line.find('-') < line.find(' ')) {
      in_path = line.size() >= path.size() &&
                line.compare(line.size() - path.size(), path.size(), path) == 0;
    } else if (in_path && line.rfind("Rss:", 0) == 0) {
      kb += std::stoll(line.substr(4));
    }
  }
  return kb;
}

TEST(ModuleCacheTest, ReleasedPagesLeaveResidentMemoryAndAreReadBackIntact) {
  ModuleCache cache;
  ElfModule* module = cache.Get({1, 1}, kProgram, kProgram);
  ASSERT_NE(module, nullptr);
  // The fixture's functions, from nm.
  std::vector<uint64_t> addresses;
  for (const testing::NmSymbol& symbol : testing::NmSymbols(kProgram, {.types = "Tt"})) {
    addresses.push_back(symbol.address);
  }
  ASSERT_GT(addresses.size(), 3u);
  std::vector<std::optional<SourceSymbol>> before;
  for (uint64_t address : addresses) {
    before.push_back(module->Symbolize(ElfAddress{address}));  // reads symbols and DWARF
  }
  ASSERT_GT(ResidentKbOf(kProgram), 0);
  internal::FileMappingCheck file_mappings;
  cache.ReleasePages(file_mappings);
  EXPECT_EQ(ResidentKbOf(kProgram), 0);
  size_t named = 0;
  for (size_t i = 0; i < addresses.size(); ++i) {
    std::optional<SourceSymbol> after = module->Symbolize(ElfAddress{addresses[i]});
    ASSERT_EQ(after.has_value(), before[i].has_value()) << std::hex << addresses[i];
    if (!after.has_value()) continue;
    ++named;
    EXPECT_EQ(after->function, before[i]->function);
    EXPECT_EQ(after->line, before[i]->line);
  }
  EXPECT_GT(named, 0u) << "no address of the fixture's code was named";
  // Read again, released again: the file's mapping was checked once, and the answer still holds.
  ASSERT_GT(ResidentKbOf(kProgram), 0);
  internal::FileMappingCheck second_check;
  cache.ReleasePages(second_check);
  EXPECT_EQ(ResidentKbOf(kProgram), 0);
}

TEST(FileMappingCheckTest, FindsOnlyPrivateReadOnlyMappingsOfAFileFromItsStart) {
  const int fd = open(kProgram.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* whole = mmap(nullptr, 2 * page, PROT_READ, MAP_PRIVATE, fd, 0);
  void* from_second_page = mmap(nullptr, page, PROT_READ, MAP_PRIVATE, fd, page);
  void* shared = mmap(nullptr, page, PROT_READ, MAP_SHARED, fd, 0);
  void* anonymous = mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  close(fd);
  ASSERT_NE(whole, MAP_FAILED);
  ASSERT_NE(from_second_page, MAP_FAILED);
  ASSERT_NE(shared, MAP_FAILED);
  ASSERT_NE(anonymous, MAP_FAILED);
  std::vector<char> heap(4 * page);
  internal::FileMappingCheck check;
  EXPECT_TRUE(check.IsFileMappingStart(reinterpret_cast<uintptr_t>(whole)));
  EXPECT_FALSE(check.IsFileMappingStart(reinterpret_cast<uintptr_t>(whole) + page));
  EXPECT_FALSE(check.IsFileMappingStart(reinterpret_cast<uintptr_t>(from_second_page)));
  EXPECT_FALSE(check.IsFileMappingStart(reinterpret_cast<uintptr_t>(shared)));
  EXPECT_FALSE(check.IsFileMappingStart(reinterpret_cast<uintptr_t>(anonymous)));
  EXPECT_FALSE(check.IsFileMappingStart(reinterpret_cast<uintptr_t>(heap.data())));
  munmap(whole, 2 * page);
  munmap(from_second_page, page);
  munmap(shared, page);
  munmap(anonymous, page);
}

TEST(FileIdentityTest, HashAndEquality) {
  FileIdentityHash hash;
  EXPECT_EQ(hash({3, 4}), hash({3, 4}));
  EXPECT_NE(hash({3, 4}), hash({4, 3}));
  EXPECT_EQ((FileIdentity{3, 4}), (FileIdentity{3, 4}));
  EXPECT_NE((FileIdentity{3, 4}), (FileIdentity{3, 5}));
}

}  // namespace
}  // namespace ember
