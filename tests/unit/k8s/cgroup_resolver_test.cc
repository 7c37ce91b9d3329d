// The resolver over a proc tree and a cgroup tree built in a temp dir: the cgroup ids are the
// inode numbers of the fixture's cgroup directories, as bpf_get_current_cgroup_id's are.
#include "k8s/cgroup_resolver.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

const std::string kId = "3e8f6c0d2f8a4b1c9d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c";
const std::string kId2 = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
const std::string kPodUid = "0a1b2c3d-4e5f-6789-abcd-ef0123456789";
const std::string kPodSlice = "0a1b2c3d_4e5f_6789_abcd_ef0123456789";

std::string PodPath(const std::string& id) {
  return absl::StrCat("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod", kPodSlice,
                      ".slice/cri-containerd-", id, ".scope");
}

class CgroupResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ember_cgroup_resolver_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    options_.proc_root = root_ + "/proc";
    options_.cgroup_root = root_ + "/cgroup";
  }
  void TearDown() override { fs::remove_all(root_); }

  // Creates the cgroup directory and returns its inode number: the cgroup id.
  uint64_t MakeCgroup(const std::string& path) {
    fs::create_directories(options_.cgroup_root + path);
    struct stat st {};
    EXPECT_EQ(stat((options_.cgroup_root + path).c_str(), &st), 0);
    return st.st_ino;
  }

  void WriteProcCgroup(uint32_t pid, const std::string& text) {
    fs::create_directories(absl::StrCat(options_.proc_root, "/", pid));
    std::ofstream(ProcCgroupFile(pid)) << text;
  }

  std::string ProcCgroupFile(uint32_t pid) {
    return absl::StrCat(options_.proc_root, "/", pid, "/cgroup");
  }

  std::string root_;
  CgroupResolverOptions options_;
};

TEST_F(CgroupResolverTest, ResolvesContainerAndPod) {
  uint64_t id = MakeCgroup(PodPath(kId));
  WriteProcCgroup(100, absl::StrCat("0::", PodPath(kId), "\n"));
  CgroupResolver resolver(options_);
  const ContainerRef* ref = resolver.Resolve(id, 100);
  ASSERT_NE(ref, nullptr);
  EXPECT_EQ(ref->runtime, ContainerRuntime::kContainerd);
  EXPECT_EQ(ref->id, kId);
  EXPECT_EQ(ref->pod_uid, kPodUid);
}

TEST_F(CgroupResolverTest, SecondResolveDoesNotReadProc) {
  uint64_t id = MakeCgroup(PodPath(kId));
  WriteProcCgroup(100, absl::StrCat("0::", PodPath(kId), "\n"));
  CgroupResolver resolver(options_);
  ASSERT_NE(resolver.Resolve(id, 100), nullptr);
  fs::remove(ProcCgroupFile(100));
  // Another pid of the same cgroup, and the first one again: both answered from the cache.
  const ContainerRef* ref = resolver.Resolve(id, 101);
  ASSERT_NE(ref, nullptr);
  EXPECT_EQ(ref->id, kId);
  ASSERT_NE(resolver.Resolve(id, 100), nullptr);
  EXPECT_EQ(resolver.stats().proc_reads, 1u);
  EXPECT_EQ(resolver.size(), 1u);
}

TEST_F(CgroupResolverTest, NegativeResultsAreCached) {
  uint64_t id = MakeCgroup("/system.slice/sshd.service");
  WriteProcCgroup(7, "0::/system.slice/sshd.service\n");
  CgroupResolver resolver(options_);
  EXPECT_EQ(resolver.Resolve(id, 7), nullptr);
  fs::remove(ProcCgroupFile(7));
  EXPECT_EQ(resolver.Resolve(id, 7), nullptr);
  EXPECT_EQ(resolver.stats().proc_reads, 1u);
  // A definitive negative survives generations in which it is used.
  resolver.NextGeneration();
  EXPECT_EQ(resolver.Resolve(id, 7), nullptr);
  EXPECT_EQ(resolver.stats().proc_reads, 1u);
}

TEST_F(CgroupResolverTest, GoneProcessIsRetriedNextGeneration) {
  uint64_t id = MakeCgroup(PodPath(kId));
  CgroupResolver resolver(options_);
  EXPECT_EQ(resolver.Resolve(id, 555), nullptr);  // no /proc/555
  EXPECT_EQ(resolver.Resolve(id, 555), nullptr);  // cached within the generation
  EXPECT_EQ(resolver.stats().proc_reads, 1u);
  EXPECT_EQ(resolver.stats().read_failures, 1u);
  resolver.NextGeneration();
  WriteProcCgroup(556, absl::StrCat("0::", PodPath(kId), "\n"));
  const ContainerRef* ref = resolver.Resolve(id, 556);
  ASSERT_NE(ref, nullptr);
  EXPECT_EQ(ref->id, kId);
  EXPECT_EQ(resolver.stats().proc_reads, 2u);
}

TEST_F(CgroupResolverTest, CgroupIdMismatchIsNotTrusted) {
  // The pid moved to another container between the sample and the read.
  uint64_t sampled = MakeCgroup(PodPath(kId));
  MakeCgroup(PodPath(kId2));
  WriteProcCgroup(100, absl::StrCat("0::", PodPath(kId2), "\n"));
  CgroupResolver resolver(options_);
  EXPECT_EQ(resolver.Resolve(sampled, 100), nullptr);
  EXPECT_EQ(resolver.stats().id_mismatches, 1u);
  // Next generation, a pid really in that cgroup resolves it.
  resolver.NextGeneration();
  WriteProcCgroup(200, absl::StrCat("0::", PodPath(kId), "\n"));
  const ContainerRef* ref = resolver.Resolve(sampled, 200);
  ASSERT_NE(ref, nullptr);
  EXPECT_EQ(ref->id, kId);
}

TEST_F(CgroupResolverTest, MissingCgroupDirectoryIsNotAMismatch) {
  // The cgroup mount is elsewhere (or the cgroup already removed): nothing to confirm against,
  // so the v2 path is trusted.
  WriteProcCgroup(100, absl::StrCat("0::/system.slice/docker-", kId, ".scope\n"));
  options_.cgroup_root = root_ + "/no-such-mount";
  CgroupResolver resolver(options_);
  const ContainerRef* ref = resolver.Resolve(12345, 100);
  ASSERT_NE(ref, nullptr);
  EXPECT_EQ(ref->runtime, ContainerRuntime::kDocker);
  EXPECT_EQ(ref->id, kId);
}

TEST_F(CgroupResolverTest, V1LinesDoNotAnswerForACgroupId) {
  // A hybrid host: every process is in the v2 root, so its id cannot name the v1 container.
  uint64_t root_id = MakeCgroup("/");
  WriteProcCgroup(100, absl::StrCat("12:pids:/docker/", kId, "\n0::/\n"));
  WriteProcCgroup(101, absl::StrCat("12:pids:/docker/", kId, "\n"));
  CgroupResolver resolver(options_);
  EXPECT_EQ(resolver.Resolve(root_id, 100), nullptr);
  EXPECT_EQ(resolver.Resolve(root_id + 1, 101), nullptr);
  EXPECT_EQ(resolver.stats().id_mismatches, 0u);
}

TEST_F(CgroupResolverTest, SizeIsBounded) {
  options_.max_entries = 3;
  CgroupResolver resolver(options_);
  std::vector<uint64_t> ids;
  for (uint32_t pid = 1; pid <= 10; ++pid) {
    std::string path = absl::StrCat("/system.slice/unit", pid, ".service");
    ids.push_back(MakeCgroup(path));
    WriteProcCgroup(pid, absl::StrCat("0::", path, "\n"));
    resolver.Resolve(ids.back(), pid);
    EXPECT_LE(resolver.size(), 3u);
  }
  EXPECT_EQ(resolver.size(), 3u);
  EXPECT_EQ(resolver.stats().evictions, 7u);
}

TEST_F(CgroupResolverTest, NextGenerationDropsUnusedEntries) {
  uint64_t a = MakeCgroup(PodPath(kId));
  uint64_t b = MakeCgroup(PodPath(kId2));
  WriteProcCgroup(1, absl::StrCat("0::", PodPath(kId), "\n"));
  WriteProcCgroup(2, absl::StrCat("0::", PodPath(kId2), "\n"));
  CgroupResolver resolver(options_);
  ASSERT_NE(resolver.Resolve(a, 1), nullptr);
  ASSERT_NE(resolver.Resolve(b, 2), nullptr);
  resolver.NextGeneration();
  EXPECT_EQ(resolver.size(), 2u);
  ASSERT_NE(resolver.Resolve(a, 1), nullptr);  // only `a` is used in this generation
  resolver.NextGeneration();
  EXPECT_EQ(resolver.size(), 1u);
  ASSERT_NE(resolver.Resolve(b, 2), nullptr);  // read again
  EXPECT_EQ(resolver.stats().proc_reads, 3u);
}

TEST_F(CgroupResolverTest, ResolveProcessReadsV1LinesOnHybridHosts) {
  // Docker's cgroupfs driver on a hybrid host: the container only in the v1 hierarchies.
  uint64_t root_id = MakeCgroup("/");
  WriteProcCgroup(100, absl::StrCat("12:pids:/docker/", kId, "\n0::/\n"));
  WriteProcCgroup(101, "12:pids:/\n0::/\n");
  options_.read_v1_lines = true;
  CgroupResolver resolver(options_);
  std::optional<ContainerRef> ref = resolver.ResolveProcess(root_id, 100);
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->runtime, ContainerRuntime::kDocker);
  EXPECT_EQ(ref->id, kId);
  // Another process in the same v2 cgroup is not in that container.
  EXPECT_FALSE(resolver.ResolveProcess(root_id, 101).has_value());
  // Without v1 lines to read (a unified host), the v2 answer is final.
  options_.read_v1_lines = false;
  CgroupResolver unified(options_);
  EXPECT_FALSE(unified.ResolveProcess(root_id, 100).has_value());
}

TEST_F(CgroupResolverTest, PathOutsideTheAgentsCgroupNamespaceIsTakenAsItIs) {
  // An agent in a pod of its own sees the host's cgroups relative to its namespace root; such a
  // path is not under the mount, and a directory that happens to be there must not veto it.
  const std::string path = absl::StrCat("/../..", PodPath(kId));
  MakeCgroup(PodPath(kId));
  WriteProcCgroup(100, absl::StrCat("0::", path, "\n"));
  CgroupResolver resolver(options_);
  const ContainerRef* ref = resolver.Resolve(987654321, 100);
  ASSERT_NE(ref, nullptr);
  EXPECT_EQ(ref->id, kId);
  EXPECT_EQ(ref->pod_uid, kPodUid);
  EXPECT_EQ(resolver.stats().id_mismatches, 0u);
}

TEST(UnifiedCgroupMountTest, FindsTheCgroup2Mount) {
  EXPECT_EQ(UnifiedCgroupMount("sysfs /sys sysfs rw 0 0\n"
                               "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n"),
            "/sys/fs/cgroup");
  // Hybrid: v1 controllers, and v2 under unified/.
  EXPECT_EQ(UnifiedCgroupMount("tmpfs /sys/fs/cgroup tmpfs rw 0 0\n"
                               "cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n"
                               "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"),
            "/sys/fs/cgroup/unified");
  EXPECT_EQ(UnifiedCgroupMount("cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n"), "");
  EXPECT_EQ(UnifiedCgroupMount(""), "");
  EXPECT_EQ(UnifiedCgroupMount("garbage\n\n  \ncgroup2\n"), "");
}

TEST(HasCgroupV1LinesTest, TellsHybridFromUnified) {
  EXPECT_FALSE(HasCgroupV1Lines("0::/user.slice\n"));
  EXPECT_TRUE(HasCgroupV1Lines("4:memory:/x\n0::/\n"));
  EXPECT_TRUE(HasCgroupV1Lines("9:name=systemd:/\n"));
  EXPECT_FALSE(HasCgroupV1Lines(""));
  EXPECT_FALSE(HasCgroupV1Lines("x:memory:/\n:cpu:/\n0::/\n"));
}

}  // namespace
}  // namespace ember
