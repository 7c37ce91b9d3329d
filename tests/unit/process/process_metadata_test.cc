// Process metadata over a fixture /proc tree: the executable, the container, and the pod when the
// pod index knows it.
#include "process/process_metadata.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/temp_dir.h"

namespace ember {
namespace {

using ::testing::Contains;
using ::testing::IsEmpty;

const std::string kContainerId(64, 'c');
const std::string kPodUid = "0b9f6a4e-1111-2222-3333-444455556666";

// The fixture process 4242 (/usr/bin/phases), copied as 4243 too.
void CopyFixtureProcesses(const std::string& root) {
  const std::string fixture = std::string(EMBER_TEST_DATA_DIR) + "/proc/4242";
  for (const char* pid : {"4242", "4243"}) {
    std::filesystem::copy(
        fixture, root + "/" + pid,
        std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks);
  }
}

PodInfo WebPod() {
  PodInfo pod;
  pod.uid = kPodUid;
  pod.name = "web-5d9c7b-x2x9z";
  pod.namespace_name = "shop";
  pod.service_name = "web";
  pod.containers = {{.name = "nginx", .container_id = kContainerId}};
  return pod;
}

class ProcessMetadataTest : public ::testing::Test {
 protected:
  void SetUp() override { CopyFixtureProcesses(root_.path()); }

  testing::TempDir root_{"ember-process-metadata"};
};

TEST_F(ProcessMetadataTest, ExecutableAndContainerWithoutPods) {
  ProcessTable table(root_.path());
  Process* process = table.Get(4242);
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(ProcessMetadataOf(table, nullptr, 4242),
            (ProcessMetadata{.executable_name = "phases", .executable_path = "/usr/bin/phases"}));

  process->container = ContainerRef{.id = kContainerId, .pod_uid = kPodUid};
  const ProcessMetadata metadata = ProcessMetadataOf(table, nullptr, 4242);
  EXPECT_EQ(metadata.container_id, kContainerId);
  EXPECT_EQ(metadata.service_name, "");
  EXPECT_THAT(metadata.attributes, IsEmpty());
}

TEST_F(ProcessMetadataTest, PodOfTheContainerWhenTheIndexKnowsIt) {
  ProcessTable table(root_.path());
  Process* process = table.Get(4242);
  ASSERT_NE(process, nullptr);
  process->container = ContainerRef{.id = kContainerId, .pod_uid = kPodUid};
  PodIndex pods;
  // Not (yet) in the index: the container alone.
  EXPECT_EQ(ProcessMetadataOf(table, &pods, 4242).service_name, "");
  EXPECT_THAT(ProcessMetadataOf(table, &pods, 4242).attributes, IsEmpty());

  pods.Upsert(WebPod());
  const ProcessMetadata metadata = ProcessMetadataOf(table, &pods, 4242);
  EXPECT_EQ(metadata.executable_name, "phases");
  EXPECT_EQ(metadata.container_id, kContainerId);
  EXPECT_EQ(metadata.service_name, "web");
  EXPECT_THAT(metadata.attributes, Contains(ProcessLabel{"k8s.pod.name", "web-5d9c7b-x2x9z"}));
  EXPECT_THAT(metadata.attributes, Contains(ProcessLabel{"k8s.namespace.name", "shop"}));
  EXPECT_THAT(metadata.attributes, Contains(ProcessLabel{"k8s.container.name", "nginx"}));
}

TEST_F(ProcessMetadataTest, UnknownProcessHasNone) {
  ProcessTable table(root_.path());
  EXPECT_EQ(ProcessMetadataOf(table, nullptr, 999), ProcessMetadata{});
}

TEST_F(ProcessMetadataTest, EvictedProcessIsReadAgain) {
  ProcessTable table(root_.path(), std::chrono::hours(1), ProcessTableLimits{.max_processes = 1});
  ASSERT_NE(table.Get(4242), nullptr);
  ASSERT_NE(table.Get(4243), nullptr);
  ASSERT_EQ(table.Find(4242), nullptr);
  ASSERT_TRUE(table.WasEvicted(4242));
  EXPECT_EQ(ProcessMetadataOf(table, nullptr, 4242).executable_path, "/usr/bin/phases");
  EXPECT_NE(table.Find(4242), nullptr);
}

TEST_F(ProcessMetadataTest, AttachesEachProcessOnceAndKeepsWhatIsAttached) {
  ProcessTable table(root_.path());
  // Read at their samples, as the agent does.
  ASSERT_NE(table.Get(4242), nullptr);
  ASSERT_NE(table.Get(4243), nullptr);
  IntervalProfile profile;
  profile.AddSample(4242, "phases", "main", {}, 3);
  profile.AddSample(4242, "phases", "worker", {}, 1);
  profile.AddSample(4243, "phases", "main", {}, 2);
  profile.AddSample(999, "gone", "gone", {}, 1);
  profile.AttachProcessMetadata(4243, ProcessMetadata{.executable_name = "kept"});

  AttachProcessMetadata(table, nullptr, &profile);
  ASSERT_NE(profile.MetadataOf(4242), nullptr);
  EXPECT_EQ(profile.MetadataOf(4242)->executable_path, "/usr/bin/phases");
  ASSERT_NE(profile.MetadataOf(4243), nullptr);
  EXPECT_EQ(profile.MetadataOf(4243)->executable_name, "kept");
  ASSERT_NE(profile.MetadataOf(999), nullptr);
  EXPECT_EQ(*profile.MetadataOf(999), ProcessMetadata{});
}

}  // namespace
}  // namespace ember
