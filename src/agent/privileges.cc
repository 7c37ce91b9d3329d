// Applies capability_policy.h to the process with libcap: the one file of the agent that changes
// its credentials.
#include "agent/privileges.h"

#include <sys/capability.h>
#include <sys/prctl.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "agent/capability_policy.h"
#include "common/read_file.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace ember {
namespace {

struct CapFree {
  void operator()(_cap_struct* caps) const { cap_free(caps); }
};
using Caps = std::unique_ptr<_cap_struct, CapFree>;

// The highest capability number the running kernel knows.
int LastCap() { return static_cast<int>(cap_max_bits()) - 1; }

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

CapabilityMask MaskOf(cap_t caps, cap_flag_t flag, int last_cap) {
  CapabilityMask mask = 0;
  for (int cap = 0; cap <= last_cap; ++cap) {
    cap_flag_value_t value = CAP_CLEAR;
    if (cap_get_flag(caps, cap, flag, &value) == 0 && value == CAP_SET) {
      mask |= CapabilityMask{1} << cap;
    }
  }
  return mask;
}

// Sets the thread's capabilities to exactly these sets.
absl::Status SetCaps(CapabilityMask effective, CapabilityMask permitted, int last_cap) {
  Caps caps(cap_init());
  if (caps == nullptr) return ErrnoError("cap_init");
  for (int cap = 0; cap <= last_cap; ++cap) {
    cap_value_t value = cap;
    if (permitted & (CapabilityMask{1} << cap))
      cap_set_flag(caps.get(), CAP_PERMITTED, 1, &value, CAP_SET);
    if (effective & (CapabilityMask{1} << cap))
      cap_set_flag(caps.get(), CAP_EFFECTIVE, 1, &value, CAP_SET);
  }
  if (cap_set_proc(caps.get()) != 0) return ErrnoError("setting the capabilities");
  return absl::OkStatus();
}

// Threads of this process, from /proc/self/status; 0 when unreadable.
int ThreadCount() {
  std::string status = ReadWholeFile("/proc/self/status").value_or("");
  size_t at = status.find("\nThreads:");
  int threads = 0;
  if (at == std::string::npos) return 0;
  size_t end = status.find('\n', at + 1);
  absl::string_view value = absl::string_view(status).substr(at + 9, end - at - 9);
  return absl::SimpleAtoi(value, &threads) ? threads : 0;
}

}  // namespace

absl::Status CheckCapabilities() {
  const int last_cap = LastCap();
  Caps caps(cap_get_proc());
  if (caps == nullptr) return ErrnoError("reading the capabilities");
  const CapabilityMask held = MaskOf(caps.get(), CAP_PERMITTED, last_cap);
  CapabilityAssessment assessment = AssessCapabilities(held, last_cap);
  if (!assessment.error.empty()) return absl::FailedPreconditionError(assessment.error);
  for (const std::string& warning : assessment.warnings) spdlog::warn("{}", warning);
  // A binary with file capabilities may hold them in the permitted set only.
  return SetCaps(held, held, last_cap);
}

absl::Status DropCapabilities(const std::function<bool()>& maps_accessible) {
  if (int threads = ThreadCount(); threads != 1) {
    // Threads started earlier would keep every capability.
    return absl::InternalError(
        absl::StrCat("capabilities must be dropped while the agent has one thread, not ", threads));
  }
  const int last_cap = LastCap();
  Caps caps(cap_get_proc());
  if (caps == nullptr) return ErrnoError("reading the capabilities");
  const CapabilityMask held = MaskOf(caps.get(), CAP_PERMITTED, last_cap);

  // Map reads and updates need no capability on kernels since 6.5 (the fd is the permission);
  // before, kernel.unprivileged_bpf_disabled made every bpf() command need one. Ask the kernel.
  CapabilityMask keep = CapabilitiesToKeep(held, last_cap, /*maps_need_bpf_capability=*/false);
  RETURN_IF_ERROR(SetCaps(keep, held, last_cap));
  const bool maps_need_capability = !maps_accessible();
  keep = CapabilitiesToKeep(held, last_cap, maps_need_capability);

  // The bounding set limits what an exec could gain; shrinking it takes CAP_SETPCAP.
  bool bounding_shrunk = false;
  if (held & (CapabilityMask{1} << CAP_SETPCAP)) {
    RETURN_IF_ERROR(SetCaps(held, held, last_cap));
    for (int cap = 0; cap <= last_cap; ++cap) {
      if ((keep & (CapabilityMask{1} << cap)) || CAP_IS_SUPPORTED(cap) != 1) continue;
      if (cap_get_bound(cap) == 1 && cap_drop_bound(cap) != 0) {
        return ErrnoError(absl::StrCat("dropping ", CapabilityNames(CapabilityMask{1} << cap),
                                       " from the bounding set"));
      }
    }
    bounding_shrunk = true;
  }
  if (cap_reset_ambient() != 0) return ErrnoError("clearing the ambient capabilities");
  RETURN_IF_ERROR(SetCaps(keep, keep, last_cap));  // inheritable: none
  // No exec may gain privileges back (a set-user-ID binary, file capabilities).
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return ErrnoError("setting no_new_privs");

  spdlog::info("capabilities: kept {}; dropped {}{}{}", CapabilityNames(keep),
               CapabilityNames(held & ~keep),
               maps_need_capability ? " (this kernel needs a capability for BPF map access)" : "",
               bounding_shrunk ? "" : "; bounding set left as granted (no CAP_SETPCAP)");
  return absl::OkStatus();
}

absl::Status RunWithoutCapabilities(const std::function<void()>& work) {
  absl::Status status;
  std::thread thread([&] {
    // capset(2) changes only the calling thread (libcap without libpsx is a plain capset).
    status = SetCaps(0, 0, LastCap());
    if (status.ok()) work();
  });
  thread.join();
  return status;
}

}  // namespace ember
