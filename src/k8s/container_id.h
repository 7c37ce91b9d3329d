// Container identity from cgroup paths: which runtime's container (and which Kubernetes pod) a
// /proc/PID/cgroup line or a cgroup v2 path names. Pure parsing; no syscalls.
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include "absl/strings/string_view.h"

namespace ember {

enum class ContainerRuntime { kContainerd, kCrio, kDocker, kPodman };

// The OpenTelemetry `container.runtime` value: "containerd", "cri-o", "docker", "podman".
absl::string_view ContainerRuntimeName(ContainerRuntime runtime);

struct ContainerRef {
  ContainerRuntime runtime = ContainerRuntime::kContainerd;
  std::string id;       // 64 lowercase hex characters
  std::string pod_uid;  // Kubernetes pod uid with dashes, "" outside a pod

  friend bool operator==(const ContainerRef&, const ContainerRef&) = default;
};

// For test failure messages: "containerd:<id> pod <uid>".
std::ostream& operator<<(std::ostream& os, const ContainerRef& ref);

// The container named by a cgroup path ("/kubepods.slice/.../cri-containerd-<id>.scope") or by a
// whole /proc/PID/cgroup line ("0::/...", "12:pids:/docker/<id>"). With nested containers
// (a container's own sub-cgroups, docker-in-docker, kind nodes) the innermost container wins.
// Conmon scopes (crio-conmon-, libpod-conmon-) are not containers. nullopt when no segment names
// a container.
std::optional<ContainerRef> ContainerIdFromCgroupPath(absl::string_view path);

// The path of the cgroup v2 line ("0::<path>") of a /proc/PID/cgroup text, nullopt without one.
std::optional<std::string> UnifiedCgroupPath(absl::string_view proc_cgroup_text);

// The container of a whole /proc/PID/cgroup text: from the v2 "0::" line when it names one, else
// from the first v1 line that does (hybrid hosts put the container only in v1 hierarchies).
// Lines that do not parse are skipped.
std::optional<ContainerRef> ContainerFromProcCgroup(absl::string_view proc_cgroup_text);

}  // namespace ember
