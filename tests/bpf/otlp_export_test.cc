// The agent exports what it samples as OTLP Profiles to an in-test gRPC ProfilesService on
// loopback, beside the local pprof files (issue 4): valid requests, the fixture's stacks, the
// resource attributes a backend keys on, and the same sample counts as the pprof files.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "profiled_run.h"
#include "unit/otlp/grpc_test_receiver.h"
#include "unit/otlp/reserved_port.h"
#include "unit/otlp/test_requests.h"

namespace ember::testing {
namespace {

namespace otlp = opentelemetry::proto::profiles::v1development;

// Function names of a sample's stack, leaf first, through the request's dictionary: with every
// Line of each location (inlined functions expanded), or only its last, the out-of-line function
// that is the real frame (as NamedSample::functions for the pprof files).
std::vector<std::string> FunctionsOf(const otlp::ProfilesDictionary& dictionary,
                                     const otlp::Sample& sample, bool expand_inlined = false) {
  std::vector<std::string> names;
  const otlp::Stack& stack = dictionary.stack_table(sample.stack_index());
  for (int location_index : stack.location_indices()) {
    const otlp::Location& location = dictionary.location_table(location_index);
    for (int i = expand_inlined ? 0 : location.lines_size() - 1; i < location.lines_size(); ++i) {
      const otlp::Function& function =
          dictionary.function_table(location.lines(i).function_index());
      names.push_back(dictionary.string_table(function.name_strindex()));
    }
  }
  return names;
}

class OtlpExportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    receiver_ = GrpcTestReceiver::Start().release();
    ASSERT_NE(receiver_, nullptr);
    setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ember-test", 1);
    run_ = new ProfiledRun(ProfileFixture({EMBER_PHASES_BIN, "7"}, 199, nullptr, SIGINT,
                                          {"--otlp-endpoint", "http://" + receiver_->target(),
                                           "--otlp-header", "X-Scope-OrgID=tenant-7"}));
    unsetenv("OTEL_RESOURCE_ATTRIBUTES");
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(run_->output_dir);
    delete run_;
    delete receiver_;
  }
  static GrpcTestReceiver* receiver_;
  static ProfiledRun* run_;
};
GrpcTestReceiver* OtlpExportTest::receiver_ = nullptr;
ProfiledRun* OtlpExportTest::run_ = nullptr;

TEST_F(OtlpExportTest, EveryIntervalArrivesValidWithItsHeaders) {
  std::vector<ReceivedExport> received = receiver_->received();
  // 7 s of work in 3 s intervals, and the last one flushed at SIGINT.
  ASSERT_GE(received.size(), 3u) << run_->agent_log;
  for (const ReceivedExport& r : received) {
    EXPECT_TRUE(r.valid.ok()) << r.valid;
    auto header = r.metadata.find("x-scope-orgid");
    ASSERT_NE(header, r.metadata.end());
    EXPECT_EQ(header->second, "tenant-7");
  }
  EXPECT_NE(run_->agent_log.find("interval(s) sent"), std::string::npos) << run_->agent_log;
  EXPECT_EQ(run_->agent_log.find("tenant-7"), std::string::npos) << "a header value was logged";
}

TEST_F(OtlpExportTest, TheFixturesResourceSaysWhichProcessItIs) {
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  int resources = 0;
  for (const ReceivedExport& r : receiver_->received()) {
    for (const auto& resource_profiles : r.request.resource_profiles()) {
      const auto& resource = resource_profiles.resource();
      if (ResourceAttribute(resource, "process.pid") != std::to_string(run_->pid)) continue;
      ++resources;
      EXPECT_EQ(ResourceAttribute(resource, "process.executable.name"), "phases");
      EXPECT_TRUE(ResourceAttribute(resource, "process.executable.path").ends_with("/phases"));
      EXPECT_EQ(ResourceAttribute(resource, "service.name"), "unknown_service:phases");
      EXPECT_EQ(ResourceAttribute(resource, "host.name"), host);
      EXPECT_EQ(ResourceAttribute(resource, "deployment.environment"), "ember-test");
      ASSERT_EQ(resource_profiles.scope_profiles_size(), 1);
      EXPECT_EQ(resource_profiles.scope_profiles(0).scope().name(), "ember");
      const otlp::Profile& profile = resource_profiles.scope_profiles(0).profiles(0);
      EXPECT_EQ(profile.period(), 1'000'000'000 / 199);
      EXPECT_EQ(r.request.dictionary().string_table(profile.period_type().type_strindex()), "cpu");
    }
  }
  EXPECT_GE(resources, 3);
}

TEST_F(OtlpExportTest, StacksAndCountsMatchThePprofFiles) {
  int64_t otlp_samples = 0;
  int64_t whole_chain = 0;
  for (const ReceivedExport& r : receiver_->received()) {
    const otlp::ProfilesDictionary& dictionary = r.request.dictionary();
    for (const auto& resource_profiles : r.request.resource_profiles()) {
      if (ResourceAttribute(resource_profiles.resource(), "process.pid") !=
          std::to_string(run_->pid)) {
        continue;
      }
      for (const otlp::Sample& sample : resource_profiles.scope_profiles(0).profiles(0).samples()) {
        ASSERT_EQ(sample.values_size(), 1);
        otlp_samples += sample.values(0);
        std::vector<std::string> f = FunctionsOf(dictionary, sample);
        auto leaf = std::find_if(f.begin(), f.end(), [](const std::string& name) {
          return name.rfind("leaf_", 0) == 0;
        });
        if (leaf != f.end() && f.end() - leaf >= 4 && leaf[1] == "run_phase" &&
            leaf[2] == "run_phases" && leaf[3] == "main") {
          whole_chain += sample.values(0);
        }
      }
    }
  }
  int64_t pprof_samples = 0;
  for (const NamedSample& s : SamplesOf(run_->output_dir, run_->pid)) pprof_samples += s.count;
  ExpectSamplesComplete(*run_, pprof_samples);
  EXPECT_EQ(otlp_samples, pprof_samples);  // the same intervals, to the sample
  EXPECT_GE(whole_chain, otlp_samples * 9 / 10);
}

// main calls run_phases from RunPhasesMain (phase_driver.h), inlined into main: the location of
// that call has RunPhasesMain as a Line before main's.
TEST_F(OtlpExportTest, InlinedCallerIsALineOfTheCallersLocation) {
  int64_t through_main = 0;
  int64_t with_inline = 0;
  for (const ReceivedExport& r : receiver_->received()) {
    for (const auto& resource_profiles : r.request.resource_profiles()) {
      if (ResourceAttribute(resource_profiles.resource(), "process.pid") !=
          std::to_string(run_->pid)) {
        continue;
      }
      for (const otlp::Sample& sample : resource_profiles.scope_profiles(0).profiles(0).samples()) {
        std::vector<std::string> f = FunctionsOf(r.request.dictionary(), sample);
        auto run_phases = std::find(f.begin(), f.end(), "run_phases");
        if (run_phases == f.end() || run_phases + 1 == f.end() || run_phases[1] != "main") continue;
        through_main += sample.values(0);
        std::vector<std::string> l = FunctionsOf(r.request.dictionary(), sample, true);
        auto line = std::find(l.begin(), l.end(), "run_phases");
        if (l.end() - line >= 3 && line[1] == "RunPhasesMain" && line[2] == "main") {
          with_inline += sample.values(0);
        }
      }
    }
  }
  ASSERT_GT(through_main, 0);
  EXPECT_EQ(with_inline, through_main);
}

// The endpoint is down when the agent starts and comes up seconds later: the agent samples and
// writes its local files all along, and the intervals queued meanwhile arrive once it is up.
TEST(OtlpOutageTest, IntervalsQueuedWhileTheEndpointIsDownArriveAfterIt) {
  ReservedPort port;
  ASSERT_NE(port.port(), 0);
  std::unique_ptr<GrpcTestReceiver> receiver;
  std::thread recover([&] {
    std::this_thread::sleep_for(std::chrono::seconds(5));
    port.Release();
    receiver = GrpcTestReceiver::Start({.port = port.port()});
  });
  ProfiledRun run =
      ProfileFixture({EMBER_PHASES_BIN, "9"}, 99, nullptr, SIGINT,
                     {"--otlp-endpoint", "http://127.0.0.1:" + std::to_string(port.port())});
  recover.join();
  ASSERT_NE(receiver, nullptr);

  const size_t files = PprofFilesIn(run.output_dir).size();
  int64_t pprof_samples = 0;
  for (const NamedSample& s : SamplesOf(run.output_dir, run.pid)) pprof_samples += s.count;
  std::filesystem::remove_all(run.output_dir);
  EXPECT_GE(files, 3u) << "sampling stalled while the endpoint was down\n" << run.agent_log;
  std::vector<ReceivedExport> received = receiver->received();
  EXPECT_EQ(received.size(), files) << run.agent_log;
  int64_t otlp_samples = 0;
  for (const ReceivedExport& r : received) {
    EXPECT_TRUE(r.valid.ok()) << r.valid;
    for (const auto& resource_profiles : r.request.resource_profiles()) {
      if (ResourceAttribute(resource_profiles.resource(), "process.pid") !=
          std::to_string(run.pid)) {
        continue;
      }
      for (const otlp::Sample& sample : resource_profiles.scope_profiles(0).profiles(0).samples()) {
        otlp_samples += sample.values(0);
      }
    }
  }
  EXPECT_EQ(otlp_samples, pprof_samples);
  // In order: each request's window starts after the one before.
  for (size_t i = 1; i < received.size(); ++i) {
    EXPECT_GT(
        received[i].request.resource_profiles(0).scope_profiles(0).profiles(0).time_unix_nano(),
        received[i - 1]
            .request.resource_profiles(0)
            .scope_profiles(0)
            .profiles(0)
            .time_unix_nano());
  }
  std::smatch retries;
  ASSERT_TRUE(std::regex_search(run.agent_log, retries, std::regex(R"((\d+) retried attempt)")))
      << run.agent_log;
  EXPECT_GT(std::stoi(retries[1]), 0) << "nothing was sent while the endpoint was down";
}

// With an endpoint and no --output-dir, the agent only exports: every sample arrives over OTLP, and
// no file is written, neither in the working directory (./ember-profiles, the default) nor
// anywhere else it was told of.
TEST(OtlpOnlyTest, AnEndpointWithoutOutputDirSendsEverySampleAndWritesNoFile) {
  std::unique_ptr<GrpcTestReceiver> receiver = GrpcTestReceiver::Start();
  ASSERT_NE(receiver, nullptr);
  const std::string cwd = MakeTempDir();
  const std::filesystem::path test_cwd = std::filesystem::current_path();
  std::filesystem::current_path(cwd);  // the agent's working directory: it inherits the test's
  ProfiledRun run = ProfileFixture({EMBER_PHASES_BIN, "5"}, 199, nullptr, SIGINT,
                                   {"--otlp-endpoint", "http://" + receiver->target()},
                                   {.output_dir_flag = false});
  std::filesystem::current_path(test_cwd);
  EXPECT_TRUE(std::filesystem::is_empty(cwd)) << run.agent_log;
  EXPECT_TRUE(std::filesystem::is_empty(run.output_dir)) << run.agent_log;
  std::filesystem::remove_all(cwd);
  std::filesystem::remove_all(run.output_dir);
  EXPECT_EQ(run.agent_log.find("wrote "), std::string::npos) << run.agent_log;
  int64_t otlp_samples = 0;
  size_t requests = 0;
  for (const ReceivedExport& r : receiver->received()) {
    EXPECT_TRUE(r.valid.ok()) << r.valid;
    ++requests;
    for (const auto& resource_profiles : r.request.resource_profiles()) {
      if (ResourceAttribute(resource_profiles.resource(), "process.pid") !=
          std::to_string(run.pid)) {
        continue;
      }
      for (const otlp::Sample& sample : resource_profiles.scope_profiles(0).profiles(0).samples()) {
        otlp_samples += sample.values(0);
      }
    }
  }
  EXPECT_GE(requests, 2u) << run.agent_log;
  ExpectSamplesComplete(run, otlp_samples);
}

}  // namespace
}  // namespace ember::testing
