// When the agent watches its node's pods (--kubernetes, the --kube-* flags, the pod's
// environment), and that every mistake in them is an InvalidArgument naming what to set.
#include "k8s/pod_watch_setup.h"

#include <map>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ember {
namespace {

using ::testing::HasSubstr;

struct FakeEnv {
  std::map<std::string, std::string> values;
  std::optional<std::string> operator()(const char* name) const {
    auto found = values.find(name);
    if (found == values.end()) return std::nullopt;
    return found->second;
  }
};

// An API server on loopback without token or CA: Create checks no file, and nothing is sent
// before Start.
KubeApiFlags LoopbackFlags() {
  return {.server = "http://127.0.0.1:1", .token_file = "", .ca_file = "", .node_name = "n"};
}

TEST(PodWatchSetupTest, OffWatchesNothingWhateverTheFlags) {
  absl::StatusOr<PodWatch> watch =
      SetUpPodWatch(KubernetesMode::kOff, LoopbackFlags(), 16,
                    FakeEnv{{{"KUBERNETES_SERVICE_HOST", "10.0.0.1"}}});
  ASSERT_TRUE(watch.ok()) << watch.status();
  EXPECT_EQ(watch->pods, nullptr);
  EXPECT_EQ(watch->watcher, nullptr);
}

TEST(PodWatchSetupTest, AutoOutsideAPodWatchesNothing) {
  for (const FakeEnv& env : {FakeEnv{}, FakeEnv{{{"KUBERNETES_SERVICE_HOST", ""}}}}) {
    absl::StatusOr<PodWatch> watch = SetUpPodWatch(KubernetesMode::kAuto, {}, 16, env);
    ASSERT_TRUE(watch.ok()) << watch.status();
    EXPECT_EQ(watch->watcher, nullptr);
  }
}

TEST(PodWatchSetupTest, AutoInAPodOrWithFlagsWatches) {
  absl::StatusOr<PodWatch> watch =
      SetUpPodWatch(KubernetesMode::kAuto, LoopbackFlags(), 16, FakeEnv{});
  ASSERT_TRUE(watch.ok()) << watch.status();
  EXPECT_NE(watch->pods, nullptr);
  EXPECT_NE(watch->watcher, nullptr);

  // In a pod, the environment's gaps are errors rather than a silent "off".
  watch = SetUpPodWatch(KubernetesMode::kAuto, {}, 16,
                        FakeEnv{{{"KUBERNETES_SERVICE_HOST", "10.0.0.1"}, {"NODE_NAME", "n"}}});
  ASSERT_FALSE(watch.ok());
  EXPECT_EQ(watch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(watch.status().message(), HasSubstr("KUBERNETES_SERVICE_PORT"));
}

TEST(PodWatchSetupTest, OnWithoutAnyServerNamesWhatToSet) {
  absl::StatusOr<PodWatch> watch = SetUpPodWatch(KubernetesMode::kOn, {}, 16, FakeEnv{});
  ASSERT_FALSE(watch.ok());
  EXPECT_EQ(watch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(watch.status().message(), HasSubstr("KUBERNETES_SERVICE_HOST"));
  EXPECT_THAT(watch.status().message(), HasSubstr("--kube-api-server"));
}

TEST(PodWatchSetupTest, UnreadableTokenFileIsAFlagError) {
  KubeApiFlags flags = LoopbackFlags();
  flags.token_file = "/nonexistent/ember/token";
  absl::StatusOr<PodWatch> watch = SetUpPodWatch(KubernetesMode::kOn, flags, 16, FakeEnv{});
  ASSERT_FALSE(watch.ok());
  EXPECT_EQ(watch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(watch.status().message(), HasSubstr("/nonexistent/ember/token"));
}

}  // namespace
}  // namespace ember
