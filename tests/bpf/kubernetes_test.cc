// Pod metadata end to end (issue 5): a real runc container in a kubepods-style cgroup, and an
// in-test Kubernetes API server on loopback that lists and watches its pod while the test throws
// the protocol's rough edges at the agent (a malformed line, 410 Expired, a dropped stream, a
// rotated token, a 401). The container's samples end with the right pod attributes on their
// OTLP resources and as pprof labels, and sampling never stops meanwhile.
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "profiled_run.h"
#include "runc_container.h"
#include "support/kube_api_server.h"
#include "support/pprof_reader.h"
#include "support/subprocess.h"
#include "unit/otlp/grpc_test_receiver.h"
#include "unit/otlp/test_requests.h"

namespace ember::testing {
namespace {

using std::chrono::seconds;

const std::vector<std::string> kBusyLoop = {"/bin/busybox", "sh", "-c", "while :; do :; done"};
constexpr char kNode[] = "node-e2e";
constexpr char kPodName[] = "checkout-5d9c7b8f4-x2x9z";

// The pod of a Deployment "checkout" in namespace "shop", with the container's id in its status
// once `started`, and the OpenTelemetry service-name annotation when `service` is not empty.
nlohmann::json CheckoutPod(const std::string& uid, const std::string& container_id, bool started,
                           const std::string& service = "") {
  nlohmann::json pod = {{"kind", "Pod"},
                        {"apiVersion", "v1"},
                        {"metadata",
                         {{"uid", uid},
                          {"name", kPodName},
                          {"namespace", "shop"},
                          {"labels", {{"pod-template-hash", "5d9c7b8f4"}}},
                          {"ownerReferences",
                           {{{"apiVersion", "apps/v1"},
                             {"kind", "ReplicaSet"},
                             {"name", "checkout-5d9c7b8f4"},
                             {"uid", "8b0c1f4e-2f2c-4a57-9a0e-3c2b1a0f9e8d"},
                             {"controller", true}}}}}},
                        {"spec", {{"nodeName", kNode}, {"containers", {{{"name", "app"}}}}}},
                        {"status", {{"phase", started ? "Running" : "Pending"}}}};
  if (started) {
    pod["status"]["containerStatuses"] = {
        {{"name", "app"}, {"containerID", "containerd://" + container_id}, {"ready", true}}};
  }
  if (!service.empty()) {
    pod["metadata"]["annotations"] = {{"resource.opentelemetry.io/service.name", service}};
  }
  return pod;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

class KubernetesPodTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_ = new Suite();
    Suite& s = *s_;
    s.dir = MakeTempDir();
    s.container_id = RandomContainerId();
    s.pod_uid = RandomPodUid();
    s.api = KubeApiServer::Start();
    ASSERT_NE(s.api, nullptr);
    s.receiver = GrpcTestReceiver::Start();
    ASSERT_NE(s.receiver, nullptr);
    const std::string token_file = s.dir + "/token";
    WriteFile(token_file, "token-one\n");
    s.api->set_required_token("token-one");
    // The container is still starting: its pod is listed without the container's id, so the
    // agent knows the pod only by the uid in the container's cgroup path.
    s.api->AddPod(CheckoutPod(s.pod_uid, s.container_id, /*started=*/false));
    s.api->AddPod(TestPod("0c0c0c0c-1111-2222-3333-444455556666", "other-on-this-node", kNode));
    s.api->AddPod(TestPod("0d0d0d0d-1111-2222-3333-444455556666", "on-another-node", "node-x"));

    s.container = RuncContainer::Start(s.dir + "/container", s.container_id,
                                       KubepodsCgroupPath(s.pod_uid, s.container_id), kBusyLoop);
    ASSERT_NE(s.container, nullptr);
    Subprocess agent({EMBER_AGENT_BIN,
                      "--pid",
                      std::to_string(s.container->pid()),
                      "--sampling-hz",
                      "99",
                      "--duration",
                      "12s",
                      "--export-interval",
                      "2s",
                      "--output-dir",
                      s.dir + "/out",
                      "--metrics-address",
                      "127.0.0.1:0",
                      "--otlp-endpoint",
                      "http://" + s.receiver->target(),
                      "--kubernetes",
                      "--kube-api-server",
                      s.api->url(),
                      "--kube-ca-file",
                      s.api->ca_file(),
                      "--kube-token-file",
                      token_file,
                      "--node-name",
                      kNode});
    ASSERT_TRUE(agent.WaitForOutput("attached to", seconds(15))) << agent.output();
    const std::optional<double> cpu_before = ProcessCpuSeconds(s.container->pid());
    ASSERT_TRUE(agent.WaitForOutput("status endpoint", seconds(15))) << agent.output();
    const std::string status = StatusEndpoint(agent.output());
    ASSERT_TRUE(s.api->WaitForRequests(KubeRequestKind::kWatch, 1, absl::Seconds(10)));
    s.metrics_synced = HttpGet(status + "/metrics").second;
    s.readyz_synced = HttpGet(status + "/readyz").first;
    // The first interval goes out while the pod is known only by its uid.
    for (int i = 0; i < 100 && ContainerResources(s.receiver->received()).empty(); ++i) {
      absl::SleepFor(absl::Milliseconds(100));
    }

    // The rough edges, one after another, each while the agent keeps sampling.
    s.api->SendRaw("{\"type\":\"MODIFIED\",\"object\":{not json");
    s.api->SendExpired();  // 410: the agent relists
    EXPECT_TRUE(s.api->WaitForRequests(KubeRequestKind::kList, 2, absl::Seconds(10)));
    EXPECT_TRUE(s.api->WaitForRequests(KubeRequestKind::kWatch, 2, absl::Seconds(10)));
    // The container has started: its id is in the pod's status now.
    s.api->UpdatePod(CheckoutPod(s.pod_uid, s.container_id, /*started=*/true));
    absl::SleepFor(absl::Seconds(2.5));  // an interval with the id known
    // The service account token rotates; the old one is refused from now on.
    WriteFile(token_file, "token-two\n");
    s.api->set_required_token("token-two");
    s.api->DropWatches();
    EXPECT_TRUE(s.api->WaitForRequests(KubeRequestKind::kWatch, 3, absl::Seconds(10)));
    s.api->UpdatePod(CheckoutPod(s.pod_uid, s.container_id, /*started=*/true, "checkout-svc"));

    EXPECT_EQ(agent.Wait(seconds(40)), 0) << agent.output();
    const std::optional<double> cpu_after = ProcessCpuSeconds(s.container->pid());
    ASSERT_TRUE(cpu_before && cpu_after);
    s.container_cpu = *cpu_after - *cpu_before;
    s.agent_log = agent.output();
    ExpectNoSampleLost(s.agent_log);
  }
  static void TearDownTestSuite() {
    const std::string dir = s_->dir;
    delete s_;  // the container first: runc kill and delete
    std::filesystem::remove_all(dir);
  }

  // The container's OTLP resources in the order they arrived, pointing into `received`.
  static std::vector<const opentelemetry::proto::resource::v1::Resource*> ContainerResources(
      const std::vector<ReceivedExport>& received) {
    std::vector<const opentelemetry::proto::resource::v1::Resource*> resources;
    for (const ReceivedExport& r : received) {
      for (const auto& resource_profiles : r.request.resource_profiles()) {
        if (ResourceAttribute(resource_profiles.resource(), "process.pid") ==
            std::to_string(s_->container->pid())) {
          resources.push_back(&resource_profiles.resource());
        }
      }
    }
    return resources;
  }

  struct Suite {
    std::string dir;
    std::string container_id;
    std::string pod_uid;
    std::unique_ptr<KubeApiServer> api;
    std::unique_ptr<GrpcTestReceiver> receiver;
    std::unique_ptr<RuncContainer> container;
    std::string metrics_synced;
    long readyz_synced = 0;
    double container_cpu = 0;  // while sampled
    std::string agent_log;
  };
  static Suite* s_;
};
KubernetesPodTest::Suite* KubernetesPodTest::s_ = nullptr;

TEST_F(KubernetesPodTest, TheLastIntervalsCarryThePodAndItsWorkload) {
  std::vector<ReceivedExport> received = s_->receiver->received();
  auto resources = ContainerResources(received);
  ASSERT_GE(resources.size(), 4u) << s_->agent_log;
  const auto& last = *resources.back();
  EXPECT_EQ(ResourceAttribute(last, "container.id"), s_->container_id);
  EXPECT_EQ(ResourceAttribute(last, "k8s.namespace.name"), "shop");
  EXPECT_EQ(ResourceAttribute(last, "k8s.pod.name"), kPodName);
  EXPECT_EQ(ResourceAttribute(last, "k8s.pod.uid"), s_->pod_uid);
  EXPECT_EQ(ResourceAttribute(last, "k8s.container.name"), "app");
  EXPECT_EQ(ResourceAttribute(last, "k8s.node.name"), kNode);
  EXPECT_EQ(ResourceAttribute(last, "k8s.deployment.name"), "checkout");
  EXPECT_EQ(ResourceAttribute(last, "k8s.replicaset.name"), "checkout-5d9c7b8f4");
  // The annotation came in a MODIFIED event after the token rotated and the stream dropped.
  EXPECT_EQ(ResourceAttribute(last, "service.name"), "checkout-svc");
}

TEST_F(KubernetesPodTest, BeforeItsIdIsKnownTheContainerIsFoundByItsPodUid) {
  std::vector<ReceivedExport> received = s_->receiver->received();
  auto resources = ContainerResources(received);  // pointers into `received`
  ASSERT_FALSE(resources.empty());
  const auto& first = *resources.front();
  EXPECT_EQ(ResourceAttribute(first, "k8s.pod.name"), kPodName);
  EXPECT_EQ(ResourceAttribute(first, "k8s.deployment.name"), "checkout");
  EXPECT_EQ(ResourceAttribute(first, "service.name"), "checkout");  // the workload's name
  EXPECT_EQ(ResourceAttribute(first, "k8s.container.name"), "");    // not known yet
}

TEST_F(KubernetesPodTest, PprofSamplesAreLabelledAndSamplingNeverStopped) {
  std::vector<std::string> files = PprofFilesIn(s_->dir + "/out");
  ASSERT_GE(files.size(), 5u) << s_->agent_log;
  int64_t total = 0;
  for (const NamedSample& sample : SamplesOf(s_->dir + "/out", s_->container->pid())) {
    total += sample.count;
  }
  ExpectSamplesForCpuTime(total, s_->container_cpu, 99, s_->agent_log);
  // Every full 2 s interval has the container's samples: the watch's troubles never held up
  // sampling. (The last file is the part interval at the end of the run.)
  for (size_t i = 0; i + 1 < files.size(); ++i) {
    auto profile = ReadPprofFile(files[i]);
    ASSERT_TRUE(profile.ok()) << profile.status();
    int64_t samples = 0;
    for (const NamedSample& sample : NamedSamples(*profile)) {
      if (sample.pid == s_->container->pid()) samples += sample.count;
    }
    // 2 s at 99 Hz is about 198 samples of a busy CPU; a loaded machine gives the loop less.
    EXPECT_GE(samples, 20) << files[i];
  }
  auto last = ReadPprofFile(files[files.size() - 2]);
  ASSERT_TRUE(last.ok());
  int64_t labelled = 0;
  for (const NamedSample& sample : NamedSamples(*last)) {
    if (sample.pid != s_->container->pid()) continue;
    EXPECT_EQ(sample.labels.at("k8s.pod.name"), kPodName);
    EXPECT_EQ(sample.labels.at("k8s.namespace.name"), "shop");
    EXPECT_EQ(sample.labels.at("container.id"), s_->container_id);
    labelled += sample.count;
  }
  EXPECT_GT(labelled, 0);
}

TEST_F(KubernetesPodTest, TheWatchFollowedTheProtocol) {
  std::vector<KubeApiRequest> requests = s_->api->requests();
  bool rotated = false;
  int lists = 0;
  for (const KubeApiRequest& request : requests) {
    EXPECT_EQ(request.path, "/api/v1/pods");
    EXPECT_EQ(request.Query("fieldSelector"), std::string("spec.nodeName=") + kNode);
    if (!request.watch) ++lists;
    if (request.authorization == "Bearer token-two") rotated = true;
    // Once rotated, the old token is never sent again.
    if (rotated) {
      EXPECT_EQ(request.authorization, "Bearer token-two");
    }
    if (request.watch) {
      EXPECT_FALSE(request.Query("resourceVersion").empty());
    }
  }
  EXPECT_TRUE(rotated);
  EXPECT_EQ(lists, 2);  // the first list and the one after 410, not one per dropped stream
  // While synced, the agent was ready and said how many pods of its node it knew.
  EXPECT_EQ(s_->readyz_synced, 200);
  EXPECT_TRUE(absl::StrContains(s_->metrics_synced, "ember_kubernetes_synced 1"))
      << s_->metrics_synced;
  EXPECT_TRUE(absl::StrContains(s_->metrics_synced, "ember_kubernetes_pods 2"))
      << s_->metrics_synced;
  // Two pods, far from --max-pods: none evicted.
  EXPECT_TRUE(absl::StrContains(s_->metrics_synced, "\nember_kubernetes_pods_evicted_total 0\n"))
      << s_->metrics_synced;
}

// An API server that refuses the agent (RBAC missing: 403 for ever): the agent profiles all the
// same, its samples keep their container id, it is not ready and says why, and it exits cleanly.
TEST(KubernetesRefusedTest, ProfilesWithoutPodsAndIsNotReady) {
  const std::string dir = MakeTempDir();
  auto api = KubeApiServer::Start();
  ASSERT_NE(api, nullptr);
  api->FailNext(KubeRequestKind::kList, 403, 1000);
  const std::string container_id = RandomContainerId();
  const std::string pod_uid = RandomPodUid();
  api->AddPod(CheckoutPod(pod_uid, container_id, true));
  auto container = RuncContainer::Start(dir + "/container", container_id,
                                        KubepodsCgroupPath(pod_uid, container_id), kBusyLoop);
  ASSERT_NE(container, nullptr);
  WriteFile(dir + "/token", "t");
  Subprocess agent({EMBER_AGENT_BIN,
                    "--pid",
                    std::to_string(container->pid()),
                    "--sampling-hz",
                    "99",
                    "--duration",
                    "5s",
                    "--export-interval",
                    "2s",
                    "--output-dir",
                    dir + "/out",
                    "--metrics-address",
                    "127.0.0.1:0",
                    "--kube-api-server",
                    api->url(),
                    "--kube-ca-file",
                    api->ca_file(),
                    "--kube-token-file",
                    dir + "/token",
                    "--node-name",
                    kNode});
  ASSERT_TRUE(agent.WaitForOutput("attached to", seconds(15))) << agent.output();
  const std::optional<double> cpu_before = ProcessCpuSeconds(container->pid());
  ASSERT_TRUE(agent.WaitForOutput("status endpoint", seconds(15))) << agent.output();
  ASSERT_TRUE(api->WaitForRequests(KubeRequestKind::kList, 2, absl::Seconds(10)));
  auto [status, detail] = HttpGet(StatusEndpoint(agent.output()) + "/readyz");
  EXPECT_EQ(status, 503);
  EXPECT_TRUE(absl::StrContains(detail, "not been listed")) << detail;
  EXPECT_EQ(agent.Wait(seconds(30)), 0) << agent.output();
  const std::optional<double> cpu_after = ProcessCpuSeconds(container->pid());
  ASSERT_TRUE(cpu_before && cpu_after);
  // One line for the failure, not one per retry.
  const std::string log = agent.output();
  ExpectNoSampleLost(log);
  size_t lines = 0;
  for (size_t at = log.find("403"); at != std::string::npos; at = log.find("403", at + 1)) ++lines;
  EXPECT_GE(lines, 1u) << log;
  EXPECT_LE(lines, 2u) << log;
  int64_t samples = 0;
  for (const NamedSample& sample : SamplesOf(dir + "/out", container->pid())) {
    samples += sample.count;
    EXPECT_EQ(sample.labels.at("container.id"), container_id);
    EXPECT_FALSE(sample.labels.contains("k8s.pod.name"));
  }
  ExpectSamplesForCpuTime(samples, *cpu_after - *cpu_before, 99, log);
  container.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ember::testing
