// Tests of ModuleCache: identity keying, cached failures, generation and size eviction.
#include <gtest/gtest.h>

#include <string>

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

TEST(ModuleCacheTest, BoundEvictsLeastRecentlyUsedAtGenerationEnd) {
  ModuleCache cache(/*max_modules=*/2);
  ASSERT_NE(cache.Get({1, 1}, kProgram, kProgram), nullptr);
  ASSERT_NE(cache.Get({1, 2}, kLibrary, kLibrary), nullptr);
  ASSERT_NE(cache.Get({1, 3}, kProgram, kProgram), nullptr);
  ASSERT_NE(cache.Get({1, 2}, kLibrary, kLibrary), nullptr);  // {1,1} is now least recent
  // Module pointers handed out this interval stay valid until NextGeneration.
  EXPECT_EQ(cache.size(), 3u);
  cache.NextGeneration();
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.Get({1, 2}, kMissing, kMissing), nullptr);
  EXPECT_NE(cache.Get({1, 3}, kMissing, kMissing), nullptr);
  EXPECT_EQ(cache.Get({1, 1}, kMissing, kMissing), nullptr);  // evicted, reopen fails
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
