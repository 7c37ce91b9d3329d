// The system calls ember-agent denies itself once started (a seccomp filter), so that a bug in any
// of its threads cannot reach them. docs/capabilities.md lists them with the reasons.
#pragma once

#include <vector>

#include "absl/status/status.h"

namespace ember {

// AddressSanitizer's leak check stops the process's threads with ptrace when it exits, so the
// sanitized builds (scripts/sanitize-and-fuzz.sh) leave ptrace out of the filter; production
// builds deny it.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSeccompAllowsPtrace = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
inline constexpr bool kSeccompAllowsPtrace = true;
#else
inline constexpr bool kSeccompAllowsPtrace = false;
#endif
#else
inline constexpr bool kSeccompAllowsPtrace = false;
#endif

// The calls the filter fails with EPERM, by name; those the running architecture lacks are left
// out of the filter. bpf and perf_event_open are not among them: the agent needs both after
// start (map updates, CPUs coming online).
const std::vector<const char*>& DeniedSyscalls();

// Installs the filter on the calling thread and, where the kernel has SECCOMP_FILTER_FLAG_TSYNC,
// on every other thread of the process; threads started later inherit it. Sets no_new_privs
// (which a filter needs without CAP_SYS_ADMIN). Besides DeniedSyscalls: clone with a
// CLONE_NEW* flag fails with EPERM, and clone3 (whose flags a filter cannot read) with ENOSYS, so
// the C library falls back to clone. Calls outside the list are allowed.
absl::Status InstallSeccompFilter();

}  // namespace ember
