// Which capabilities ember-agent needs, as bit masks; the reasons are the ones docs/capabilities.md
// gives, measured on Linux 6.18.
#include "agent/capability_policy.h"

#include <linux/capability.h>
#include <sys/capability.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ember {
namespace {

// Older kernel headers lack the capabilities added in 5.8 and 5.9.
constexpr int kCapPerfmon = 38;
constexpr int kCapBpf = 39;
constexpr int kCapCheckpointRestore = 40;

constexpr CapabilityMask Bit(int cap) { return CapabilityMask{1} << cap; }

bool Holds(CapabilityMask held, int cap) { return (held & Bit(cap)) != 0; }

struct Need {
  int cap;
  const char* why;
};

}  // namespace

CapabilityAssessment AssessCapabilities(CapabilityMask held, int last_cap) {
  std::vector<Need> required;
  if (last_cap >= kCapBpf) {
    // CAP_SYS_ADMIN still passes the kernel's bpf_capable() and perfmon_capable() checks.
    if (!Holds(held, kCapBpf) && !Holds(held, CAP_SYS_ADMIN)) {
      required.push_back({kCapBpf, "needed to load the BPF sampler and create its maps"});
    }
    if (!Holds(held, kCapPerfmon) && !Holds(held, CAP_SYS_ADMIN)) {
      required.push_back(
          {kCapPerfmon, "needed to open perf events on every CPU and attach the sampler to them"});
    }
  } else if (!Holds(held, CAP_SYS_ADMIN)) {
    required.push_back({CAP_SYS_ADMIN,
                        "needed to load the BPF sampler and open perf events on a kernel without "
                        "CAP_BPF and CAP_PERFMON"});
  }
  if (!Holds(held, CAP_SYS_PTRACE)) {
    required.push_back(
        {CAP_SYS_PTRACE, "needed to read other processes' /proc/PID/maps and open their files"});
  }
  if (!Holds(held, CAP_DAC_READ_SEARCH)) {
    required.push_back(
        {CAP_DAC_READ_SEARCH, "needed to read every user's binaries for symbols and unwinding"});
  }

  CapabilityAssessment result;
  if (!required.empty()) {
    std::vector<std::string> parts;
    for (const Need& need : required) {
      parts.push_back(absl::StrCat(CapabilityNames(Bit(need.cap)), " (", need.why, ")"));
    }
    result.error =
        absl::StrCat(required.size() == 1 ? "missing capability " : "missing capabilities ",
                     absl::StrJoin(parts, " and "), "; run as root or grant ",
                     required.size() == 1 ? "it" : "them", " (docs/capabilities.md)");
  }
  if (!Holds(held, CAP_SYSLOG)) {
    result.warnings.push_back(
        "capability CAP_SYSLOG not held: kernel frames stay unnamed wherever /proc/kallsyms hides "
        "addresses (kernel.kptr_restrict=1, or kernel.perf_event_paranoid >= 2)");
  }
  return result;
}

CapabilityMask CapabilitiesToKeep(CapabilityMask held, int last_cap,
                                  bool maps_need_bpf_capability) {
  CapabilityMask keep = Bit(CAP_SYS_PTRACE) | Bit(CAP_DAC_READ_SEARCH);
  if (last_cap >= kCapCheckpointRestore) keep |= Bit(kCapCheckpointRestore);
  if (maps_need_bpf_capability) {
    keep |= last_cap >= kCapBpf && Holds(held, kCapBpf) ? Bit(kCapBpf) : Bit(CAP_SYS_ADMIN);
  }
  return keep & held;
}

std::string CapabilityNames(CapabilityMask mask) {
  std::vector<std::string> names;
  for (int cap = 0; cap < 64; ++cap) {
    if (!Holds(mask, cap)) continue;
    // libcap knows the names of every capability it was built with; newer ones are numbers.
    char* name = cap_to_name(static_cast<cap_value_t>(cap));
    if (name != nullptr && absl::StartsWith(name, "cap_")) {
      names.push_back(absl::AsciiStrToUpper(name));
    } else {
      names.push_back(absl::StrCat("CAP_", cap));
    }
    cap_free(name);
  }
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

}  // namespace ember
