// Stopping a live process's threads: each one's registers and stack as a sample would hold them,
// every thread running on afterwards whatever happened, clear errors for processes that are gone,
// and the capture read back from recorded memory text.
#include "support/thread_capture.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtimes/process_memory.h"
#include "support/nm_symbols.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kVforker = 4;
// The counters of the threads every spinner runs.
constexpr int kAlways[] = {0, 1, 2, 3, 5};

struct Mapping {
  uint64_t start = 0;
  uint64_t end = 0;
  std::string path;
};

std::vector<Mapping> Maps(pid_t pid) {
  std::ifstream maps(absl::StrCat("/proc/", pid, "/maps"));
  std::vector<Mapping> result;
  std::string line;
  while (std::getline(maps, line)) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    std::vector<std::string> range = absl::StrSplit(fields[0], '-');
    Mapping mapping;
    if (!absl::SimpleHexAtoi(range[0], &mapping.start) ||
        !absl::SimpleHexAtoi(range[1], &mapping.end)) {
      continue;
    }
    if (fields.size() > 5) mapping.path = fields[5];
    result.push_back(mapping);
  }
  return result;
}

const Mapping* MappingOf(const std::vector<Mapping>& maps, uint64_t address) {
  for (const Mapping& mapping : maps) {
    if (address >= mapping.start && address < mapping.end) return &mapping;
  }
  return nullptr;
}

// Field N of /proc/PID/stat (proc(5) numbering, N >= 3).
std::string StatField(const std::string& path, int n) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string stat = text.str();
  std::vector<std::string> fields =
      absl::StrSplit(stat.substr(stat.rfind(')') + 1), ' ', absl::SkipEmpty());
  return static_cast<int>(fields.size()) > n - 3 ? fields[n - 3] : "";
}

pid_t TidNamed(pid_t pid, const std::string& name) {
  for (const auto& entry :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"))) {
    std::ifstream comm(entry.path() / "comm");
    std::string line;
    std::getline(comm, line);
    if (line == name) return std::stoi(entry.path().filename().string());
  }
  return 0;
}

// The spinner program, running, with where its counters and spin functions are.
class Spinner {
 public:
  explicit Spinner(bool with_vfork = false)
      : process_(with_vfork ? std::vector<std::string>{EMBER_THREAD_SPINNER, "vfork"}
                            : std::vector<std::string>{EMBER_THREAD_SPINNER}) {}

  void Start() {
    ASSERT_TRUE(process_.WaitForOutput("\n", std::chrono::seconds(10))) << process_.output();
    uint64_t spin_main = 0;
    ASSERT_EQ(std::sscanf(process_.output().c_str(), "ready counters=%lx SpinMain=%lx", &counters_,
                          &spin_main),
              2)
        << process_.output();
    for (const NmSymbol& symbol : NmSizedSymbols(EMBER_THREAD_SPINNER, "Tt", false)) {
      if (symbol.name == "SpinMain" || symbol.name == "SpinA" || symbol.name == "SpinB" ||
          symbol.name == "SpinRegisters") {
        functions_.push_back(symbol);
      }
    }
    ASSERT_EQ(functions_.size(), 4u);
    for (const NmSymbol& symbol : functions_) {
      if (symbol.name == "SpinMain") bias_ = spin_main - symbol.address;
    }
  }

  pid_t pid() const { return process_.pid(); }
  Subprocess& process() { return process_; }

  bool InFunction(uint64_t pc, const std::string& name) const {
    for (const NmSymbol& symbol : functions_) {
      if (symbol.name == name) {
        return pc >= bias_ + symbol.address && pc < bias_ + symbol.address + symbol.size;
      }
    }
    return false;
  }

  uint64_t Counter(int index) {
    uint64_t value = 0;
    ProcessMemoryReader memory(pid());
    EXPECT_TRUE(memory.Read(counters_ + 8 * index, &value, sizeof(value)));
    return value;
  }

  // Whether the counter moves within a few seconds.
  bool Moves(int index) {
    const uint64_t before = Counter(index);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      if (Counter(index) != before) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return false;
  }

 private:
  Subprocess process_;
  uint64_t counters_ = 0;
  uint64_t bias_ = 0;
  std::vector<NmSymbol> functions_;
};

TEST(ThreadCaptureTest, StopsEveryThreadWithItsRegistersAndStackAndLetsThemRunOn) {
  Spinner spinner;
  ASSERT_NO_FATAL_FAILURE(spinner.Start());
  bool called = false;
  absl::StatusOr<ThreadCapture> capture = CaptureThreads(
      spinner.pid(), 0,
      [&](const ThreadCapture& stopped) {
        called = true;
        // The threads stand still while the callback runs: no counter moves.
        std::vector<uint64_t> before;
        for (int i : kAlways) before.push_back(spinner.Counter(i));
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        for (size_t i = 0; i < before.size(); ++i) {
          EXPECT_EQ(spinner.Counter(kAlways[i]), before[i]) << kAlways[i];
        }
        ProcessMemoryReader memory(spinner.pid());
        for (const CapturedThread& thread : stopped.threads) {
          uint64_t live = 0, copied = 0;
          EXPECT_TRUE(memory.Read(thread.sp(), &live, sizeof(live)));
          EXPECT_GE(thread.stack.size(), sizeof(copied)) << thread.comm;
          if (thread.stack.size() >= sizeof(copied)) {
            std::memcpy(&copied, thread.stack.data(), sizeof(copied));
          }
          EXPECT_EQ(copied, live) << thread.comm;
        }
        return absl::OkStatus();
      },
      CaptureOptions{});
  ASSERT_TRUE(capture.ok()) << capture.status();
  EXPECT_TRUE(called);
  EXPECT_EQ(capture->pid, spinner.pid());
  ASSERT_EQ(capture->threads.size(), 5u);

  const std::vector<Mapping> maps = Maps(spinner.pid());
  const uint64_t start_stack =
      std::stoull(StatField(absl::StrCat("/proc/", spinner.pid(), "/stat"), 28));
  const std::vector<std::pair<std::string, std::string>> expected = {{"spin-main", "SpinMain"},
                                                                     {"spin-a", "SpinA"},
                                                                     {"spin-b", "SpinB"},
                                                                     {"spin-regs", "SpinRegisters"},
                                                                     {"sleeper", ""}};
  for (const auto& [comm, function] : expected) {
    const CapturedThread* thread = capture->Find(TidNamed(spinner.pid(), comm));
    ASSERT_NE(thread, nullptr) << comm;
    EXPECT_EQ(thread->comm, comm);
    if (!function.empty()) {
      EXPECT_TRUE(spinner.InFunction(thread->ip(), function))
          << comm << " stopped at 0x" << std::hex << thread->ip();
    } else {
      const Mapping* code = MappingOf(maps, thread->ip());
      ASSERT_NE(code, nullptr);
      EXPECT_THAT(code->path, HasSubstr("libc.so")) << comm;
    }
    // The whole stack, from sp to where the BPF snapshot would stop: the mapping's end, or for
    // the main thread the start of its frames.
    EXPECT_EQ(thread->stack_start, thread->sp());
    const Mapping* stack = MappingOf(maps, thread->sp());
    ASSERT_NE(stack, nullptr);
    const uint64_t end = thread->tid == spinner.pid() ? start_stack : stack->end;
    EXPECT_EQ(thread->stack_start + thread->stack.size(), end) << comm;
    EXPECT_FALSE(thread->clamped);
    EXPECT_FALSE(thread->no_stack_mapping);
    EXPECT_EQ(thread->frame_registers().value[kThreadRegisterSp], thread->sp());
  }
  EXPECT_EQ(capture->threads[0].tid, spinner.pid());  // by tid: the main thread first

  // Each register in its DWARF place (rax rdx rcx rbx rsi rdi rbp rsp r8..r15 rip).
  const CapturedThread* known = capture->Find(TidNamed(spinner.pid(), "spin-regs"));
  ASSERT_NE(known, nullptr);
  for (int reg = 0; reg < 16; ++reg) {
    if (reg == kThreadRegisterBp || reg == kThreadRegisterSp) continue;
    EXPECT_EQ(known->regs[reg], 0x5eed0000u + reg) << "DWARF register " << reg;
  }

  for (int i : kAlways) EXPECT_TRUE(spinner.Moves(i)) << i;
}

TEST(ThreadCaptureTest, AStoppedProcessIsCapturedAndStaysStoppedUntilContinued) {
  Spinner spinner;
  ASSERT_NO_FATAL_FAILURE(spinner.Start());
  // As a fixture recorder stops a JVM first: every thread in group stop before the capture.
  ASSERT_EQ(kill(spinner.pid(), SIGSTOP), 0);
  const std::string stat = absl::StrCat("/proc/", spinner.pid(), "/stat");
  for (int i = 0; i < 5000 && StatField(stat, 3) != "T"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  absl::StatusOr<ThreadCapture> capture = CaptureThreads(spinner.pid(), 256);
  ASSERT_TRUE(capture.ok()) << capture.status();
  ASSERT_EQ(capture->threads.size(), 5u);
  const CapturedThread* spin_a = capture->Find(TidNamed(spinner.pid(), "spin-a"));
  ASSERT_NE(spin_a, nullptr);
  EXPECT_TRUE(spinner.InFunction(spin_a->ip(), "SpinA"));
  // Let go, the threads are back in the stop they were in.
  const uint64_t before = spinner.Counter(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(spinner.Counter(1), before);
  EXPECT_EQ(StatField(stat, 3), "T");
  ASSERT_EQ(kill(spinner.pid(), SIGCONT), 0);
  for (int i : kAlways) EXPECT_TRUE(spinner.Moves(i)) << i;
}

TEST(ThreadCaptureTest, ClampsEachCopyToStackBytes) {
  Spinner spinner;
  ASSERT_NO_FATAL_FAILURE(spinner.Start());
  absl::StatusOr<ThreadCapture> capture = CaptureThreads(spinner.pid(), 64);
  ASSERT_TRUE(capture.ok()) << capture.status();
  ASSERT_FALSE(capture->threads.empty());
  ProcessMemoryReader memory(spinner.pid());
  for (const CapturedThread& thread : capture->threads) {
    EXPECT_EQ(thread.stack.size(), 64u) << thread.comm;
    EXPECT_TRUE(thread.clamped) << thread.comm;
  }
  for (int i : kAlways) EXPECT_TRUE(spinner.Moves(i)) << i;
}

TEST(ThreadCaptureTest, AnErrorWhileStoppedIsReturnedAndEveryThreadIsLetGo) {
  Spinner spinner;
  ASSERT_NO_FATAL_FAILURE(spinner.Start());
  absl::StatusOr<ThreadCapture> capture = CaptureThreads(
      spinner.pid(), 256,
      [&](const ThreadCapture&) {
        // A second tracer is refused while the first holds the threads.
        absl::StatusOr<ThreadCapture> nested = CaptureThreads(spinner.pid(), 256);
        EXPECT_EQ(nested.status().code(), absl::StatusCode::kPermissionDenied) << nested.status();
        EXPECT_THAT(nested.status().message(), HasSubstr("cannot ptrace thread"));
        return absl::DataLossError("walk failed");
      },
      CaptureOptions{});
  EXPECT_EQ(capture.status(), absl::DataLossError("walk failed"));
  for (int i : kAlways) EXPECT_TRUE(spinner.Moves(i)) << i;
  // Nothing is left attached: the next capture succeeds.
  EXPECT_TRUE(CaptureThreads(spinner.pid(), 256).ok());
}

TEST(ThreadCaptureTest, AThreadThatDoesNotStopFailsTheCaptureInTimeAndIsLetGoToo) {
  Spinner spinner(/*with_vfork=*/true);
  ASSERT_NO_FATAL_FAILURE(spinner.Start());
  const pid_t vforker = TidNamed(spinner.pid(), "vforker");
  ASSERT_NE(vforker, 0);
  // In vfork the thread sleeps in a killable wait: an interrupt does not end it.
  const std::string stat = absl::StrCat("/proc/", spinner.pid(), "/task/", vforker, "/stat");
  for (int i = 0; i < 5000 && StatField(stat, 3) != "D"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(StatField(stat, 3), "D");

  const auto started = std::chrono::steady_clock::now();
  absl::StatusOr<ThreadCapture> capture = CaptureThreads(
      spinner.pid(), 256, [](const ThreadCapture&) { return absl::OkStatus(); },
      CaptureOptions{.stop_timeout = std::chrono::milliseconds(300)});
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(capture.status().code(), absl::StatusCode::kDeadlineExceeded) << capture.status();
  EXPECT_THAT(capture.status().message(),
              HasSubstr(absl::StrCat("thread ", vforker, " (vforker) of process ", spinner.pid(),
                                     " did not stop within 300 ms")));
  EXPECT_LT(took, std::chrono::seconds(10));  // bounded, not a hang
  for (int i : kAlways) EXPECT_TRUE(spinner.Moves(i)) << i;
  // Out of vfork, the thread that never stopped runs on rather than stopping for a tracer that
  // has gone.
  EXPECT_EQ(spinner.Counter(kVforker), 1u);
  spinner.process().CloseStdin();
  EXPECT_TRUE(spinner.Moves(kVforker));
  EXPECT_TRUE(spinner.Moves(kVforker));
}

TEST(ThreadCaptureTest, AProcessThatExitedOrNeverWasIsAClearError) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  const std::string stat = absl::StrCat("/proc/", child, "/stat");
  for (int i = 0; i < 5000 && StatField(stat, 3) != "Z"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  absl::StatusOr<ThreadCapture> zombie = CaptureThreads(child, 256);
  EXPECT_EQ(zombie.status().code(), absl::StatusCode::kFailedPrecondition) << zombie.status();
  EXPECT_THAT(zombie.status().message(), HasSubstr(absl::StrCat("process ", child, " has exited")));
  ASSERT_EQ(waitpid(child, nullptr, 0), child);

  absl::StatusOr<ThreadCapture> gone = CaptureThreads(child, 256);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound) << gone.status();
  EXPECT_THAT(gone.status().message(),
              HasSubstr(absl::StrCat("process ", child, " does not exist")));
  EXPECT_EQ(CaptureThreads(0, 256).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CaptureThreads(-1, 256).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ThreadCaptureTest, ACaptureRoundTripsThroughRecordedMemoryText) {
  Spinner spinner;
  ASSERT_NO_FATAL_FAILURE(spinner.Start());
  RecordedMemory recorded;
  absl::StatusOr<ThreadCapture> capture = CaptureThreads(
      spinner.pid(), 512,
      [&](const ThreadCapture& stopped) {
        // What a walk would read while the threads stand still lands beside the capture.
        ProcessMemoryReader live(stopped.pid);
        RecordingMemoryReader reader(live, recorded);
        uint64_t word = 0;
        for (const CapturedThread& thread : stopped.threads) {
          if (!reader.Read(thread.sp() + 8, &word, sizeof(word))) {
            return absl::InternalError("stack read failed");
          }
        }
        return absl::OkStatus();
      },
      CaptureOptions{});
  ASSERT_TRUE(capture.ok()) << capture.status();
  // A name with a space, a backslash and a newline survives the one-line value.
  capture->threads[1].comm = "odd name\\\n";
  StoreCapture(*capture, recorded);

  absl::StatusOr<RecordedMemory> parsed = RecordedMemory::Parse(recorded.Serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<ThreadCapture> loaded = LoadCapture(*parsed);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->pid, capture->pid);
  ASSERT_EQ(loaded->threads.size(), capture->threads.size());
  for (size_t i = 0; i < capture->threads.size(); ++i) {
    const CapturedThread& want = capture->threads[i];
    const CapturedThread& got = loaded->threads[i];
    EXPECT_EQ(got.tid, want.tid);
    EXPECT_EQ(got.comm, want.comm);
    EXPECT_EQ(got.regs, want.regs);
    EXPECT_EQ(got.stack_start, want.stack_start);
    EXPECT_EQ(got.stack, want.stack);
    EXPECT_EQ(got.clamped, want.clamped);
    EXPECT_EQ(got.no_stack_mapping, want.no_stack_mapping);
    // Replayed, the registers and the snapshot serve a step as the live ones would.
    const FrameRegisters frame = got.frame_registers();
    EXPECT_EQ(frame.known, (1u << kThreadRegisterCount) - 1);
    EXPECT_EQ(frame.value[kThreadRegisterIp], want.ip());
    uint64_t first = 0;
    std::memcpy(&first, want.stack.data(), sizeof(first));
    EXPECT_EQ(got.stack_memory().Read(want.sp()), first);
  }
  EXPECT_EQ(*parsed->Get("thread.0.tid"), absl::StrCat(spinner.pid()));

  // Damaged values are errors naming them.
  RecordedMemory damaged = *parsed;
  damaged.Set("thread.1.regs", "1 2 3");
  EXPECT_THAT(LoadCapture(damaged).status().message(), HasSubstr("thread.1.regs"));
  damaged = *parsed;
  damaged.Set("thread.0.stack",
              absl::StrCat(absl::Hex(capture->threads[0].sp() - 0x100000), " 10"));
  EXPECT_THAT(LoadCapture(damaged).status().message(), HasSubstr("not recorded"));
  damaged = *parsed;
  damaged.Set("thread.0.stack", "10 10 sideways");
  EXPECT_THAT(LoadCapture(damaged).status().message(), HasSubstr("unknown flag"));
  RecordedMemory empty;
  EXPECT_THAT(LoadCapture(empty).status().message(), HasSubstr("capture.pid"));
}

}  // namespace
}  // namespace ember::testing
