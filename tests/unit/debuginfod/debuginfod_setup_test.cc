// Which servers the agent asks (--debuginfod-urls over $DEBUGINFOD_URLS), and the one-line error
// for a cache that cannot be made.
#include "debuginfod/debuginfod_setup.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/temp_dir.h"

namespace ember {
namespace {

using ::testing::HasSubstr;

class DebuginfodSetupTest : public ::testing::Test {
 protected:
  DebuginfodSettings Settings(std::optional<std::string> urls) {
    return {.urls = std::move(urls), .cache_dir = dir_ + "/cache", .cache_bytes = 1 << 20};
  }
  ::ember::testing::TempDir temp_{"ember-debuginfod-setup"};
  const std::string& dir_ = temp_.path();
};

TEST_F(DebuginfodSetupTest, NoServersNoFetcherAndNoneForOthersEither) {
  setenv("DEBUGINFOD_URLS", "http://127.0.0.1:1", 1);
  absl::StatusOr<std::unique_ptr<DebugFileFetcher>> fetcher = SetUpDebuginfod(Settings(" "));
  ASSERT_TRUE(fetcher.ok()) << fetcher.status();
  EXPECT_EQ(*fetcher, nullptr);
  EXPECT_EQ(std::getenv("DEBUGINFOD_URLS"), nullptr);

  fetcher = SetUpDebuginfod(Settings(std::nullopt));  // and the environment has none now
  ASSERT_TRUE(fetcher.ok()) << fetcher.status();
  EXPECT_EQ(*fetcher, nullptr);
}

TEST_F(DebuginfodSetupTest, TheEnvironmentNamesServersWhenTheFlagDoesNot) {
  setenv("DEBUGINFOD_URLS", "http://127.0.0.1:1", 1);
  absl::StatusOr<std::unique_ptr<DebugFileFetcher>> fetcher =
      SetUpDebuginfod(Settings(std::nullopt));
  ASSERT_TRUE(fetcher.ok()) << fetcher.status();
  ASSERT_NE(*fetcher, nullptr);
  EXPECT_EQ((*fetcher)->cache_dir(), dir_ + "/cache");
  EXPECT_TRUE(std::filesystem::is_directory(dir_ + "/cache/client"));
}

TEST_F(DebuginfodSetupTest, ACacheThatCannotBeMadeNamesTheFlag) {
  ASSERT_TRUE(std::ofstream(dir_ + "/file").good());
  DebuginfodSettings settings = Settings("http://127.0.0.1:1");
  settings.cache_dir = dir_ + "/file/sub/cache";  // under a regular file
  absl::StatusOr<std::unique_ptr<DebugFileFetcher>> fetcher = SetUpDebuginfod(settings);
  ASSERT_FALSE(fetcher.ok());
  EXPECT_EQ(fetcher.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(fetcher.status().message(), HasSubstr("--debuginfod-cache-dir: "));
  EXPECT_THAT(fetcher.status().message(), HasSubstr("--debuginfod-urls \"\""));
}

}  // namespace
}  // namespace ember
