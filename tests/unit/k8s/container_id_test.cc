// Container ids from the cgroup paths the runtimes really create (systemd and cgroupfs drivers,
// cgroup v1 and v2), nesting, and lines that must not yield an id.
#include "k8s/container_id.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ember {
namespace {

const std::string kId = "3e8f6c0d2f8a4b1c9d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c";
const std::string kId2 = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
const std::string kPodUid = "0a1b2c3d-4e5f-6789-abcd-ef0123456789";
const std::string kPodSlice = "0a1b2c3d_4e5f_6789_abcd_ef0123456789";

ContainerRef Ref(ContainerRuntime runtime, const std::string& id, const std::string& pod = "") {
  return ContainerRef{runtime, id, pod};
}

TEST(ContainerIdTest, ContainerdSystemdBurstable) {
  std::string path = absl::StrCat("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod",
                                  kPodSlice, ".slice/cri-containerd-", kId, ".scope");
  EXPECT_EQ(ContainerIdFromCgroupPath(path), Ref(ContainerRuntime::kContainerd, kId, kPodUid));
  EXPECT_EQ(ContainerIdFromCgroupPath(absl::StrCat("0::", path)),
            Ref(ContainerRuntime::kContainerd, kId, kPodUid));
}

TEST(ContainerIdTest, ContainerdSystemdGuaranteedAndBestEffort) {
  EXPECT_EQ(ContainerIdFromCgroupPath(absl::StrCat("/kubepods.slice/kubepods-pod", kPodSlice,
                                                   ".slice/cri-containerd-", kId, ".scope")),
            Ref(ContainerRuntime::kContainerd, kId, kPodUid));
  EXPECT_EQ(ContainerIdFromCgroupPath(
                absl::StrCat("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod",
                             kPodSlice, ".slice/cri-containerd-", kId, ".scope")),
            Ref(ContainerRuntime::kContainerd, kId, kPodUid));
}

TEST(ContainerIdTest, ContainerdCgroupfs) {
  EXPECT_EQ(ContainerIdFromCgroupPath(absl::StrCat("/kubepods/burstable/pod", kPodUid, "/", kId)),
            Ref(ContainerRuntime::kContainerd, kId, kPodUid));
  EXPECT_EQ(ContainerIdFromCgroupPath(absl::StrCat("/kubepods/pod", kPodUid, "/", kId)),
            Ref(ContainerRuntime::kContainerd, kId, kPodUid));
  // v1 line of the same layout.
  EXPECT_EQ(ContainerIdFromCgroupPath(
                absl::StrCat("4:cpu,cpuacct:/kubepods/besteffort/pod", kPodUid, "/", kId)),
            Ref(ContainerRuntime::kContainerd, kId, kPodUid));
  // nerdctl / ctr outside Kubernetes: containerd namespace as the parent.
  EXPECT_EQ(ContainerIdFromCgroupPath(absl::StrCat("/default/", kId)),
            Ref(ContainerRuntime::kContainerd, kId));
}

TEST(ContainerIdTest, StaticPodUidWithoutDashes) {
  const std::string uid = "6f1a2b3c4d5e6f708192a3b4c5d6e7f8";
  EXPECT_EQ(ContainerIdFromCgroupPath(absl::StrCat("/kubepods.slice/kubepods-burstable.slice/"
                                                   "kubepods-burstable-pod",
                                                   uid, ".slice/cri-containerd-", kId, ".scope")),
            Ref(ContainerRuntime::kContainerd, kId, uid));
}

TEST(ContainerIdTest, Crio) {
  EXPECT_EQ(ContainerIdFromCgroupPath(
                absl::StrCat("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod",
                             kPodSlice, ".slice/crio-", kId, ".scope")),
            Ref(ContainerRuntime::kCrio, kId, kPodUid));
  // cgroupfs driver.
  EXPECT_EQ(
      ContainerIdFromCgroupPath(absl::StrCat("/kubepods/burstable/pod", kPodUid, "/crio-", kId)),
      Ref(ContainerRuntime::kCrio, kId, kPodUid));
}

TEST(ContainerIdTest, CrioConmonIsNotTheContainer) {
  EXPECT_EQ(ContainerIdFromCgroupPath(
                absl::StrCat("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod",
                             kPodSlice, ".slice/crio-conmon-", kId, ".scope")),
            std::nullopt);
}

TEST(ContainerIdTest, Docker) {
  EXPECT_EQ(ContainerIdFromCgroupPath(absl::StrCat("0::/system.slice/docker-", kId, ".scope")),
            Ref(ContainerRuntime::kDocker, kId));
  EXPECT_EQ(ContainerIdFromCgroupPath(absl::StrCat("12:pids:/docker/", kId)),
            Ref(ContainerRuntime::kDocker, kId));
  EXPECT_EQ(ContainerIdFromCgroupPath(absl::StrCat("1:name=systemd:/docker/", kId)),
            Ref(ContainerRuntime::kDocker, kId));
}

TEST(ContainerIdTest, Podman) {
  EXPECT_EQ(ContainerIdFromCgroupPath(absl::StrCat(
                "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-", kId, ".scope")),
            Ref(ContainerRuntime::kPodman, kId));
  // Rootful podman on cgroup v2 runs the payload in a "container" sub-cgroup.
  EXPECT_EQ(
      ContainerIdFromCgroupPath(absl::StrCat("/machine.slice/libpod-", kId, ".scope/container")),
      Ref(ContainerRuntime::kPodman, kId));
  // cgroupfs manager.
  EXPECT_EQ(ContainerIdFromCgroupPath(absl::StrCat("/libpod_parent/libpod-", kId)),
            Ref(ContainerRuntime::kPodman, kId));
  EXPECT_EQ(ContainerIdFromCgroupPath(absl::StrCat("/machine.slice/libpod-conmon-", kId, ".scope")),
            std::nullopt);
}

TEST(ContainerIdTest, DockershimSystemdPod) {
  // Kubernetes before 1.24 on Docker with the systemd driver.
  EXPECT_EQ(ContainerIdFromCgroupPath(
                absl::StrCat("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod",
                             kPodSlice, ".slice/docker-", kId, ".scope")),
            Ref(ContainerRuntime::kDocker, kId, kPodUid));
}

TEST(ContainerIdTest, NestedInnermostWins) {
  // A container's own sub-cgroup.
  EXPECT_EQ(ContainerIdFromCgroupPath(
                absl::StrCat("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod",
                             kPodSlice, ".slice/cri-containerd-", kId, ".scope/init")),
            Ref(ContainerRuntime::kContainerd, kId, kPodUid));
  // minikube's docker driver: CRI-O pods inside the node's cgroupfs Docker container.
  EXPECT_EQ(
      ContainerIdFromCgroupPath(absl::StrCat(
          "/docker/", kId, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod",
          kPodSlice, ".slice/crio-", kId2, ".scope")),
      Ref(ContainerRuntime::kCrio, kId2, kPodUid));
  // Docker in Docker.
  EXPECT_EQ(ContainerIdFromCgroupPath(absl::StrCat("/docker/", kId, "/docker/", kId2)),
            Ref(ContainerRuntime::kDocker, kId2));
  // A kind node: a pod's container inside the node's Docker container.
  EXPECT_EQ(
      ContainerIdFromCgroupPath(absl::StrCat("/system.slice/docker-", kId,
                                             ".scope/kubelet.slice/kubelet-kubepods.slice/"
                                             "kubelet-kubepods-burstable.slice/"
                                             "kubelet-kubepods-burstable-pod",
                                             kPodSlice, ".slice/cri-containerd-", kId2, ".scope")),
      Ref(ContainerRuntime::kContainerd, kId2, kPodUid));
  // Docker inside a pod's container: the pod encloses both, so the inner container keeps it.
  EXPECT_EQ(ContainerIdFromCgroupPath(
                absl::StrCat("/kubepods/burstable/pod", kPodUid, "/", kId, "/docker/", kId2)),
            Ref(ContainerRuntime::kDocker, kId2, kPodUid));
}

TEST(ContainerIdTest, NotContainers) {
  for (const std::string& path : std::vector<std::string>{
           std::string(""), std::string("garbage"), std::string("0::/"),
           std::string("0::/init.scope"),
           std::string("0::/user.slice/user-1000.slice/session-3.scope"),
           std::string("0::/system.slice/containerd.service"),
           std::string("/kubepods.slice/kubepods-burstable.slice"),
           absl::StrCat("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod",
                        kPodSlice, ".slice"),
           // Truncated, too short, too long, uppercase.
           absl::StrCat("/system.slice/docker-", kId.substr(0, 12), ".scope"),
           absl::StrCat("/system.slice/docker-", kId.substr(0, 63), ".scope"),
           absl::StrCat("/system.slice/docker-", kId, "a.scope"),
           absl::StrCat("/docker/", kId.substr(0, 63)), absl::StrCat("/docker/", kId, "0"),
           std::string("/system.slice/docker-"
                       "3E8F6C0D2F8A4B1C9D7E6F5A4B3C2D1E0F9A8B7C6D5E4F3A2B1C0D9E8F7A6B5C.scope"),
           absl::StrCat("/system.slice/runc-", kId, ".scope"), std::string("12:pids"),
           absl::StrCat("12:pids:docker/", kId),  // not an absolute path
       }) {
    EXPECT_EQ(ContainerIdFromCgroupPath(path), std::nullopt) << path;
  }
}

TEST(ProcCgroupTest, UnifiedLinePreferred) {
  std::string text =
      absl::StrCat("12:pids:/docker/", kId2, "\n0::/system.slice/docker-", kId, ".scope\n");
  EXPECT_EQ(ContainerFromProcCgroup(text), Ref(ContainerRuntime::kDocker, kId));
  EXPECT_EQ(UnifiedCgroupPath(text), absl::StrCat("/system.slice/docker-", kId, ".scope"));
}

TEST(ProcCgroupTest, HybridFallsBackToV1) {
  // A hybrid host: the unified line is the root, the container lives in the v1 hierarchies.
  std::string text = absl::StrCat(
      "13:rdma:/\n"
      "12:pids:/kubepods/burstable/pod",
      kPodUid, "/", kId, "\n", "11:cpu,cpuacct:/kubepods/burstable/pod", kPodUid, "/", kId, "\n",
      "1:name=systemd:/kubepods/burstable/pod", kPodUid, "/", kId, "\n", "0::/\n");
  EXPECT_EQ(ContainerFromProcCgroup(text), Ref(ContainerRuntime::kContainerd, kId, kPodUid));
  EXPECT_EQ(UnifiedCgroupPath(text), "/");
}

TEST(ProcCgroupTest, ToleratesJunkLines) {
  std::string text = absl::StrCat("\n", "garbage\n", "::\n", "7::\n", "x:y\n",
                                  "5:misc,odd_controller-name:/\n", "3:net_cls,net_prio:/docker/",
                                  kId.substr(0, 40), "\n", "2:freezer:/docker/", kId, "\n");
  EXPECT_EQ(ContainerFromProcCgroup(text), Ref(ContainerRuntime::kDocker, kId));
  EXPECT_EQ(UnifiedCgroupPath(text), std::nullopt);
}

TEST(ProcCgroupTest, NoContainer) {
  EXPECT_EQ(ContainerFromProcCgroup(""), std::nullopt);
  EXPECT_EQ(ContainerFromProcCgroup("0::/user.slice/user-1000.slice/session-2.scope\n"),
            std::nullopt);
  EXPECT_EQ(ContainerFromProcCgroup(absl::StrCat("0::/kubepods.slice/kubepods-pod", kPodSlice,
                                                 ".slice/crio-conmon-", kId, ".scope\n")),
            std::nullopt);
}

TEST(ContainerIdTest, RuntimeNames) {
  EXPECT_EQ(ContainerRuntimeName(ContainerRuntime::kContainerd), "containerd");
  EXPECT_EQ(ContainerRuntimeName(ContainerRuntime::kCrio), "cri-o");
  EXPECT_EQ(ContainerRuntimeName(ContainerRuntime::kDocker), "docker");
  EXPECT_EQ(ContainerRuntimeName(ContainerRuntime::kPodman), "podman");
}

}  // namespace
}  // namespace ember
