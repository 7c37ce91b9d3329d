// A real container (issue 5): runc runs a busybox-static bundle in a kubepods-style cgroup, busy on
// CPU, beside the same busy loop on the host. The agent profiles both; the container's samples
// carry its container.id in the pprof files and on its OTLP resource, the host process's none.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "profiled_run.h"
#include "runc_container.h"
#include "support/subprocess.h"
#include "unit/otlp/grpc_test_receiver.h"
#include "unit/otlp/test_requests.h"

namespace ember::testing {
namespace {

using std::chrono::seconds;

const std::vector<std::string> kBusyLoop = {"/bin/busybox", "sh", "-c", "while :; do :; done"};

class ContainerProfileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeTempDir());
    container_id_ = new std::string(RandomContainerId());
    pod_uid_ = new std::string(RandomPodUid());
    container_ = RuncContainer::Start(*dir_ + "/container", *container_id_,
                                      KubepodsCgroupPath(*pod_uid_, *container_id_), kBusyLoop)
                     .release();
    ASSERT_NE(container_, nullptr);
    host_loop_ = new Subprocess(kBusyLoop);
    receiver_ = GrpcTestReceiver::Start().release();
    ASSERT_NE(receiver_, nullptr);
    Subprocess agent({EMBER_AGENT_BIN, "--pid", std::to_string(container_->pid()), "--pid",
                      std::to_string(host_loop_->pid()), "--sampling-hz", std::to_string(kHz),
                      "--duration", "5s", "--export-interval", "2s", "--output-dir", *dir_ + "/out",
                      "--metrics-address", "127.0.0.1:0", "--otlp-endpoint",
                      "http://" + receiver_->target()});
    // The loops' CPU time while sampled: from the attach to the agent's exit.
    EXPECT_TRUE(agent.WaitForOutput("attached to", seconds(15))) << agent.output();
    const std::optional<double> container_before = ProcessCpuSeconds(container_->pid());
    const std::optional<double> host_before = ProcessCpuSeconds(host_loop_->pid());
    EXPECT_EQ(agent.Wait(seconds(60)), 0) << agent.output();
    const std::optional<double> container_after = ProcessCpuSeconds(container_->pid());
    const std::optional<double> host_after = ProcessCpuSeconds(host_loop_->pid());
    ASSERT_TRUE(container_before && host_before && container_after && host_after);
    container_cpu_ = *container_after - *container_before;
    host_cpu_ = *host_after - *host_before;
    agent_log_ = new std::string(agent.output());
    ExpectNoSampleLost(*agent_log_);
  }
  static void TearDownTestSuite() {
    delete container_;  // runc kill and delete
    delete host_loop_;
    delete receiver_;
    std::filesystem::remove_all(*dir_);
    delete dir_;
    delete container_id_;
    delete pod_uid_;
    delete agent_log_;
  }

  static std::string* dir_;
  static std::string* container_id_;
  static std::string* pod_uid_;
  static constexpr int kHz = 99;
  static std::string* agent_log_;
  static double container_cpu_;
  static double host_cpu_;
  static RuncContainer* container_;
  static Subprocess* host_loop_;
  static GrpcTestReceiver* receiver_;
};
std::string* ContainerProfileTest::dir_ = nullptr;
std::string* ContainerProfileTest::container_id_ = nullptr;
std::string* ContainerProfileTest::pod_uid_ = nullptr;
std::string* ContainerProfileTest::agent_log_ = nullptr;
double ContainerProfileTest::container_cpu_ = 0;
double ContainerProfileTest::host_cpu_ = 0;
RuncContainer* ContainerProfileTest::container_ = nullptr;
Subprocess* ContainerProfileTest::host_loop_ = nullptr;
GrpcTestReceiver* ContainerProfileTest::receiver_ = nullptr;

TEST_F(ContainerProfileTest, EveryContainerSampleCarriesItsContainerId) {
  int64_t samples = 0;
  for (const NamedSample& sample : SamplesOf(*dir_ + "/out", container_->pid())) {
    samples += sample.count;
    auto label = sample.labels.find("container.id");
    ASSERT_NE(label, sample.labels.end()) << "a sample of the container without container.id";
    EXPECT_EQ(label->second, *container_id_);
  }
  ExpectSamplesForCpuTime(samples, container_cpu_, kHz, *agent_log_);
}

TEST_F(ContainerProfileTest, TheHostProcessHasNoContainerId) {
  int64_t samples = 0;
  for (const NamedSample& sample : SamplesOf(*dir_ + "/out", host_loop_->pid())) {
    samples += sample.count;
    EXPECT_FALSE(sample.labels.contains("container.id")) << sample.labels.at("container.id");
  }
  ExpectSamplesForCpuTime(samples, host_cpu_, kHz, *agent_log_);
}

TEST_F(ContainerProfileTest, OtlpResourcesSayWhichContainer) {
  int container_resources = 0;
  int host_resources = 0;
  for (const ReceivedExport& received : receiver_->received()) {
    for (const auto& resource_profiles : received.request.resource_profiles()) {
      const auto& resource = resource_profiles.resource();
      const std::string pid = ResourceAttribute(resource, "process.pid");
      if (pid == std::to_string(container_->pid())) {
        ++container_resources;
        EXPECT_EQ(ResourceAttribute(resource, "container.id"), *container_id_);
      } else if (pid == std::to_string(host_loop_->pid())) {
        ++host_resources;
        EXPECT_EQ(ResourceAttribute(resource, "container.id"), "");
      }
    }
  }
  EXPECT_GE(container_resources, 2) << *agent_log_;
  EXPECT_GE(host_resources, 2) << *agent_log_;
}

}  // namespace
}  // namespace ember::testing
