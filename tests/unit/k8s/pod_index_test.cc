// PodIndex: lookups by container id and pod uid as watch events and relists arrive, the
// container map kept consistent through restarts, moves and deletions, the max_pods bound, and
// readers racing a writer.
#include "k8s/pod_index.h"

#include <atomic>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ember {
namespace {

const std::string kIdA = "3e8f6c0d2f8a4b1c9d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c";
const std::string kIdB = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
const std::string kIdC = "0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d";

// A 64-hex id that differs per n.
std::string Id(int n) {
  std::string digits = absl::StrCat(n);
  return std::string(64 - digits.size(), 'f') + digits;
}

PodInfo Pod(const std::string& uid, const std::string& name, std::vector<PodContainer> containers,
            const std::string& service = "") {
  PodInfo pod;
  pod.uid = uid;
  pod.name = name;
  pod.namespace_name = "shop";
  pod.node_name = "node-1";
  pod.workload.deployment = service;
  pod.service_name = service;
  pod.containers = std::move(containers);
  return pod;
}

std::string ContainerOf(const PodIndex& index, const std::string& id) {
  std::optional<ContainerMetadata> m = index.Lookup(id);
  return m ? absl::StrCat(m->pod_uid, "/", m->container_name) : "<none>";
}

TEST(PodIndexTest, LookupByContainerId) {
  PodIndex index;
  index.Upsert(Pod("uid-1", "checkout-5d8f7b6c9d-x7kq2",
                   {{"checkout", kIdA}, {"istio-proxy", kIdB}}, "checkout"));
  std::optional<ContainerMetadata> m = index.Lookup(kIdB);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->pod_uid, "uid-1");
  EXPECT_EQ(m->pod_name, "checkout-5d8f7b6c9d-x7kq2");
  EXPECT_EQ(m->namespace_name, "shop");
  EXPECT_EQ(m->node_name, "node-1");
  EXPECT_EQ(m->container_name, "istio-proxy");
  EXPECT_EQ(m->workload.deployment, "checkout");
  EXPECT_EQ(m->service_name, "checkout");
  EXPECT_EQ(ContainerOf(index, kIdA), "uid-1/checkout");
  PodIndexStats stats = index.stats();
  EXPECT_EQ(stats.pods, 1u);
  EXPECT_EQ(stats.containers, 2u);
  EXPECT_EQ(stats.lookups, 2u);
  EXPECT_EQ(stats.lookup_misses, 0u);
}

TEST(PodIndexTest, ServiceNameFallsBackToTheContainerName) {
  PodIndex index;
  index.Upsert(Pod("uid-1", "debug", {{"shell", kIdA}}));
  std::optional<ContainerMetadata> m = index.Lookup(kIdA);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->service_name, "shell");
}

TEST(PodIndexTest, PodUidFallbackWhenTheIdIsNotInStatusYet) {
  PodIndex index;
  // Pending: the container exists in the spec but has no id yet.
  index.Upsert(Pod("uid-1", "checkout-5d8f7b6c9d-q9wzl", {{"checkout", ""}}, "checkout"));
  std::optional<ContainerMetadata> m = index.Lookup(kIdA, "uid-1");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->pod_uid, "uid-1");
  EXPECT_EQ(m->pod_name, "checkout-5d8f7b6c9d-q9wzl");
  EXPECT_EQ(m->container_name, "");
  EXPECT_EQ(m->service_name, "checkout");
  EXPECT_EQ(m->workload.deployment, "checkout");
  // Without the uid, the id alone is unknown; an empty id never matches the id-less container.
  EXPECT_FALSE(index.Lookup(kIdA).has_value());
  EXPECT_FALSE(index.Lookup("").has_value());
  EXPECT_FALSE(index.Lookup("", "uid-2").has_value());
  PodIndexStats stats = index.stats();
  EXPECT_EQ(stats.containers, 0u);
  EXPECT_EQ(stats.lookups, 4u);
  EXPECT_EQ(stats.pod_fallbacks, 1u);
  EXPECT_EQ(stats.lookup_misses, 3u);

  // The status arrives: the id answers with the container.
  index.Upsert(Pod("uid-1", "checkout-5d8f7b6c9d-q9wzl", {{"checkout", kIdA}}, "checkout"));
  EXPECT_EQ(ContainerOf(index, kIdA), "uid-1/checkout");
}

TEST(PodIndexTest, PodFallbackKeepsAnEmptyServiceNameOfABarePod) {
  PodIndex index;
  index.Upsert(Pod("uid-1", "debug", {{"shell", kIdA}}));
  std::optional<ContainerMetadata> m = index.Lookup(kIdB, "uid-1");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->container_name, "");
  EXPECT_EQ(m->service_name, "");  // which container is unknown, so is its name
}

TEST(PodIndexTest, ContainerIdBeatsPodUid) {
  PodIndex index;
  index.Upsert(Pod("uid-1", "a", {{"app", kIdA}}));
  index.Upsert(Pod("uid-2", "b", {{"app", kIdB}}));
  std::optional<ContainerMetadata> m = index.Lookup(kIdA, "uid-2");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->pod_uid, "uid-1");
  EXPECT_EQ(m->container_name, "app");
}

TEST(PodIndexTest, RestartedContainerDropsItsOldId) {
  PodIndex index;
  index.Upsert(Pod("uid-1", "p", {{"app", kIdA}, {"sidecar", kIdB}}));
  index.Upsert(Pod("uid-1", "p", {{"app", kIdC}, {"sidecar", kIdB}}));
  EXPECT_EQ(ContainerOf(index, kIdA), "<none>");
  EXPECT_EQ(ContainerOf(index, kIdC), "uid-1/app");
  EXPECT_EQ(ContainerOf(index, kIdB), "uid-1/sidecar");
  EXPECT_EQ(index.stats().containers, 2u);
  EXPECT_EQ(index.stats().pods, 1u);
}

TEST(PodIndexTest, ReorderedContainersPointAtTheRightEntry) {
  PodIndex index;
  index.Upsert(Pod("uid-1", "p", {{"app", kIdA}, {"sidecar", kIdB}}));
  // Same ids, other positions (an ephemeral container added in front, say).
  index.Upsert(Pod("uid-1", "p", {{"debugger", kIdC}, {"sidecar", kIdB}, {"app", kIdA}}));
  EXPECT_EQ(ContainerOf(index, kIdA), "uid-1/app");
  EXPECT_EQ(ContainerOf(index, kIdB), "uid-1/sidecar");
  EXPECT_EQ(ContainerOf(index, kIdC), "uid-1/debugger");
}

TEST(PodIndexTest, ContainerIdMovingToAnotherPod) {
  PodIndex index;
  index.Upsert(Pod("uid-1", "old", {{"app", kIdA}}));
  index.Upsert(Pod("uid-2", "new", {{"app", kIdA}}));
  EXPECT_EQ(ContainerOf(index, kIdA), "uid-2/app");
  EXPECT_EQ(index.stats().containers, 1u);

  // The old pod's next event, or its deletion, must not take the id from the new one.
  index.Upsert(Pod("uid-1", "old", {{"app", kIdB}}));
  EXPECT_EQ(ContainerOf(index, kIdA), "uid-2/app");
  EXPECT_EQ(ContainerOf(index, kIdB), "uid-1/app");
  index.Remove("uid-1");
  EXPECT_EQ(ContainerOf(index, kIdA), "uid-2/app");
  EXPECT_EQ(ContainerOf(index, kIdB), "<none>");

  // The new pod gone: nothing stale is left.
  index.Remove("uid-2");
  EXPECT_EQ(ContainerOf(index, kIdA), "<none>");
  EXPECT_EQ(index.stats().containers, 0u);
  EXPECT_EQ(index.stats().pods, 0u);
}

TEST(PodIndexTest, ContainerIdMovingWhileTheOldPodStillClaimsIt) {
  PodIndex index;
  index.Upsert(Pod("uid-1", "old", {{"app", kIdA}}));
  index.Upsert(Pod("uid-2", "new", {{"app", kIdA}}));
  // The old pod is deleted while its last object still lists the id: the id stays the new pod's.
  index.Remove("uid-1");
  EXPECT_EQ(ContainerOf(index, kIdA), "uid-2/app");
}

TEST(PodIndexTest, RemoveDropsThePodAndItsIds) {
  PodIndex index;
  index.Upsert(Pod("uid-1", "a", {{"app", kIdA}, {"sidecar", kIdB}}));
  index.Upsert(Pod("uid-2", "b", {{"app", kIdC}}));
  index.Remove("uid-1");
  EXPECT_EQ(ContainerOf(index, kIdA), "<none>");
  EXPECT_EQ(ContainerOf(index, kIdB), "<none>");
  EXPECT_FALSE(index.Lookup(kIdA, "uid-1").has_value());
  EXPECT_EQ(ContainerOf(index, kIdC), "uid-2/app");
  index.Remove("uid-1");  // twice, as a relist racing a DELETED event can
  index.Remove("never-seen");
  PodIndexStats stats = index.stats();
  EXPECT_EQ(stats.pods, 1u);
  EXPECT_EQ(stats.containers, 1u);
}

TEST(PodIndexTest, ReplaceIsExactlyTheNewList) {
  PodIndex index;
  index.Upsert(Pod("uid-1", "gone", {{"app", kIdA}}));
  index.Upsert(Pod("uid-2", "stays", {{"app", kIdB}}));
  index.Replace({Pod("uid-2", "stays", {{"app", kIdC}}), Pod("uid-3", "new", {{"app", kIdA}})});
  // kIdA now belongs to the new pod, uid-2's old id is gone, uid-1 is gone.
  EXPECT_EQ(ContainerOf(index, kIdA), "uid-3/app");
  EXPECT_EQ(ContainerOf(index, kIdB), "<none>");
  EXPECT_EQ(ContainerOf(index, kIdC), "uid-2/app");
  EXPECT_FALSE(index.Lookup("", "uid-1").has_value());
  PodIndexStats stats = index.stats();
  EXPECT_EQ(stats.pods, 2u);
  EXPECT_EQ(stats.containers, 2u);
  EXPECT_EQ(stats.replaced, 1u);

  index.Replace({});
  stats = index.stats();
  EXPECT_EQ(stats.pods, 0u);
  EXPECT_EQ(stats.containers, 0u);
  EXPECT_EQ(stats.replaced, 2u);
  EXPECT_EQ(ContainerOf(index, kIdA), "<none>");
}

TEST(PodIndexTest, ReplaceWithAUidTwiceKeepsTheLaterObject) {
  PodIndex index;
  index.Replace({Pod("uid-1", "p", {{"app", kIdA}}), Pod("uid-1", "p", {{"app", kIdB}})});
  EXPECT_EQ(ContainerOf(index, kIdA), "<none>");
  EXPECT_EQ(ContainerOf(index, kIdB), "uid-1/app");
  EXPECT_EQ(index.stats().pods, 1u);
  EXPECT_EQ(index.stats().containers, 1u);
}

TEST(PodIndexTest, PodsWithoutUidAreIgnored) {
  PodIndex index;
  index.Upsert(Pod("", "p", {{"app", kIdA}}));
  index.Replace({Pod("", "p", {{"app", kIdA}})});
  EXPECT_EQ(ContainerOf(index, kIdA), "<none>");
  EXPECT_EQ(index.stats().pods, 0u);
}

TEST(PodIndexTest, MaxPodsEvictsTheLeastRecentlyUsedPod) {
  PodIndex index(PodIndexLimits{.max_pods = 2});
  index.Upsert(Pod("uid-1", "a", {{"app", Id(1)}}));
  index.Upsert(Pod("uid-2", "b", {{"app", Id(2)}}));
  EXPECT_EQ(ContainerOf(index, Id(1)), "uid-1/app");  // uid-1 used after uid-2 was added
  index.Upsert(Pod("uid-3", "c", {{"app", Id(3)}}));
  EXPECT_EQ(ContainerOf(index, Id(3)), "uid-3/app");
  EXPECT_EQ(ContainerOf(index, Id(2)), "<none>");  // the least recently used went
  EXPECT_EQ(ContainerOf(index, Id(1)), "uid-1/app");
  EXPECT_EQ(index.stats().pods_evicted, 1u);
  EXPECT_EQ(index.stats().pods, 2u);
  EXPECT_EQ(index.stats().containers, 2u);

  // A known pod at the limit gets its updates without evicting anything.
  index.Upsert(Pod("uid-3", "c", {{"app", Id(33)}}));
  EXPECT_EQ(ContainerOf(index, Id(33)), "uid-3/app");
  EXPECT_EQ(ContainerOf(index, Id(3)), "<none>");
  EXPECT_EQ(index.stats().pods_evicted, 1u);

  // The evicted pod comes back with its next event, evicting the least recently used again.
  index.Upsert(Pod("uid-2", "b", {{"app", Id(2)}}));
  EXPECT_EQ(ContainerOf(index, Id(2)), "uid-2/app");
  EXPECT_EQ(ContainerOf(index, Id(1)), "<none>");
  EXPECT_EQ(index.stats().pods_evicted, 2u);
  EXPECT_EQ(index.stats().pods, 2u);

  // Never above the limit, however many pods come.
  for (int i = 100; i < 200; ++i) {
    index.Upsert(Pod(absl::StrCat("uid-", i), "p", {{"app", Id(i)}}));
    ASSERT_LE(index.stats().pods, 2u);
  }
  EXPECT_EQ(index.stats().pods_evicted, 102u);
  EXPECT_EQ(ContainerOf(index, Id(199)), "uid-199/app");
}

TEST(PodIndexTest, MaxPodsOnReplaceKeepsTheLastListed) {
  PodIndex index(PodIndexLimits{.max_pods = 3});
  std::vector<PodInfo> pods;
  for (int i = 0; i < 10; ++i) pods.push_back(Pod(absl::StrCat("uid-", i), "p", {{"app", Id(i)}}));
  index.Replace(std::move(pods));
  PodIndexStats stats = index.stats();
  EXPECT_EQ(stats.pods, 3u);
  EXPECT_EQ(stats.containers, 3u);
  EXPECT_EQ(stats.pods_evicted, 7u);
  EXPECT_EQ(ContainerOf(index, Id(6)), "<none>");
  EXPECT_EQ(ContainerOf(index, Id(7)), "uid-7/app");
  EXPECT_EQ(ContainerOf(index, Id(9)), "uid-9/app");
}

TEST(PodIndexTest, FixturePodListThroughParsePod) {
  std::ifstream in(std::string(EMBER_TEST_DATA_DIR) + "/k8s/pod_list.json");
  ASSERT_TRUE(in);
  nlohmann::json list = nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(in), {}),
                                              nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(list.contains("items"));
  std::vector<PodInfo> pods;
  for (const nlohmann::json& item : list["items"]) {
    absl::StatusOr<PodInfo> pod = ParsePod(item);
    ASSERT_TRUE(pod.ok()) << pod.status();
    pods.push_back(*std::move(pod));
  }
  PodIndex index;
  index.Replace(std::move(pods));
  EXPECT_EQ(index.stats().pods, 3u);
  EXPECT_EQ(index.stats().containers, 5u);  // checkout, istio-proxy, istio-init, fluent-bit, etcd
  std::optional<ContainerMetadata> m =
      index.Lookup("7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a09f8e");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->namespace_name, "kube-system");
  EXPECT_EQ(m->pod_name, "logging-fluent-bit-8xk2p");
  EXPECT_EQ(m->container_name, "fluent-bit");
  EXPECT_EQ(m->workload.daemonset, "logging-fluent-bit");
  EXPECT_EQ(m->service_name, "fluent-bit");
}

// A writer flips pods between two versions (ids swap between containers) while readers look the
// ids up: every answer must be a whole version, never an id pointing at the wrong container.
TEST(PodIndexTest, ConcurrentReadersSeeConsistentPods) {
  constexpr int kPods = 16;
  PodIndex index;
  auto version = [](int pod, bool flipped) {
    std::string uid = absl::StrCat("uid-", pod);
    std::string a = Id(pod * 2), b = Id(pod * 2 + 1);
    // Container "x-<id>" always owns id <id>, at alternating positions.
    if (flipped) std::swap(a, b);
    return Pod(uid, "p", {{"x-" + a, a}, {"x-" + b, b}});
  };
  for (int p = 0; p < kPods; ++p) index.Upsert(version(p, false));

  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::atomic<int> answered{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      for (int i = r; !stop.load(); ++i) {
        std::string id = Id(i % (kPods * 2));
        // Every id is indexed before and after each write, and a write's middle is never seen.
        std::optional<ContainerMetadata> m = index.Lookup(id);
        answered.fetch_add(1);
        if (!m || m->container_name != "x-" + id) wrong.fetch_add(1);
      }
    });
  }
  // Writes start once the readers run, and go on until they have raced many of them.
  while (answered.load() == 0) std::this_thread::yield();
  for (int round = 0; round < 2000 || answered.load() < 20000; ++round) {
    if (round % 100 == 99) {
      std::vector<PodInfo> all;
      for (int p = 0; p < kPods; ++p) all.push_back(version(p, round % 2 == 0));
      index.Replace(std::move(all));
    } else {
      index.Upsert(version(round % kPods, round % 2 == 0));
    }
  }
  stop.store(true);
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(answered.load(), 0);
  PodIndexStats stats = index.stats();
  EXPECT_EQ(stats.pods, static_cast<size_t>(kPods));
  EXPECT_EQ(stats.containers, static_cast<size_t>(kPods * 2));
  EXPECT_EQ(stats.lookup_misses, 0u);
}

}  // namespace
}  // namespace ember
