// What a profile says of each process beyond its samples: its executable, its container and that
// container's pod.
#pragma once

#include <cstdint>

#include "common/profile.h"
#include "k8s/pod_index.h"
#include "process/process_table.h"

namespace ember {

// The executable of `pid` from the process table, its container, and, when `pods` (the node's
// pods, or null when they are not watched) knows that container, its pod's service name and
// Kubernetes attributes. Empty for a process no longer in the table.
ProcessMetadata ProcessMetadataOf(ProcessTable& processes, const PodIndex* pods, uint32_t pid);

// Attaches the ProcessMetadataOf each of the interval's processes to the interval, for every
// writer; a process that already has some keeps it.
void AttachProcessMetadata(ProcessTable& processes, const PodIndex* pods, IntervalProfile* profile);

}  // namespace ember
