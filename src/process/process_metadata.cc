// Process metadata from the process table and the pod index.
#include "process/process_metadata.h"

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "k8s/pod_metadata.h"

namespace ember {

ProcessMetadata ProcessMetadataOf(ProcessTable& processes, const PodIndex* pods, uint32_t pid) {
  ProcessMetadata metadata;
  [&] {
    const Process* process = processes.Find(pid);
    // A process let go past --max-processes is read again, as its next sample would read it.
    if (process == nullptr && processes.WasEvicted(pid)) process = processes.Get(pid);
    if (process == nullptr) return;
    metadata.executable_path = process->executable_path;
    std::string_view path = metadata.executable_path;
    metadata.executable_name = std::string(path.substr(path.rfind('/') + 1));
    if (!process->container) return;
    metadata.container_id = process->container->id;
    if (pods == nullptr) return;
    std::optional<ContainerMetadata> pod =
        pods->Lookup(process->container->id, process->container->pod_uid);
    if (!pod) return;
    metadata.service_name = pod->service_name;
    for (auto& [key, value] : KubernetesAttributes(*pod)) {
      metadata.attributes.push_back({std::move(key), std::move(value)});
    }
  }();
  return metadata;
}

void AttachProcessMetadata(ProcessTable& processes, const PodIndex* pods,
                           IntervalProfile* profile) {
  for (const StackSample& sample : profile->samples) {
    if (profile->process_metadata.contains(sample.pid)) continue;
    profile->AttachProcessMetadata(sample.pid, ProcessMetadataOf(processes, pods, sample.pid));
  }
}

}  // namespace ember
