// LocalOutput in a temp dir: the pprof files' names (one second, several files), the flame
// graph's rewrite schedule on a clock the test moves, and failed writes counted, not fatal.
#include "output/local_output.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "support/temp_dir.h"
#include "support/test_samples.h"

namespace ember {
namespace {

using Clock = std::chrono::steady_clock;

class LocalOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    main_.function = "main";
    main_.module = "/usr/bin/app";
  }
  IntervalProfile Interval() {
    IntervalProfile profile;
    profile.start_unix_ns = 1'700'000'000'000'000'000;
    profile.duration_ns = 10'000'000'000;
    profile.period_ns = 10'000'000;
    ::ember::testing::AddSamples(
        profile, {{.pid = 7, .process = "app", .thread = "app", .frames = {&main_}, .count = 3}});
    return profile;
  }
  // The page's modification time, or nullopt when there is none.
  std::optional<std::filesystem::file_time_type> PageTime() {
    std::error_code error;
    auto time = std::filesystem::last_write_time(dir_ + "/out/flamegraph.html", error);
    if (error) return std::nullopt;
    return time;
  }

  ::ember::testing::TempDir temp_{"ember-local-output"};
  const std::string& dir_ = temp_.path();
  Frame main_;
  MetricsRegistry metrics_;
  Clock::time_point now_ = Clock::time_point(std::chrono::hours(1));
};

TEST_F(LocalOutputTest, FilesOfOneSecondTakeSuffixesInTheOrderWritten) {
  LocalOutput output(dir_ + "/out", metrics_);
  ASSERT_TRUE(output.CreateDir().ok());
  const absl::Time now = absl::FromUnixSeconds(1700000000);  // 2023-11-14T22:13:20Z
  const std::string first = dir_ + "/out/cpu-20231114T221320Z.pb.gz";
  EXPECT_EQ(output.NextPprofPath(now), first);
  output.Write(Interval(), 3, now);
  EXPECT_TRUE(std::filesystem::exists(first));
  EXPECT_EQ(output.NextPprofPath(now), dir_ + "/out/cpu-20231114T221320Z_2.pb.gz");
  output.Write(Interval(), 3, now);
  EXPECT_EQ(output.NextPprofPath(now), dir_ + "/out/cpu-20231114T221320Z_3.pb.gz");
  EXPECT_EQ(output.NextPprofPath(now + absl::Seconds(1)), dir_ + "/out/cpu-20231114T221321Z.pb.gz");
  EXPECT_EQ(output.files_written(), 2u);
  EXPECT_EQ(output.write_failures(), 0u);
}

TEST_F(LocalOutputTest, FlameGraphIsRewrittenAtMostOnceAMinuteAndAtTheEnd) {
  LocalOutput output(dir_ + "/out", metrics_, [this] { return now_; });
  ASSERT_TRUE(output.CreateDir().ok());
  EXPECT_FALSE(output.UpdateFlameGraph(false));  // nothing added yet
  EXPECT_FALSE(PageTime().has_value());

  output.Write(Interval(), 3, absl::Now());
  EXPECT_TRUE(output.UpdateFlameGraph(false));  // the first interval at once
  ASSERT_TRUE(PageTime().has_value());
  EXPECT_FALSE(output.UpdateFlameGraph(false));  // nothing added since

  now_ += std::chrono::seconds(10);
  output.Write(Interval(), 3, absl::Now());
  EXPECT_FALSE(output.UpdateFlameGraph(false));  // 10 s after the last write
  now_ += kFlameGraphRewrite - std::chrono::seconds(11);
  EXPECT_FALSE(output.UpdateFlameGraph(false));  // a second short of a minute
  now_ += std::chrono::seconds(1);
  EXPECT_TRUE(output.UpdateFlameGraph(false));  // a minute
  EXPECT_FALSE(output.UpdateFlameGraph(false));

  now_ += std::chrono::seconds(1);
  output.Write(Interval(), 3, absl::Now());
  EXPECT_TRUE(output.UpdateFlameGraph(/*last=*/true));  // the end does not wait
  EXPECT_FALSE(output.UpdateFlameGraph(/*last=*/true));
  EXPECT_EQ(output.write_failures(), 0u);
}

TEST_F(LocalOutputTest, FailedWritesAreCountedAndTheAgentGoesOn) {
  ASSERT_TRUE(std::ofstream(dir_ + "/file").good());
  LocalOutput output(dir_ + "/file/out", metrics_, [this] { return now_; });
  absl::Status created = output.CreateDir();
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(created.message()).rfind("--output-dir: cannot create '", 0), 0u)
      << created.message();

  output.Write(Interval(), 3, absl::Now());
  EXPECT_EQ(output.write_failures(), 1u);  // the pprof file
  EXPECT_TRUE(output.UpdateFlameGraph(false));
  EXPECT_EQ(output.write_failures(), 2u);  // and the page
  EXPECT_EQ(output.files_written(), 0u);
}

}  // namespace
}  // namespace ember
