// RunCatchingSigbus: a process-wide SIGBUS handler that jumps back to the guarded read of the
// faulting thread, or hands the signal to whatever handled it before.
#include "elf/sigbus_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <mutex>
#include <vector>

namespace ember::internal {
namespace {

thread_local sigjmp_buf* t_guard = nullptr;
struct sigaction g_previous = {};

void OnSigbus(int signal, siginfo_t* info, void* context) {
  if (t_guard != nullptr) siglongjmp(*t_guard, 1);
  // Not a guarded read: put back the handler we replaced. Returning re-runs the faulting access,
  // which then gets that handler (by default, the end of the process with a core dump).
  sigaction(SIGBUS, &g_previous, nullptr);
  (void)signal;
  (void)info;
  (void)context;
}

void InstallHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action = {};
    action.sa_sigaction = OnSigbus;
    // SA_NODEFER: SIGBUS stays unblocked while the handler runs, so jumping out of it leaves the
    // thread's signal mask as it was, and the guard need not save and restore the mask: that
    // (sigsetjmp's savemask) is a system call on every guarded read, a tenth of the agent's CPU.
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous);
  });
}

}  // namespace

bool RunCatchingSigbus(absl::FunctionRef<void()> read) {
  InstallHandler();
  sigjmp_buf guard;
  sigjmp_buf* const outer = t_guard;
  // savemask=0: the handler runs with SIGBUS unblocked (SA_NODEFER), so there is no mask to put
  // back after the jump.
  if (sigsetjmp(guard, 0) != 0) {
    t_guard = outer;
    return false;
  }
  t_guard = &guard;
  read();
  t_guard = outer;
  return true;
}

void KeepAbandoned(const void* object) {
  static std::mutex mu;
  static auto* abandoned = new std::vector<const void*>();
  std::lock_guard<std::mutex> lock(mu);
  abandoned->push_back(object);
}

}  // namespace ember::internal
