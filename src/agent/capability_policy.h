// Which capabilities ember-agent needs, before and after attaching BPF: decisions on bit masks,
// without system calls (privileges.h applies them). docs/capabilities.md is the reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember {

// A set of capabilities: bit N is capability N of <linux/capability.h>.
using CapabilityMask = uint64_t;

// What the held (permitted) capabilities allow, on a kernel whose highest capability number is
// `last_cap` (/proc/sys/kernel/cap_last_cap; below CAP_BPF, CAP_SYS_ADMIN stands in for CAP_BPF
// and CAP_PERFMON).
struct CapabilityAssessment {
  std::string error;                  // "" when every required capability is held; else one line
  std::vector<std::string> warnings;  // optional ones missing, each with its consequence
};
CapabilityAssessment AssessCapabilities(CapabilityMask held, int last_cap);

// The capabilities kept once BPF is loaded and attached: those of CAP_SYS_PTRACE,
// CAP_DAC_READ_SEARCH and CAP_CHECKPOINT_RESTORE that are held, and, when the kernel refuses
// map access without it (`maps_need_bpf_capability`), CAP_BPF (or CAP_SYS_ADMIN without it).
CapabilityMask CapabilitiesToKeep(CapabilityMask held, int last_cap, bool maps_need_bpf_capability);

// "CAP_BPF, CAP_PERFMON", in capability order; "none" for an empty set.
std::string CapabilityNames(CapabilityMask mask);

}  // namespace ember
