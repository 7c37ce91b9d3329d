// The agent's seccomp filter, installed in a forked child: the denied calls fail with EPERM there,
// and what the agent lives on (threads, files, bpf, perf_event_open) still works.
#include "agent/seccomp_filter.h"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace ember {
namespace {

// What one call in the child returned: its result and errno.
struct Outcome {
  long result = 0;
  int error = 0;
};

// Runs `call` in a forked child, after installing the filter when `filtered`, and returns what
// the call returned. A pipe carries the outcome; the child never returns into gtest.
Outcome InChild(bool filtered, const std::function<long()>& call) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Outcome outcome{.result = -1, .error = -1};
    if (!filtered || InstallSeccompFilter().ok()) {
      errno = 0;
      outcome.result = call();
      outcome.error = errno;
    }
    (void)!write(fds[1], &outcome, sizeof(outcome));
    _exit(0);
  }
  close(fds[1]);
  Outcome outcome{.result = -2, .error = -2};
  EXPECT_EQ(read(fds[0], &outcome, sizeof(outcome)), static_cast<ssize_t>(sizeof(outcome)));
  close(fds[0]);
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  return outcome;
}

void ExpectDenied(const char* what, const std::function<long()>& call, int error = EPERM) {
  Outcome outcome = InChild(true, call);
  EXPECT_EQ(outcome.result, -1) << what;
  EXPECT_EQ(outcome.error, error) << what << ": " << std::strerror(outcome.error);
}

// The call gives the same answer with and without the filter.
void ExpectUntouched(const char* what, const std::function<long()>& call) {
  Outcome without = InChild(false, call);
  Outcome with = InChild(true, call);
  EXPECT_EQ(with.result, without.result) << what;
  EXPECT_EQ(with.error, without.error)
      << what << ": " << std::strerror(with.error) << " vs " << std::strerror(without.error);
}

TEST(SeccompFilterTest, DeniesControlOfOtherProcessesWithEperm) {
  if (kSeccompAllowsPtrace) {
    // A sanitized build: the leak check at exit needs it.
    ExpectUntouched("ptrace(PTRACE_TRACEME)",
                    [] { return ptrace(PTRACE_TRACEME, 0, nullptr, nullptr); });
  } else {
    ExpectDenied("ptrace(PTRACE_TRACEME)",
                 [] { return ptrace(PTRACE_TRACEME, 0, nullptr, nullptr); });
  }
  ExpectDenied("process_vm_writev", [] {
    // Were it allowed, it would write the parent's copy of this byte with the value it has.
    static char byte = 0;
    iovec local{&byte, 1};
    iovec remote{&byte, 1};
    return static_cast<long>(process_vm_writev(getppid(), &local, 1, &remote, 1, 0));
  });
  ExpectDenied("pidfd_getfd", [] { return syscall(SYS_pidfd_getfd, 0, 0, 0); });
}

TEST(SeccompFilterTest, DeniesTheKernelMountsNamespacesAndKeys) {
  ExpectDenied("execve", [] {
    char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
    return static_cast<long>(execve("/bin/true", argv, environ));
  });
  ExpectDenied("finit_module", [] { return syscall(SYS_finit_module, -1, "", 0); });
  // Arguments the kernel would refuse anyway, so that a call the filter let through does nothing.
  ExpectDenied("kexec_load", [] { return syscall(SYS_kexec_load, 0, 0, nullptr, 0xffff0000ul); });
  ExpectDenied("reboot", [] { return syscall(SYS_reboot, 0, 0, 0, nullptr); });
  ExpectDenied("swapoff", [] { return syscall(SYS_swapoff, "/nonexistent"); });
  ExpectDenied("mount", [] { return syscall(SYS_mount, "none", "/nonexistent", "tmpfs", 0, ""); });
  ExpectDenied("umount2", [] { return syscall(SYS_umount2, "/nonexistent", 0); });
  ExpectDenied("pivot_root",
               [] { return syscall(SYS_pivot_root, "/nonexistent", "/nonexistent"); });
  ExpectDenied("open_by_handle_at", [] { return syscall(SYS_open_by_handle_at, -1, nullptr, 0); });
  ExpectDenied("keyctl", [] { return syscall(SYS_keyctl, 0, 0, 0, 0, 0); });
  ExpectDenied("add_key", [] { return syscall(SYS_add_key, "user", "x", "", 0, 0); });
  ExpectDenied("request_key", [] { return syscall(SYS_request_key, "user", "x", nullptr, 0); });
  ExpectDenied("userfaultfd", [] { return syscall(SYS_userfaultfd, 0); });
  ExpectDenied("unshare(CLONE_NEWUSER)", [] { return static_cast<long>(unshare(CLONE_NEWUSER)); });
  ExpectDenied("setns", [] { return static_cast<long>(setns(-1, 0)); });
  ExpectDenied("personality", [] { return static_cast<long>(personality(0xffffffff)); });
  ExpectDenied("io_uring_setup", [] { return syscall(SYS_io_uring_setup, 1, nullptr); });
  // CLONE_NEWUSER with CLONE_FS is invalid: the kernel itself would refuse it with EINVAL.
  ExpectDenied("clone(CLONE_NEWUSER)", [] {
    return syscall(SYS_clone, CLONE_NEWUSER | CLONE_FS | SIGCHLD, nullptr, nullptr, nullptr);
  });
  ExpectDenied(
      "clone3", [] { return syscall(SYS_clone3, nullptr, 0); }, ENOSYS);
}

TEST(SeccompFilterTest, LeavesWhatTheAgentNeeds) {
  // bpf and perf_event_open answer as the kernel does without the filter (here: bad arguments).
  ExpectUntouched("bpf", [] { return syscall(SYS_bpf, 9999, nullptr, 0); });
  ExpectUntouched("perf_event_open",
                  [] { return syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0); });
  // Reading process memory stays (the CPython frame reader's call).
  ExpectUntouched("process_vm_readv", [] {
    static char byte = 1;
    char copy = 0;
    iovec local{&copy, 1};
    iovec remote{&byte, 1};
    return static_cast<long>(process_vm_readv(getpid(), &local, 1, &remote, 1, 0));
  });
  Outcome threads = InChild(true, [] {
    // A thread (clone, after clone3's ENOSYS), a file, and the filter's mark in /proc.
    bool ran = false;
    std::thread([&ran] { ran = true; }).join();
    std::ifstream status("/proc/self/status");
    std::string line;
    std::string mode;
    while (std::getline(status, line)) {
      if (line.rfind("Seccomp:", 0) == 0) mode = line.substr(line.find_first_not_of(" \t", 8));
    }
    return static_cast<long>(ran && mode == "2" ? 0 : 1);
  });
  EXPECT_EQ(threads.result, 0);
}

TEST(SeccompFilterTest, ListsWhatDocsSayItDenies) {
  EXPECT_EQ(std::find_if(DeniedSyscalls().begin(), DeniedSyscalls().end(),
                         [](const char* denied) { return std::strcmp(denied, "ptrace") == 0; }) !=
                DeniedSyscalls().end(),
            !kSeccompAllowsPtrace);
  for (const char* name :
       {"process_vm_writev", "init_module", "finit_module", "kexec_load", "mount", "umount2",
        "pivot_root", "open_by_handle_at", "keyctl", "add_key", "request_key", "userfaultfd",
        "reboot", "swapon", "swapoff", "setns", "unshare", "personality", "execve"}) {
    EXPECT_NE(std::find_if(DeniedSyscalls().begin(), DeniedSyscalls().end(),
                           [name](const char* denied) { return std::strcmp(denied, name) == 0; }),
              DeniedSyscalls().end())
        << name;
  }
  for (const char* denied : DeniedSyscalls()) {
    EXPECT_NE(std::strcmp(denied, "bpf"), 0);
    EXPECT_NE(std::strcmp(denied, "perf_event_open"), 0);
    EXPECT_NE(std::strcmp(denied, "process_vm_readv"), 0);
  }
}

}  // namespace
}  // namespace ember
