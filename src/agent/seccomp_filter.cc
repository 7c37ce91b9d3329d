// The agent's own seccomp filter, built with libseccomp: a deny list, since the agent links gRPC,
// curl, libdw and libbpf, whose exact system calls change between versions; an allow list
// missing one would break exports or symbolization in the field, one denying too little leaves
// what the kernel's own checks leave.
#include "agent/seccomp_filter.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace ember {
namespace {

struct ContextRelease {
  void operator()(void* context) const { seccomp_release(context); }
};
using Context = std::unique_ptr<void, ContextRelease>;

absl::Status SeccompError(absl::string_view what, int rc) {
  return absl::InternalError(absl::StrCat("seccomp filter: ", what, ": ", std::strerror(-rc)));
}

// Every namespace a clone may create: a user namespace is the one a thread without capabilities
// may create, and inside it it holds every capability over the new namespaces.
constexpr uint64_t kNamespaceFlags[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,   CLONE_NEWUSER,
                                        CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP};

}  // namespace

const std::vector<const char*>& DeniedSyscalls() {
  static const std::vector<const char*> denied = [] {
    std::vector<const char*> calls = {
        // Other processes: writing their memory or controlling them. Reading goes through
        // process_vm_readv and /proc, which stay.
        "process_vm_writev", "process_madvise", "pidfd_getfd",
        // Running another program: the agent never does.
        "execve", "execveat",
        // The kernel itself: modules, a new kernel, rebooting, swap, the clock, I/O ports.
        "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
        "swapon", "swapoff", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "iopl",
        "ioperm", "acct", "quotactl", "quotactl_fd", "syslog", "sethostname", "setdomainname",
        "vhangup", "lookup_dcookie", "uselib",
        // Mounts and roots.
        "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
        "fsmount", "fspick", "mount_setattr",
        // Opening a file by handle bypasses every path check (with CAP_DAC_READ_SEARCH, the
        // container escape known as "shocker").
        "open_by_handle_at", "name_to_handle_at",
        // Namespaces and kernel attack surface the agent has no use for.
        "setns", "unshare", "personality", "userfaultfd", "keyctl", "add_key", "request_key",
        "io_uring_setup", "io_uring_enter", "io_uring_register", "fanotify_init"};
    if (!kSeccompAllowsPtrace) calls.insert(calls.begin(), "ptrace");
    return calls;
  }();
  return denied;
}

absl::Status InstallSeccompFilter() {
  Context context(seccomp_init(SCMP_ACT_ALLOW));
  if (context == nullptr) return absl::InternalError("seccomp filter: seccomp_init failed");
  for (const char* name : DeniedSyscalls()) {
    int number = seccomp_syscall_resolve_name(name);
    if (number == __NR_SCMP_ERROR) continue;  // unknown to this libseccomp
    if (int rc = seccomp_rule_add(context.get(), SCMP_ACT_ERRNO(EPERM), number, 0); rc != 0) {
      return SeccompError(absl::StrCat("denying ", name), rc);
    }
  }
  for (uint64_t flag : kNamespaceFlags) {
    if (int rc = seccomp_rule_add(context.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                  SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag));
        rc != 0) {
      return SeccompError("denying clone with a new namespace", rc);
    }
  }
  if (int rc = seccomp_rule_add(context.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
      rc != 0) {
    return SeccompError("refusing clone3", rc);
  }
  // Without the seccomp() system call (a service manager's own filter may deny it) libseccomp
  // loads through prctl, which cannot synchronize threads: then the filter covers the calling
  // thread and those it starts, which is all of them when the agent installs it.
  // (SCMP_FLTATR_CTL_NNP, on by default, sets no_new_privs at the load.)
  seccomp_attr_set(context.get(), SCMP_FLTATR_CTL_TSYNC, 1);
  if (int rc = seccomp_load(context.get()); rc != 0) return SeccompError("loading", rc);
  return absl::OkStatus();
}

}  // namespace ember
