// ParsePod on Pod objects as the API server and kubectl print them (fixtures under tests/data/k8s),
// the workload and service.name rules, and objects that are broken in every way a proxy, an old
// API server or a hand-written manifest can break them.
#include "k8s/pod_metadata.h"

#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ember {

void PrintTo(const PodWorkload& w, std::ostream* os) {
  *os << "{deployment=" << w.deployment << " replicaset=" << w.replicaset
      << " daemonset=" << w.daemonset << " statefulset=" << w.statefulset << " job=" << w.job
      << " cronjob=" << w.cronjob << "}";
}

namespace {

using Json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Attributes = std::vector<std::pair<std::string, std::string>>;

const std::string kDataDir = std::string(EMBER_TEST_DATA_DIR) + "/k8s/";

std::string ReadText(const std::string& name) {
  std::ifstream in(kDataDir + name, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << kDataDir + name;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

Json Load(const std::string& name) {
  Json json = Json::parse(ReadText(name), nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(json.is_discarded()) << name << " is not valid JSON";
  return json;
}

PodInfo MustParse(const Json& json) {
  absl::StatusOr<PodInfo> pod = ParsePod(json);
  EXPECT_TRUE(pod.ok()) << pod.status();
  return pod.ok() ? *std::move(pod) : PodInfo{};
}

// (name, id) pairs, for compact expectations.
std::vector<std::pair<std::string, std::string>> Containers(const PodInfo& pod) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const PodContainer& c : pod.containers) out.emplace_back(c.name, c.container_id);
  return out;
}

// A minimal pod: just what ParsePod requires, plus `metadata` members merged in.
Json MinimalPod(Json metadata_extra = Json::object()) {
  Json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"uid", "11111111-2222-4333-8444-555555555555"}, {"name", "p"}, {"namespace", "ns"}}}};
  pod["metadata"].update(metadata_extra);
  return pod;
}

Json Owner(const std::string& kind, const std::string& name, bool controller = true) {
  return {{"apiVersion", kind == "Job" ? "batch/v1" : "apps/v1"},
          {"kind", kind},
          {"name", name},
          {"uid", "0f0f0f0f-1e1e-4d2d-8c3c-4b4b4b4b4b4b"},
          {"controller", controller},
          {"blockOwnerDeletion", true}};
}

// The workload of a pod whose ownerReferences field is `owners`, whatever it is.
PodWorkload WorkloadOfField(Json owners, Json labels = Json::object()) {
  return MustParse(MinimalPod({{"ownerReferences", std::move(owners)}, {"labels", labels}}))
      .workload;
}

// Owners as a vector, not a Json: `Json x = {owner}` makes an array under GCC but a copy of
// `owner` under clang.
PodWorkload WorkloadOf(const std::vector<Json>& owners, Json labels = Json::object()) {
  return WorkloadOfField(Json(owners), std::move(labels));
}

const std::string kCheckoutId = "3e8f6c0d2f8a4b1c9d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c";
const std::string kIstioProxyId =
    "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
const std::string kIstioInitId = "0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d";

TEST(ParsePodTest, DeploymentPodWithContainerd) {
  PodInfo pod = MustParse(Load("deployment_pod.json"));
  EXPECT_EQ(pod.uid, "5f3c8a2e-1b4d-4c6e-9f8a-7b6c5d4e3f21");
  EXPECT_EQ(pod.name, "checkout-5d8f7b6c9d-x7kq2");
  EXPECT_EQ(pod.namespace_name, "shop");
  EXPECT_EQ(pod.node_name, "ip-10-0-12-34.eu-west-1.compute.internal");
  EXPECT_EQ(pod.resource_version, "48213377");
  EXPECT_EQ(pod.workload,
            (PodWorkload{.deployment = "checkout", .replicaset = "checkout-5d8f7b6c9d"}));
  // No annotation, no app.kubernetes.io/name label ("app" is not the well-known one): the
  // Deployment.
  EXPECT_EQ(pod.service_name, "checkout");
  // Spec order, init containers after the app containers.
  EXPECT_THAT(Containers(pod),
              ElementsAre(std::pair<std::string, std::string>("checkout", kCheckoutId),
                          std::pair<std::string, std::string>("istio-proxy", kIstioProxyId),
                          std::pair<std::string, std::string>("istio-init", kIstioInitId)));
}

TEST(ParsePodTest, DaemonSetPodWithCrio) {
  PodInfo pod = MustParse(Load("daemonset_pod.json"));
  EXPECT_EQ(pod.namespace_name, "kube-system");
  EXPECT_EQ(pod.workload, (PodWorkload{.daemonset = "logging-fluent-bit"}));
  // The well-known label beats the DaemonSet's Helm-prefixed name.
  EXPECT_EQ(pod.service_name, "fluent-bit");
  EXPECT_THAT(
      Containers(pod),
      ElementsAre(std::pair<std::string, std::string>(
          "fluent-bit", "7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a09f8e")));
}

TEST(ParsePodTest, StatefulSetPodWithDockerAndServiceNameAnnotation) {
  PodInfo pod = MustParse(Load("statefulset_pod.json"));
  EXPECT_EQ(pod.name, "postgres-0");
  EXPECT_EQ(pod.workload, (PodWorkload{.statefulset = "postgres"}));
  // The annotation beats app.kubernetes.io/name=postgresql and the StatefulSet.
  EXPECT_EQ(pod.service_name, "orders-db");
  EXPECT_THAT(Containers(pod),
              ElementsAre(std::pair<std::string, std::string>(
                              "postgresql",
                              "9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0"),
                          std::pair<std::string, std::string>(
                              "init-chmod-data",
                              "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f809")));
}

TEST(ParsePodTest, CronJobPod) {
  PodInfo pod = MustParse(Load("cronjob_pod.json"));
  EXPECT_EQ(pod.workload,
            (PodWorkload{.job = "nightly-report-29400840", .cronjob = "nightly-report"}));
  EXPECT_EQ(pod.workload.TopName(), "nightly-report");
  EXPECT_EQ(pod.service_name, "nightly-report");
  // A finished container keeps its id: samples taken before it exited still arrive.
  ASSERT_EQ(pod.containers.size(), 1u);
  EXPECT_EQ(pod.containers[0].container_id,
            "5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d");
}

TEST(ParsePodTest, BarePodServiceNameIsTheContainerName) {
  PodInfo pod = MustParse(Load("bare_pod.json"));
  EXPECT_EQ(pod.workload, PodWorkload{});
  EXPECT_EQ(pod.workload.TopName(), "");
  EXPECT_EQ(pod.service_name, "");
  ASSERT_EQ(pod.containers.size(), 1u);
  ContainerMetadata m = ContainerMetadataOf(pod, pod.containers[0]);
  EXPECT_EQ(m.service_name, "shell");
  EXPECT_EQ(m.container_name, "shell");
  EXPECT_EQ(m.pod_name, "debug-shell");
}

TEST(ParsePodTest, InitSidecarAndEphemeralContainers) {
  PodInfo pod = MustParse(Load("init_ephemeral_pod.json"));
  EXPECT_EQ(pod.workload, (PodWorkload{.deployment = "ledger", .replicaset = "ledger-6b7c4d9f58"}));
  EXPECT_EQ(pod.service_name, "ledger");
  EXPECT_THAT(
      Containers(pod),
      ElementsAre(
          std::pair<std::string, std::string>(
              "ledger", "d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5"),
          std::pair<std::string, std::string>(
              "migrate", "e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6"),
          std::pair<std::string, std::string>(
              "log-shipper", "f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7"),
          std::pair<std::string, std::string>(
              "debugger-x2lzp",
              "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0")));
}

TEST(ParsePodTest, PendingPodWithoutStatusesOrNode) {
  PodInfo pod = MustParse(Load("pending_pod.json"));
  EXPECT_EQ(pod.node_name, "");
  EXPECT_EQ(pod.workload.deployment, "checkout");
  EXPECT_THAT(Containers(pod), ElementsAre(std::pair<std::string, std::string>("checkout", "")));
}

TEST(ParsePodTest, KubectlPodList) {
  Json list = Load("pod_list.json");
  // The List itself is not a Pod, and says so.
  absl::StatusOr<PodInfo> whole = ParsePod(list);
  ASSERT_FALSE(whole.ok());
  EXPECT_EQ(whole.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(whole.status().message(), HasSubstr("\"List\""));

  ASSERT_TRUE(list["items"].is_array());
  std::vector<PodInfo> pods;
  for (const Json& item : list["items"]) pods.push_back(MustParse(item));
  ASSERT_EQ(pods.size(), 3u);
  EXPECT_EQ(pods[0].workload.deployment, "checkout");
  EXPECT_EQ(pods[1].workload.daemonset, "logging-fluent-bit");
  // A static pod's mirror is owned by its Node: no workload, and no service name but the
  // container's.
  EXPECT_EQ(pods[2].name, "etcd-ip-10-0-12-34.eu-west-1.compute.internal");
  EXPECT_EQ(pods[2].workload, PodWorkload{});
  EXPECT_EQ(pods[2].service_name, "");
  ASSERT_EQ(pods[2].containers.size(), 1u);
  EXPECT_EQ(ContainerMetadataOf(pods[2], pods[2].containers[0]).service_name, "etcd");
}

TEST(ParsePodTest, ListItemsWithoutKindAreAccepted) {
  // The API server leaves kind and apiVersion out of a PodList's items.
  Json pod = Load("bare_pod.json");
  pod.erase("kind");
  pod.erase("apiVersion");
  EXPECT_EQ(MustParse(pod).name, "debug-shell");
}

TEST(ServiceNameTest, Precedence) {
  Json pod = Load("deployment_pod.json");
  EXPECT_EQ(MustParse(pod).service_name, "checkout");  // the workload
  pod["metadata"]["labels"]["app.kubernetes.io/name"] = "checkout-service";
  EXPECT_EQ(MustParse(pod).service_name, "checkout-service");  // label over workload
  pod["metadata"]["annotations"]["resource.opentelemetry.io/service.name"] = "shop-checkout";
  EXPECT_EQ(MustParse(pod).service_name, "shop-checkout");  // annotation over label
}

TEST(ServiceNameTest, EmptyOrNonStringValuesFallThrough) {
  Json pod = Load("deployment_pod.json");
  pod["metadata"]["labels"]["app.kubernetes.io/name"] = "checkout-service";
  pod["metadata"]["annotations"]["resource.opentelemetry.io/service.name"] = "";
  EXPECT_EQ(MustParse(pod).service_name, "checkout-service");
  pod["metadata"]["annotations"]["resource.opentelemetry.io/service.name"] = 42;
  EXPECT_EQ(MustParse(pod).service_name, "checkout-service");
  pod["metadata"]["labels"]["app.kubernetes.io/name"] = Json::array({"a"});
  EXPECT_EQ(MustParse(pod).service_name, "checkout");
}

TEST(ServiceNameTest, PodServiceNameBeatsContainerName) {
  PodInfo pod = MustParse(Load("statefulset_pod.json"));
  for (const PodContainer& c : pod.containers) {
    EXPECT_EQ(ContainerMetadataOf(pod, c).service_name, "orders-db") << c.name;
  }
}

TEST(WorkloadTest, ReplicaSetWithPodTemplateHashLabel) {
  EXPECT_EQ(WorkloadOf({Owner("ReplicaSet", "api-gateway-7d4b9c8f6b")},
                       {{"pod-template-hash", "7d4b9c8f6b"}}),
            (PodWorkload{.deployment = "api-gateway", .replicaset = "api-gateway-7d4b9c8f6b"}));
  // The label is authoritative: a ReplicaSet whose name does not end in it is not the
  // Deployment's, whatever its shape.
  EXPECT_EQ(WorkloadOf({Owner("ReplicaSet", "api-gateway-7d4b9c8f6b")},
                       {{"pod-template-hash", "5c6f8d9b7"}}),
            (PodWorkload{.replicaset = "api-gateway-7d4b9c8f6b"}));
}

TEST(WorkloadTest, ReplicaSetWithoutLabelNeedsAHashShapedSuffix) {
  EXPECT_EQ(WorkloadOf({Owner("ReplicaSet", "web-7d4b9c8f6b")}).deployment, "web");
  EXPECT_EQ(WorkloadOf({Owner("ReplicaSet", "web-5c6f8d")}).deployment, "web");
  // Hand-made ReplicaSets: letters or digits a hash never has, too short, or no dash at all.
  EXPECT_EQ(WorkloadOf({Owner("ReplicaSet", "web-backend")}).deployment, "");
  EXPECT_EQ(WorkloadOf({Owner("ReplicaSet", "web-v2")}).deployment, "");
  EXPECT_EQ(WorkloadOf({Owner("ReplicaSet", "web-bcdfdd")}).deployment, "web");
  EXPECT_EQ(WorkloadOf({Owner("ReplicaSet", "web-bcdfgh")}).deployment, "");
  EXPECT_EQ(WorkloadOf({Owner("ReplicaSet", "web-1234567890")}).deployment, "");
  EXPECT_EQ(WorkloadOf({Owner("ReplicaSet", "web-5c6f8")}).deployment, "");
  EXPECT_EQ(WorkloadOf({Owner("ReplicaSet", "frontend")}), (PodWorkload{.replicaset = "frontend"}));
  EXPECT_EQ(WorkloadOf({Owner("ReplicaSet", "web-7d4b9c8f6bb")}).deployment, "");  // 11 chars
}

TEST(WorkloadTest, JobOfACronJob) {
  EXPECT_EQ(WorkloadOf({Owner("Job", "db-backup-29400840")}),
            (PodWorkload{.job = "db-backup-29400840", .cronjob = "db-backup"}));
  EXPECT_EQ(WorkloadOf({Owner("Job", "db-backup-294008401")}).cronjob, "db-backup");
  // Hand-named Jobs are their own workload.
  EXPECT_EQ(WorkloadOf({Owner("Job", "migrate-2024")}), (PodWorkload{.job = "migrate-2024"}));
  EXPECT_EQ(WorkloadOf({Owner("Job", "report-2940084a")}).cronjob, "");
  EXPECT_EQ(WorkloadOf({Owner("Job", "-29400840")}).cronjob, "");
  EXPECT_EQ(WorkloadOf({Owner("Job", "29400840")}).cronjob, "");
  EXPECT_EQ(WorkloadOf({Owner("Job", "db-backup-29400840")}).TopName(), "db-backup");
  EXPECT_EQ(WorkloadOf({Owner("Job", "migrate-2024")}).TopName(), "migrate-2024");
}

TEST(WorkloadTest, ControllerOwnerWinsElseTheFirst) {
  EXPECT_EQ(WorkloadOf({Owner("StatefulSet", "a", false), Owner("DaemonSet", "b", true)}),
            (PodWorkload{.daemonset = "b"}));
  Json no_flag = Owner("StatefulSet", "a");
  no_flag.erase("controller");
  EXPECT_EQ(WorkloadOf({no_flag, Owner("DaemonSet", "b", false)}),
            (PodWorkload{.statefulset = "a"}));
  // "controller": "true" is not a boolean: not the controller, but still the first owner.
  Json string_flag = Owner("DaemonSet", "b");
  string_flag["controller"] = "true";
  EXPECT_EQ(WorkloadOf({Owner("StatefulSet", "a", false), string_flag}),
            (PodWorkload{.statefulset = "a"}));
}

TEST(WorkloadTest, KindsOutsideTheConventionsAndOtherApiGroups) {
  EXPECT_EQ(WorkloadOf({Owner("Node", "node-1")}), PodWorkload{});
  EXPECT_EQ(WorkloadOf({Owner("Rollout", "checkout")}), PodWorkload{});
  Json kruise = Owner("StatefulSet", "redis");
  kruise["apiVersion"] = "apps.kruise.io/v1beta1";
  EXPECT_EQ(WorkloadOf({kruise}), (PodWorkload{.statefulset = "redis"}));
}

TEST(WorkloadTest, MalformedOwnerReferencesAreSkipped) {
  Json bad_kind = Owner("DaemonSet", "x");
  bad_kind["kind"] = 7;
  Json bad_name = Owner("DaemonSet", "x");
  bad_name["name"] = nullptr;
  EXPECT_EQ(WorkloadOf({bad_kind, bad_name, "DaemonSet", 12, Owner("StatefulSet", "ok")}),
            (PodWorkload{.statefulset = "ok"}));
  EXPECT_EQ(WorkloadOfField(Owner("DaemonSet", "not-in-an-array")), PodWorkload{});
  EXPECT_EQ(WorkloadOfField("DaemonSet"), PodWorkload{});
  EXPECT_EQ(WorkloadOf({Owner("DaemonSet", "")}), PodWorkload{});
}

TEST(WorkloadTest, TopNamePrecedence) {
  PodWorkload w{.deployment = "d",
                .replicaset = "r",
                .daemonset = "ds",
                .statefulset = "s",
                .job = "j",
                .cronjob = "c"};
  EXPECT_EQ(w.TopName(), "d");
  w.deployment.clear();
  EXPECT_EQ(w.TopName(), "c");
  w.cronjob.clear();
  EXPECT_EQ(w.TopName(), "r");
  w.replicaset.clear();
  EXPECT_EQ(w.TopName(), "ds");
  w.daemonset.clear();
  EXPECT_EQ(w.TopName(), "s");
  w.statefulset.clear();
  EXPECT_EQ(w.TopName(), "j");
}

// One app container whose status carries `container_id` verbatim.
std::string IdFromStatus(Json container_id) {
  Json pod = MinimalPod();
  pod["spec"] = {{"containers", {{{"name", "app"}}}}};
  pod["status"] = {{"containerStatuses", {{{"name", "app"}, {"containerID", container_id}}}}};
  PodInfo info = MustParse(pod);
  EXPECT_EQ(info.containers.size(), 1u);
  return info.containers.empty() ? "<none>" : info.containers[0].container_id;
}

TEST(PodContainerIdTest, RuntimePrefixesAndIdShape) {
  const std::string id(kCheckoutId);
  EXPECT_EQ(IdFromStatus("containerd://" + id), id);
  EXPECT_EQ(IdFromStatus("cri-o://" + id), id);
  EXPECT_EQ(IdFromStatus("docker://" + id), id);
  // Ids that no cgroup path carries, so that could never match a sample.
  std::string upper = id;
  upper[0] = 'E';
  EXPECT_EQ(IdFromStatus("containerd://" + upper), "");
  EXPECT_EQ(IdFromStatus("containerd://" + id.substr(1)), "");
  EXPECT_EQ(IdFromStatus("containerd://" + id + "0"), "");
  EXPECT_EQ(IdFromStatus(id), "");  // no runtime prefix
  EXPECT_EQ(IdFromStatus("containerd://"), "");
  EXPECT_EQ(IdFromStatus(""), "");
  EXPECT_EQ(IdFromStatus("containerd://" + id.substr(0, 60) + "zzzz"), "");
  EXPECT_EQ(IdFromStatus(12345), "");
  EXPECT_EQ(IdFromStatus(nullptr), "");
}

absl::Status ParseError(const Json& json) {
  absl::StatusOr<PodInfo> pod = ParsePod(json);
  return pod.ok() ? absl::OkStatus() : pod.status();
}

TEST(ParsePodErrorTest, NotAnObject) {
  for (const Json& json : {Json(), Json::array(), Json("pod"), Json(3.5), Json(true)}) {
    absl::Status status = ParseError(json);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << json.dump();
    EXPECT_THAT(status.message(), HasSubstr("expected a JSON object")) << json.dump();
  }
}

TEST(ParsePodErrorTest, MalformedAndTruncatedText) {
  // What a watcher holds after parsing a broken line without exceptions.
  for (const std::string& text :
       {std::string("{\"metadata\": {\"uid\": "), std::string("not json"), std::string(""),
        ReadText("deployment_pod.json").substr(0, 1000)}) {
    Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(json.is_discarded());
    absl::Status status = ParseError(json);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("Pod object"));
  }
}

TEST(ParsePodErrorTest, MetadataMissingOrNotAnObject) {
  EXPECT_THAT(ParseError(Json{{"kind", "Pod"}}).message(), HasSubstr("metadata is missing"));
  EXPECT_THAT(ParseError(Json{{"metadata", "x"}}).message(),
              HasSubstr("metadata is a string, not an object"));
  EXPECT_THAT(ParseError(Json{{"metadata", Json::array()}}).message(),
              HasSubstr("metadata is a array, not an object"));
}

TEST(ParsePodErrorTest, RequiredFieldsNamed) {
  for (const char* field : {"uid", "name", "namespace"}) {
    Json pod = Load("deployment_pod.json");
    pod["metadata"].erase(field);
    absl::Status missing = ParseError(pod);
    EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(missing.message(), HasSubstr(absl::StrCat("metadata.", field, " is missing")));

    pod["metadata"][field] = nullptr;
    EXPECT_THAT(ParseError(pod).message(),
                HasSubstr(absl::StrCat("metadata.", field, " is missing")));
    pod["metadata"][field] = 12345;
    EXPECT_THAT(ParseError(pod).message(),
                HasSubstr(absl::StrCat("metadata.", field, " is a number, not a string")));
    pod["metadata"][field] = Json::object();
    EXPECT_THAT(ParseError(pod).message(),
                HasSubstr(absl::StrCat("metadata.", field, " is a object, not a string")));
    pod["metadata"][field] = "";
    EXPECT_THAT(ParseError(pod).message(),
                HasSubstr(absl::StrCat("metadata.", field, " is empty")));
  }
  // Once namespace and name are known, the message names the pod.
  Json pod = Load("deployment_pod.json");
  pod["metadata"].erase("uid");
  EXPECT_EQ(ParseError(pod).message(),
            "Pod shop/checkout-5d8f7b6c9d-x7kq2: metadata.uid is missing");
}

TEST(ParsePodErrorTest, OtherKinds) {
  // A watch ERROR event carries a Status object, not a Pod.
  Json status = {{"kind", "Status"},
                 {"apiVersion", "v1"},
                 {"metadata", Json::object()},
                 {"status", "Failure"},
                 {"message", "too old resource version: 48213377 (48360001)"},
                 {"reason", "Expired"},
                 {"code", 410}};
  EXPECT_THAT(ParseError(status).message(), HasSubstr("kind is \"Status\""));
}

TEST(ParsePodTest, WrongTypesOfOptionalFieldsAreIgnored) {
  Json pod = Load("deployment_pod.json");
  pod["metadata"]["resourceVersion"] = 48213377;
  pod["metadata"]["labels"] = Json::array({"pod-template-hash=5d8f7b6c9d"});
  pod["metadata"]["annotations"] = "resource.opentelemetry.io/service.name=x";
  pod["spec"]["nodeName"] = Json::object();
  pod["spec"]["initContainers"] = "istio-init";
  pod["spec"]["containers"] = {{{"name", "checkout"}}, "istio-proxy", {{"name", 7}}, nullptr};
  pod["status"]["containerStatuses"] = {{"name", "checkout"}};  // an object, not an array
  pod["status"]["initContainerStatuses"] = {
      42, {{"name", "istio-init"}, {"containerID", {{"id", "x"}}}}};
  PodInfo info = MustParse(pod);
  EXPECT_EQ(info.resource_version, "");
  EXPECT_EQ(info.node_name, "");
  // Without the label the hash-shape rule still finds the Deployment.
  EXPECT_EQ(info.workload.deployment, "checkout");
  EXPECT_EQ(info.service_name, "checkout");
  EXPECT_THAT(Containers(info), ElementsAre(std::pair<std::string, std::string>("checkout", ""),
                                            std::pair<std::string, std::string>("istio-init", "")));

  Json odd = MinimalPod();
  odd["spec"] = "spec";
  odd["status"] = Json::array();
  PodInfo odd_info = MustParse(odd);
  EXPECT_THAT(odd_info.containers, IsEmpty());
  EXPECT_EQ(odd_info.node_name, "");
}

TEST(ParsePodTest, StatusWithoutSpecEntryAndDuplicateNames) {
  Json pod = MinimalPod();
  pod["spec"] = {{"containers", {{{"name", "a"}}, {{"name", "a"}}}},
                 {"initContainers", {{{"name", "a"}}, {{"name", "init"}}}}};
  pod["status"] = {
      {"containerStatuses",
       {{{"name", "a"}, {"containerID", "containerd://" + kCheckoutId}},
        {{"name", "only-in-status"}, {"containerID", "containerd://" + kIstioProxyId}}}},
      // "a" is an app container's name: an init status of that name must not overwrite its id.
      {"initContainerStatuses",
       {{{"name", "a"}, {"containerID", "containerd://" + kIstioInitId}}}}};
  EXPECT_THAT(Containers(MustParse(pod)),
              ElementsAre(std::pair<std::string, std::string>("a", kCheckoutId),
                          std::pair<std::string, std::string>("only-in-status", kIstioProxyId),
                          std::pair<std::string, std::string>("init", "")));
}

TEST(ParsePodTest, HugeAndOddValues) {
  Json pod = Load("deployment_pod.json");
  const std::string long_name(100000, 'n');
  pod["metadata"]["name"] = long_name;
  pod["metadata"]["labels"]["app.kubernetes.io/name"] = "caf\u00e9-\u4e2d\u6587";
  pod["metadata"]["annotations"]["deep"] =
      Json::parse(std::string(5000, '[') + std::string(5000, ']'));  // nesting nobody reads
  Json containers = Json::array();
  Json statuses = Json::array();
  for (int i = 0; i < 5000; ++i) {
    std::string name = absl::StrCat("c", i);
    std::string id = absl::StrCat(std::string(64 - absl::StrCat(i).size(), 'a'), i);
    containers.push_back({{"name", name}});
    statuses.push_back({{"name", name}, {"containerID", "containerd://" + id}});
  }
  pod["spec"]["containers"] = containers;
  pod["status"]["containerStatuses"] = statuses;
  pod["spec"].erase("initContainers");
  pod["status"].erase("initContainerStatuses");
  PodInfo info = MustParse(pod);
  EXPECT_EQ(info.name, long_name);
  EXPECT_EQ(info.service_name, "caf\u00e9-\u4e2d\u6587");
  ASSERT_EQ(info.containers.size(), 5000u);
  EXPECT_EQ(info.containers[4999].name, "c4999");
  EXPECT_EQ(info.containers[4999].container_id, std::string(60, 'a') + "4999");
}

TEST(KubernetesAttributesTest, DeploymentContainerInOrder) {
  PodInfo pod = MustParse(Load("deployment_pod.json"));
  EXPECT_EQ(KubernetesAttributes(ContainerMetadataOf(pod, pod.containers[0])),
            (Attributes{{"k8s.namespace.name", "shop"},
                        {"k8s.pod.name", "checkout-5d8f7b6c9d-x7kq2"},
                        {"k8s.pod.uid", "5f3c8a2e-1b4d-4c6e-9f8a-7b6c5d4e3f21"},
                        {"k8s.container.name", "checkout"},
                        {"k8s.node.name", "ip-10-0-12-34.eu-west-1.compute.internal"},
                        {"k8s.deployment.name", "checkout"},
                        {"k8s.replicaset.name", "checkout-5d8f7b6c9d"}}));
}

TEST(KubernetesAttributesTest, CronJobAndPodLevel) {
  PodInfo pod = MustParse(Load("cronjob_pod.json"));
  EXPECT_EQ(KubernetesAttributes(ContainerMetadataOf(pod, PodContainer{})),
            (Attributes{{"k8s.namespace.name", "batch"},
                        {"k8s.pod.name", "nightly-report-29400840-7xq4z"},
                        {"k8s.pod.uid", "8d9e0f1a-2b3c-4d5e-9f6a-7b8c9d0e1f2a"},
                        {"k8s.node.name", "ip-10-0-12-34.eu-west-1.compute.internal"},
                        {"k8s.job.name", "nightly-report-29400840"},
                        {"k8s.cronjob.name", "nightly-report"}}));
  EXPECT_THAT(KubernetesAttributes(ContainerMetadata{}), IsEmpty());
}

TEST(KubernetesAttributesTest, DaemonSetAndStatefulSet) {
  PodInfo ds = MustParse(Load("daemonset_pod.json"));
  Attributes a = KubernetesAttributes(ContainerMetadataOf(ds, ds.containers[0]));
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a.back(),
            (std::pair<std::string, std::string>("k8s.daemonset.name", "logging-fluent-bit")));
  PodInfo sts = MustParse(Load("statefulset_pod.json"));
  a = KubernetesAttributes(ContainerMetadataOf(sts, sts.containers[0]));
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a.back(), (std::pair<std::string, std::string>("k8s.statefulset.name", "postgres")));
}

}  // namespace
}  // namespace ember
