// Cgroup path -> container id. The shapes come from the runtimes' cgroup drivers:
//   systemd driver: <prefix>-<id>.scope under kubepods[-<qos>]-pod<uid with _>.slice
//   cgroupfs driver: /kubepods[/<qos>]/pod<uid>/<id>, /docker/<id>, crio-<id>, libpod-<id>
#include "k8s/container_id.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ember {
namespace {

constexpr size_t kContainerIdLength = 64;

bool IsLowerHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// Runtimes print ids in lowercase; uppercase hex is somebody else's name, not an id.
bool IsContainerId(absl::string_view s) {
  if (s.size() != kContainerIdLength) return false;
  for (char c : s) {
    if (!IsLowerHex(c)) return false;
  }
  return true;
}

// Pod uids are RFC 4122 UUIDs (36 characters with dashes) for API pods, and 32 hex characters
// (an md5 of the manifest) for static pods.
bool IsPodUid(absl::string_view s) {
  if (s.size() != 32 && s.size() != 36) return false;
  for (char c : s) {
    if (!IsLowerHex(c) && c != '-') return false;
  }
  return true;
}

struct RuntimePrefix {
  absl::string_view prefix;
  ContainerRuntime runtime;
};

// Segment prefixes before the id; ".scope" follows with the systemd driver, nothing with cgroupfs.
// "crio-conmon-<id>" and "libpod-conmon-<id>" fail IsContainerId on the remainder, which is
// what keeps the conmon monitors out.
constexpr RuntimePrefix kPrefixes[] = {
    {"cri-containerd-", ContainerRuntime::kContainerd},
    {"crio-", ContainerRuntime::kCrio},
    {"docker-", ContainerRuntime::kDocker},
    {"libpod-", ContainerRuntime::kPodman},
};

std::optional<ContainerRuntime> ContainerInSegment(absl::string_view segment,
                                                   absl::string_view parent, std::string* id) {
  absl::string_view s = segment;
  absl::ConsumeSuffix(&s, ".scope");
  for (const RuntimePrefix& p : kPrefixes) {
    absl::string_view rest = s;
    if (absl::ConsumePrefix(&rest, p.prefix) && IsContainerId(rest)) {
      *id = std::string(rest);
      return p.runtime;
    }
  }
  if (segment.size() == kContainerIdLength && IsContainerId(segment)) {
    *id = std::string(segment);
    // A bare id: /docker/<id> is Docker's cgroupfs driver; under kubepods (or containerd's
    // "k8s.io" and "default" namespaces) it is containerd's, the only CRI left that uses bare ids.
    return parent == "docker" ? ContainerRuntime::kDocker : ContainerRuntime::kContainerd;
  }
  return std::nullopt;
}

// "kubepods-burstable-pod<uid>.slice" (systemd: the uid's dashes became underscores) or
// "pod<uid>" (cgroupfs).
std::optional<std::string> PodUidInSegment(absl::string_view segment) {
  absl::string_view s = segment;
  if (absl::ConsumeSuffix(&s, ".slice")) {
    // "kubepods-..." by default, "kubelet-kubepods-..." under kind's --cgroup-root=/kubelet.
    if (!absl::StrContains(s, "kubepods")) return std::nullopt;
    size_t pos = s.rfind("-pod");
    if (pos == absl::string_view::npos) return std::nullopt;
    std::string uid(s.substr(pos + 4));
    for (char& c : uid) {
      if (c == '_') c = '-';
    }
    if (!IsPodUid(uid)) return std::nullopt;
    return uid;
  }
  if (absl::ConsumePrefix(&s, "pod") && IsPodUid(s)) return std::string(s);
  return std::nullopt;
}

// "hierarchy-id:controllers:path" -> path; a bare path is returned as is.
absl::string_view StripLinePrefix(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text.empty() || text.front() == '/') return text;
  size_t first = text.find(':');
  if (first == absl::string_view::npos) return {};
  size_t second = text.find(':', first + 1);
  if (second == absl::string_view::npos) return {};
  return text.substr(second + 1);
}

}  // namespace

absl::string_view ContainerRuntimeName(ContainerRuntime runtime) {
  switch (runtime) {
    case ContainerRuntime::kContainerd:
      return "containerd";
    case ContainerRuntime::kCrio:
      return "cri-o";
    case ContainerRuntime::kDocker:
      return "docker";
    case ContainerRuntime::kPodman:
      return "podman";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& os, const ContainerRef& ref) {
  os << ContainerRuntimeName(ref.runtime) << ":" << ref.id;
  if (!ref.pod_uid.empty()) os << " pod " << ref.pod_uid;
  return os;
}

std::optional<ContainerRef> ContainerIdFromCgroupPath(absl::string_view path) {
  path = StripLinePrefix(path);
  if (path.empty() || path.front() != '/') return std::nullopt;
  std::optional<ContainerRef> found;
  std::string pod_uid;
  absl::string_view parent;
  for (absl::string_view segment : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (std::optional<std::string> uid = PodUidInSegment(segment)) {
      pod_uid = *std::move(uid);
    } else {
      std::string id;
      if (std::optional<ContainerRuntime> runtime = ContainerInSegment(segment, parent, &id)) {
        // Innermost wins; the pod is the one that encloses this container, if any.
        found = ContainerRef{*runtime, std::move(id), pod_uid};
      }
    }
    parent = segment;
  }
  return found;
}

std::optional<std::string> UnifiedCgroupPath(absl::string_view proc_cgroup_text) {
  for (absl::string_view line : absl::StrSplit(proc_cgroup_text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (absl::ConsumePrefix(&line, "0::") && !line.empty() && line.front() == '/') {
      return std::string(line);
    }
  }
  return std::nullopt;
}

std::optional<ContainerRef> ContainerFromProcCgroup(absl::string_view proc_cgroup_text) {
  if (std::optional<std::string> unified = UnifiedCgroupPath(proc_cgroup_text)) {
    if (std::optional<ContainerRef> ref = ContainerIdFromCgroupPath(*unified)) return ref;
  }
  for (absl::string_view line : absl::StrSplit(proc_cgroup_text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    // v1 lines only: "<n>:<controllers>:<path>" with a non-empty controller list.
    size_t first = line.find(':');
    if (first == absl::string_view::npos || first == 0) continue;
    size_t second = line.find(':', first + 1);
    if (second == absl::string_view::npos || second == first + 1) continue;
    if (std::optional<ContainerRef> ref = ContainerIdFromCgroupPath(line)) return ref;
  }
  return std::nullopt;
}

}  // namespace ember
