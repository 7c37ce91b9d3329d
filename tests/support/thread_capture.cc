// Stopping a process's threads with ptrace, reading their registers and stacks, and the text form
// of what was taken.
#include "support/thread_capture.h"

#include <errno.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtimes/process_memory.h"
#include "sample_record.h"

namespace ember::testing {

static_assert(kThreadRegisterCount == EMBER_USER_REG_COUNT);
static_assert(kThreadRegisterBp == EMBER_USER_REG_BP);
static_assert(kThreadRegisterSp == EMBER_USER_REG_SP);
static_assert(kThreadRegisterIp == EMBER_USER_REG_IP);
static_assert(kThreadRegisterCount == kCfiRegisterCount);

namespace {

// A thread list that keeps changing (a process starting threads as fast as they are stopped)
// gives up after this many passes.
constexpr int kMaxListingRounds = 64;

std::string ReadFile(const std::string& path, bool* ok = nullptr) {
  std::ifstream in(path, std::ios::binary);
  if (ok) *ok = static_cast<bool>(in);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The fields of /proc/PID/stat after the command (its own parentheses may hold anything): [0] is
// the state, field N of proc(5) is at N - 3.
std::vector<std::string> StatFields(const std::string& path) {
  const std::string stat = ReadFile(path);
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return {};
  return absl::StrSplit(stat.substr(close + 1), ' ', absl::SkipEmpty());
}

// A thread's name; the kernel ends it with a newline, and the name itself may end in spaces.
std::string ReadComm(pid_t pid, pid_t tid) {
  std::string comm = ReadFile(absl::StrCat("/proc/", pid, "/task/", tid, "/comm"));
  if (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

bool IsDead(const std::string& stat_path) {
  const std::vector<std::string> fields = StatFields(stat_path);
  return fields.empty() || fields[0] == "Z" || fields[0] == "X";
}

std::optional<std::vector<pid_t>> ListThreads(pid_t pid) {
  std::error_code error;
  std::filesystem::directory_iterator it(absl::StrCat("/proc/", pid, "/task"), error);
  if (error) return std::nullopt;
  std::vector<pid_t> tids;
  for (const auto& entry : it) {
    int tid = 0;
    if (absl::SimpleAtoi(entry.path().filename().string(), &tid)) tids.push_back(tid);
  }
  std::sort(tids.begin(), tids.end());
  return tids;
}

// Where a thread's stack ends, as bpf/snapshot.bpf.h finds it: the end of the mapping holding sp,
// or, in the main thread's mapping, the start of the stack (argv and the environment lie above).
class StackBounds {
 public:
  explicit StackBounds(pid_t pid) {
    std::istringstream maps(ReadFile(absl::StrCat("/proc/", pid, "/maps")));
    std::string line;
    while (std::getline(maps, line)) {
      std::vector<std::string> range = absl::StrSplit(line.substr(0, line.find(' ')), '-');
      uint64_t start = 0, end = 0;
      if (range.size() == 2 && absl::SimpleHexAtoi(range[0], &start) &&
          absl::SimpleHexAtoi(range[1], &end)) {
        mappings_.emplace_back(start, end);
      }
    }
    const std::vector<std::string> fields = StatFields(absl::StrCat("/proc/", pid, "/stat"));
    if (fields.size() > 25) absl::SimpleAtoi(fields[25], &start_stack_);  // field 28, startstack
  }

  // 0 when no mapping holds sp.
  uint64_t End(uint64_t sp) const {
    for (const auto& [start, end] : mappings_) {
      if (sp < start || sp >= end) continue;
      if (start_stack_ >= start && start_stack_ < end) return start_stack_;
      return end;
    }
    return 0;
  }

 private:
  std::vector<std::pair<uint64_t, uint64_t>> mappings_;
  uint64_t start_stack_ = 0;
};

std::array<uint64_t, kThreadRegisterCount> DwarfOrder(const user_regs_struct& r) {
  return {r.rax, r.rdx, r.rcx, r.rbx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8,
          r.r9,  r.r10, r.r11, r.r12, r.r13, r.r14, r.r15, r.rip};
}

// The threads this tracer seized. Each one stopped is detached when it goes, on every path, with
// the signal its stop held back; one that never stopped cannot be detached (ptrace refuses a
// running tracee) and is let go when the tracing thread exits.
class Tracer {
 public:
  explicit Tracer(pid_t pid) : pid_(pid) {}
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;
  ~Tracer() {
    for (const Tracee& tracee : tracees_) {
      if (tracee.stopped && !tracee.gone) {
        ptrace(PTRACE_DETACH, tracee.tid, nullptr, reinterpret_cast<void*>(tracee.signal));
      }
    }
  }

  // Seizes and stops every thread of the process, and any it starts meanwhile.
  absl::Status StopAll(std::chrono::milliseconds timeout) {
    for (int round = 0; round < kMaxListingRounds; ++round) {
      const std::optional<std::vector<pid_t>> tids = ListThreads(pid_);
      if (!tids) return absl::NotFoundError(absl::StrCat("process ", pid_, " does not exist"));
      const size_t first_new = tracees_.size();
      for (pid_t tid : *tids) {
        if (Known(tid)) continue;
        absl::Status seized = Seize(tid);
        if (!seized.ok()) return seized;
      }
      if (tracees_.size() == first_new) {
        if (Stopped().empty()) {
          return absl::FailedPreconditionError(
              absl::StrCat("process ", pid_, " has exited: no thread of it is left to stop"));
        }
        return absl::OkStatus();
      }
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      for (size_t i = first_new; i < tracees_.size(); ++i) {
        absl::Status stopped = WaitForStop(tracees_[i], deadline, timeout);
        if (!stopped.ok()) return stopped;
      }
    }
    return absl::UnavailableError(absl::StrCat("process ", pid_, " kept starting threads through ",
                                               kMaxListingRounds, " passes over its thread list"));
  }

  std::vector<pid_t> Stopped() const {
    std::vector<pid_t> tids;
    for (const Tracee& tracee : tracees_) {
      if (tracee.stopped && !tracee.gone) tids.push_back(tracee.tid);
    }
    std::sort(tids.begin(), tids.end());
    return tids;
  }

  // A stopped thread killed since (SIGKILL ends even a ptrace stop) is marked gone.
  void MarkGone(pid_t tid) {
    for (Tracee& tracee : tracees_) {
      if (tracee.tid == tid) tracee.gone = true;
    }
  }

 private:
  struct Tracee {
    pid_t tid = 0;
    bool stopped = false;
    bool gone = false;
    int signal = 0;  // a signal its stop held back, handed back on detach
  };

  bool Known(pid_t tid) const {
    return std::any_of(tracees_.begin(), tracees_.end(),
                       [tid](const Tracee& tracee) { return tracee.tid == tid; });
  }

  absl::Status Seize(pid_t tid) {
    if (ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) {
      const int error = errno;
      // Gone between the listing and now, or a zombie (an exited thread group leader whose
      // other threads live on).
      if (error == ESRCH || IsDead(absl::StrCat("/proc/", pid_, "/task/", tid, "/stat"))) {
        return absl::OkStatus();
      }
      return absl::PermissionDeniedError(absl::StrCat("cannot ptrace thread ", tid, " of process ",
                                                      pid_, ": ", std::strerror(error),
                                                      " (is another tracer attached?)"));
    }
    tracees_.emplace_back();
    tracees_.back().tid = tid;
    if (ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0 && errno != ESRCH) {
      return absl::InternalError(absl::StrCat("PTRACE_INTERRUPT of thread ", tid, " of process ",
                                              pid_, ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

  absl::Status WaitForStop(Tracee& tracee, std::chrono::steady_clock::time_point deadline,
                           std::chrono::milliseconds timeout) {
    while (true) {
      int status = 0;
      const pid_t waited = waitpid(tracee.tid, &status, __WALL | WNOHANG);
      if (waited == tracee.tid) {
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
          tracee.gone = true;
          return absl::OkStatus();
        }
        if (WIFSTOPPED(status)) {
          tracee.stopped = true;
          // An interrupt or group stop reports PTRACE_EVENT_STOP; any other stop is a signal on
          // its way to the thread, which it gets back on detach.
          if (status >> 16 != PTRACE_EVENT_STOP) tracee.signal = WSTOPSIG(status);
          return absl::OkStatus();
        }
        continue;
      }
      if (waited < 0) {
        if (errno == EINTR) continue;
        if (errno == ECHILD) {  // reaped or detached by its exit in the meantime
          tracee.gone = true;
          return absl::OkStatus();
        }
        return absl::InternalError(
            absl::StrCat("waitpid on thread ", tracee.tid, ": ", std::strerror(errno)));
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("thread ", tracee.tid, " (", ReadComm(pid_, tracee.tid), ") of process ",
                         pid_, " did not stop within ", timeout.count(), " ms"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  pid_t pid_;
  std::vector<Tracee> tracees_;
};

absl::StatusOr<ThreadCapture> CaptureOnThisThread(
    pid_t pid, size_t stack_bytes,
    absl::FunctionRef<absl::Status(const ThreadCapture&)> while_stopped, CaptureOptions options) {
  Tracer tracer(pid);
  if (absl::Status stopped = tracer.StopAll(options.stop_timeout); !stopped.ok()) return stopped;
  // Every thread stands still: the mappings and the stacks hold still too.
  const StackBounds bounds(pid);
  ProcessMemoryReader memory(pid);
  ThreadCapture capture;
  capture.pid = pid;
  for (pid_t tid : tracer.Stopped()) {
    user_regs_struct regs;
    if (ptrace(PTRACE_GETREGS, tid, nullptr, &regs) != 0) {
      if (errno == ESRCH) {
        tracer.MarkGone(tid);
        continue;
      }
      return absl::InternalError(absl::StrCat("PTRACE_GETREGS of thread ", tid, " of process ", pid,
                                              ": ", std::strerror(errno)));
    }
    CapturedThread thread;
    thread.tid = tid;
    thread.comm = ReadComm(pid, tid);
    thread.regs = DwarfOrder(regs);
    thread.stack_start = thread.sp();
    const uint64_t end = bounds.End(thread.sp());
    if (end <= thread.sp()) {
      thread.no_stack_mapping = true;
    } else {
      uint64_t size = end - thread.sp();
      if (stack_bytes != 0 && size > stack_bytes) {
        size = stack_bytes;
        thread.clamped = true;
      }
      thread.stack.resize(size);
      if (!memory.Read(thread.sp(), thread.stack.data(), size)) {
        return absl::InternalError(absl::StrCat("cannot read the stack of thread ", tid,
                                                " of process ", pid, ": ", size, " bytes at 0x",
                                                absl::Hex(thread.sp())));
      }
    }
    capture.threads.push_back(std::move(thread));
  }
  if (capture.threads.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("process ", pid, " has exited: no thread of it is left to stop"));
  }
  if (absl::Status status = while_stopped(capture); !status.ok()) return status;
  return capture;
}

absl::Status ValueError(const std::string& name, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("thread capture: value ", name, " ", what));
}

}  // namespace

FrameRegisters CapturedThread::frame_registers() const {
  FrameRegisters frame;
  for (int reg = 0; reg < kThreadRegisterCount; ++reg) frame.Set(reg, regs[reg]);
  return frame;
}

const CapturedThread* ThreadCapture::Find(pid_t tid) const {
  for (const CapturedThread& thread : threads) {
    if (thread.tid == tid) return &thread;
  }
  return nullptr;
}

absl::StatusOr<ThreadCapture> CaptureThreads(
    pid_t pid, size_t stack_bytes,
    absl::FunctionRef<absl::Status(const ThreadCapture&)> while_stopped, CaptureOptions options) {
  if (pid <= 0) return absl::InvalidArgumentError(absl::StrCat("no process has pid ", pid));
  // ptrace ties tracees to the tracing thread, and that thread's exit detaches whatever it still
  // traces, a thread that never stopped included: a thread of its own makes the release certain.
  absl::StatusOr<ThreadCapture> result = absl::UnknownError("capture did not run");
  std::thread tracing(
      [&] { result = CaptureOnThisThread(pid, stack_bytes, while_stopped, options); });
  tracing.join();
  return result;
}

absl::StatusOr<ThreadCapture> CaptureThreads(pid_t pid, size_t stack_bytes) {
  return CaptureThreads(
      pid, stack_bytes, [](const ThreadCapture&) { return absl::OkStatus(); }, CaptureOptions{});
}

void StoreCapture(const ThreadCapture& capture, RecordedMemory& memory) {
  memory.Set("capture.pid", absl::StrCat(capture.pid));
  for (size_t n = 0; n < capture.threads.size(); ++n) {
    const CapturedThread& thread = capture.threads[n];
    const std::string prefix = absl::StrCat("thread.", n, ".");
    memory.Set(prefix + "tid", absl::StrCat(thread.tid));
    memory.Set(prefix + "comm", absl::CEscape(thread.comm));
    memory.Set(prefix + "regs", absl::StrJoin(thread.regs, " ", [](std::string* out, uint64_t v) {
                 absl::StrAppend(out, absl::Hex(v));
               }));
    std::string stack =
        absl::StrCat(absl::Hex(thread.stack_start), " ", absl::Hex(thread.stack.size()));
    if (thread.clamped) absl::StrAppend(&stack, " clamped");
    if (thread.no_stack_mapping) absl::StrAppend(&stack, " no_mapping");
    memory.Set(prefix + "stack", stack);
    memory.Add(thread.stack_start, thread.stack.data(), thread.stack.size());
  }
}

absl::StatusOr<ThreadCapture> LoadCapture(RecordedMemory& memory) {
  ThreadCapture capture;
  const std::string* pid = memory.Get("capture.pid");
  if (pid == nullptr) return ValueError("capture.pid", "is missing");
  if (!absl::SimpleAtoi(*pid, &capture.pid)) return ValueError("capture.pid", "is not a pid");
  for (size_t n = 0;; ++n) {
    const std::string prefix = absl::StrCat("thread.", n, ".");
    const std::string* tid = memory.Get(prefix + "tid");
    if (tid == nullptr) break;
    CapturedThread thread;
    if (!absl::SimpleAtoi(*tid, &thread.tid)) return ValueError(prefix + "tid", "is not a tid");
    const std::string* comm = memory.Get(prefix + "comm");
    if (comm == nullptr || !absl::CUnescape(*comm, &thread.comm)) {
      return ValueError(prefix + "comm", "is missing or badly escaped");
    }
    const std::string* regs = memory.Get(prefix + "regs");
    if (regs == nullptr) return ValueError(prefix + "regs", "is missing");
    const std::vector<std::string> words = absl::StrSplit(*regs, ' ');
    if (words.size() != kThreadRegisterCount) {
      return ValueError(prefix + "regs",
                        absl::StrCat("holds ", words.size(), " words, not ", kThreadRegisterCount));
    }
    for (int reg = 0; reg < kThreadRegisterCount; ++reg) {
      if (!absl::SimpleHexAtoi(words[reg], &thread.regs[reg])) {
        return ValueError(prefix + "regs", absl::StrCat("word ", reg, " is not hex"));
      }
    }
    const std::string* stack = memory.Get(prefix + "stack");
    if (stack == nullptr) return ValueError(prefix + "stack", "is missing");
    const std::vector<std::string> parts = absl::StrSplit(*stack, ' ');
    uint64_t size = 0;
    if (parts.size() < 2 || !absl::SimpleHexAtoi(parts[0], &thread.stack_start) ||
        !absl::SimpleHexAtoi(parts[1], &size)) {
      return ValueError(prefix + "stack", "is not \"START SIZE\" in hex");
    }
    for (size_t i = 2; i < parts.size(); ++i) {
      if (parts[i] == "clamped") {
        thread.clamped = true;
      } else if (parts[i] == "no_mapping") {
        thread.no_stack_mapping = true;
      } else {
        return ValueError(prefix + "stack", absl::StrCat("has an unknown flag ", parts[i]));
      }
    }
    thread.stack.resize(size);
    if (!memory.Read(thread.stack_start, thread.stack.data(), size)) {
      return ValueError(prefix + "stack", "names bytes that were not recorded");
    }
    capture.threads.push_back(std::move(thread));
  }
  if (capture.threads.empty()) return ValueError("thread.0.tid", "is missing");
  return capture;
}

}  // namespace ember::testing
