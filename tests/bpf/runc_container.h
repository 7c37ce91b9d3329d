// A real container for the bpf tests: runc runs a busybox-static bundle in a cgroup path of the
// test's choosing (kubepods-style, as the kubelet's containerd would), detached. The tests' runc
// state lives in a root of their own (kRuncTestRoot), so they never touch other containers, and a
// container a crashed test left running is killed by the next Start.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace ember::testing {

// A random container id as runtimes make them: 64 lowercase hex characters.
std::string RandomContainerId();
// A random Kubernetes pod uid: 8-4-4-4-12 lowercase hex.
std::string RandomPodUid();
// The cgroup path of a container of a burstable pod under the systemd driver's layout:
// /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid, dashes as _>.slice/
// cri-containerd-<id>.scope
std::string KubepodsCgroupPath(const std::string& pod_uid, const std::string& container_id);

inline constexpr char kRuncTestRoot[] = "/run/ember-tests/runc";

class RuncContainer {
 public:
  // Builds the bundle under `dir` (rootfs with /bin/busybox, config.json from `runc spec`) and
  // runs `args` in it. nullptr on failure, with runc's output reported through gtest.
  static std::unique_ptr<RuncContainer> Start(const std::string& dir, const std::string& id,
                                              const std::string& cgroups_path,
                                              const std::vector<std::string>& args);
  ~RuncContainer();  // kills and deletes the container

  pid_t pid() const { return pid_; }  // of its first process, in the host's pid namespace
  const std::string& id() const { return id_; }

 private:
  explicit RuncContainer(std::string id) : id_(std::move(id)) {}
  std::string id_;
  pid_t pid_ = 0;
};

}  // namespace ember::testing
