// Records a fixture for recorded_jvm_test: the memory a walk of a live JVM's main thread read.
// Built with the tests, run by hand (as root, for ptrace) when a JDK is added or changes:
//
//   build/record_jvm JAVA_HOME CLASSES OUT [WARM_UP_SECONDS]
//
// e.g. record_jvm /usr/lib/jvm/java-17-openjdk-amd64 build/tests/fixtures/java/classes
//      tests/data/hotspot/jdk17.fixture
//
// It starts ember.fixture.Phases (tests/fixtures/java: leaves reached through known nesting, some
// compiled, some inlined, main interpreted) with no JVM flag, lets it warm up, prints
// `jcmd PID Thread.print` (kept in the fixture as "jcmd"), then stops every thread
// (CaptureThreads) and, while they stand still, through a RecordingMemoryReader: detects libjvm,
// reads the VM structure tables and the code cache, unwinds the thread that runs main
// with a DwarfUnwinder whose runtime step is the HotSpot FrameStepper, and walks and names its
// Java frames from where the native walk entered the code cache (recorded_jvm_walk.h). The
// fixture keeps libjvm's symbols and bias, the main thread's registers and stack, the entry
// registers, the expected frames and only the bytes read. A stop whose Java part does not reach
// the call stub (a leaf in a prologue, say) is tried again, up to 40 times, as is one that lacks a
// compiled, an inlined or an interpreted frame, or has one not named. Check the expected frames
// printed against the jcmd text before committing a fixture.
#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "process/proc_maps.h"
#include "recorded_jvm_walk.h"
#include "runtimes/hotspot/code_cache.h"
#include "runtimes/hotspot/frame_step.h"
#include "runtimes/hotspot/jvm_detect.h"
#include "runtimes/hotspot/method_namer.h"
#include "runtimes/hotspot/vm_structs.h"
#include "runtimes/process_memory.h"
#include "support/recorded_memory.h"
#include "support/subprocess.h"
#include "support/thread_capture.h"
#include "unwind/dwarf_unwinder.h"
#include "unwind/runtime_step.h"

namespace ember::hotspot::testing {
namespace {

using ember::testing::CapturedThread;
using ember::testing::RecordedMemory;
using ember::testing::RecordingMemoryReader;
using ember::testing::ThreadCapture;

// The unwinder's hook: steps code-cache frames with the FrameStepper and keeps the registers of
// the first frame it was asked about (where the native walk entered the code cache).
class EntryStepper : public RuntimeStepper {
 public:
  explicit EntryStepper(FrameStepper& stepper) : stepper_(stepper) {}
  bool Step(uint32_t, const FrameRegisters& frame, bool is_return_address, const StackMemory& stack,
            StepResult& result, RuntimeFrame& runtime_frame) override {
    if (!stepper_.InCodeCache(frame.value[kRegIp])) return false;
    if (!entry_) {
      entry_ = frame;
      entry_leaf_ = !is_return_address;
    }
    JavaStep step;
    stepper_.Step(frame, !is_return_address, stack, step);
    result.Reset();
    result.read_past_stack = step.read_past_stack;
    if (step.outcome == StepOutcome::kStepped) {
      result.caller = step.caller;
      result.end = StepEnd::kStepped;
      runtime_frame = {.object = step.frame.object,
                       .position = step.frame.position,
                       .kind = static_cast<uint32_t>(step.frame.kind) + 1,
                       .check = static_cast<uint32_t>(step.frame.compile_id)};
    }
    return true;
  }
  const std::optional<FrameRegisters>& entry() const { return entry_; }
  bool entry_leaf() const { return entry_leaf_; }

 private:
  FrameStepper& stepper_;
  std::optional<FrameRegisters> entry_;
  bool entry_leaf_ = false;
};

// The thread that runs Java's main: the launcher's first thread, so the lowest tid after the
// process's own (pid + 1 on a quiet machine, not when other processes started meanwhile).
const CapturedThread* JavaMainThread(const ThreadCapture& capture) {
  for (const CapturedThread& thread : capture.threads) {
    if (thread.tid > capture.pid) return &thread;
  }
  return nullptr;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The "main" thread's part of a Thread.print: what the expected frames are checked against.
std::string MainThreadOf(const std::string& thread_print) {
  const size_t start = thread_print.find("\n\"main\" ");
  if (start == std::string::npos) return thread_print;
  const size_t end = thread_print.find("\n\n", start + 1);
  return thread_print.substr(start + 1, end == std::string::npos ? end : end - start - 1);
}

// One attempt: fills `fixture` and returns the walk's lines when the walk reached the call stub.
absl::StatusOr<std::vector<std::string>> RecordOnce(pid_t pid, RecordedMemory& fixture) {
  std::vector<std::string> lines;
  auto stopped = [&](const ThreadCapture& capture) -> absl::Status {
    const CapturedThread* main_thread = JavaMainThread(capture);
    if (main_thread == nullptr) return absl::NotFoundError("no thread besides the launcher's");
    const std::string proc_dir = absl::StrCat("/proc/", pid);
    absl::StatusOr<std::vector<MemoryMapping>> maps = ParseProcMaps(ReadText(proc_dir + "/maps"));
    if (!maps.ok()) return maps.status();
    absl::StatusOr<std::optional<JvmProcess>> jvm =
        DetectJvm(*maps, proc_dir + "/root", nullptr, proc_dir);
    if (!jvm.ok()) return jvm.status();
    if (!jvm->has_value()) return absl::NotFoundError("no libjvm.so in the process's maps");
    ProcessMemoryReader live(pid);
    RecordingMemoryReader memory(live, fixture);
    absl::StatusOr<HotSpotLayout> layout = ReadHotSpotLayout(memory, **jvm);
    if (!layout.ok()) return layout.status();
    CodeCacheInfo info;
    const CodeCacheStatus status = ReadCodeCacheInfo(*layout, (*jvm)->bias, memory, &info);
    if (status != CodeCacheStatus::kReady) {
      return absl::UnavailableError(absl::StrCat("code cache: ", CodeCacheStatusName(status)));
    }
    // The native walk, to find where the Java part starts.
    CodeCache unwind_cache(*layout, info);
    FrameStepper unwind_stepper(unwind_cache, memory);
    EntryStepper entry_stepper(unwind_stepper);
    DwarfUnwinder unwinder;
    unwinder.set_runtime_stepper(&entry_stepper);
    std::vector<ExecutableMapping> executable;
    for (const MemoryMapping& m : *maps) {
      if (!m.executable) continue;
      executable.push_back(
          {m, m.IsFileBacked() ? FileLocation(proc_dir + "/root", m.path) : FileLocation()});
    }
    const UserStack user_stack{.registers = main_thread->regs,
                               .stack = main_thread->stack,
                               .clamped = main_thread->clamped};
    UnwindResult unwound = unwinder.Unwind(
        static_cast<uint32_t>(pid), 1, [&] { return executable; }, user_stack);
    std::fprintf(stderr, "native walk: %zu frames\n", unwound.frames.size());
    if (!entry_stepper.entry()) return absl::NotFoundError("the walk met no code-cache frame");

    // The walk the replay repeats, with a cache and namer of its own (as replay starts cold).
    CodeCache cache(*layout, info);
    FrameStepper stepper(cache, memory);
    MethodNamer namer(*layout);
    const JavaWalk walk = WalkJava(stepper, namer, *layout, memory, *entry_stepper.entry(),
                                   entry_stepper.entry_leaf(), main_thread->stack_memory());
    lines = walk.Lines();
    if (walk.end != StepOutcome::kStepped) {
      return absl::UnavailableError(absl::StrCat("the Java walk ended early: ", lines.back()));
    }
    // The replay tests need each kind of frame: compiled, inlined into it, interpreted.
    const std::string all = absl::StrJoin(lines, "\n");
    for (const char* kind : {"compiled ", "inlined ", "interpreted "}) {
      if (!absl::StrContains(all, kind)) {
        return absl::UnavailableError(absl::StrCat("no ", kind, "frame in:\n", all));
      }
    }
    if (absl::StrContains(all, " unnamed")) {
      return absl::UnavailableError(absl::StrCat("a frame not named in:\n", all));
    }
    ThreadCapture main_only{.pid = capture.pid, .threads = {*main_thread}};
    ember::testing::StoreCapture(main_only, fixture);
    StoreSymbols((*jvm)->libjvm->symbols, (*jvm)->bias, fixture);
    fixture.Set("libjvm.build_id", (*jvm)->libjvm->build_id);
    fixture.Set("jdk", absl::StrCat(layout->major, ".", layout->minor, ".", layout->security));
    StoreEntry(*entry_stepper.entry(), entry_stepper.entry_leaf(), fixture);
    StoreExpected(lines, fixture);
    return absl::OkStatus();
  };
  absl::StatusOr<ThreadCapture> capture =
      ember::testing::CaptureThreads(pid, 0, stopped, ember::testing::CaptureOptions{});
  if (!capture.ok()) return capture.status();
  return lines;
}

int Main(int argc, char** argv) {
  if (argc < 4 || argc > 5) {
    std::fprintf(stderr, "usage: record_jvm JAVA_HOME CLASSES OUT [WARM_UP_SECONDS]\n");
    return 2;
  }
  const std::string java_home = argv[1];
  int warm_up = 5;
  if (argc == 5 && (!absl::SimpleAtoi(argv[4], &warm_up) || warm_up < 0 || warm_up > 600)) {
    std::fprintf(stderr, "record_jvm: WARM_UP_SECONDS must be 0..600, not %s\n", argv[4]);
    return 2;
  }
  ember::testing::Subprocess java({java_home + "/bin/java", "-cp", argv[2], "ember.fixture.Phases",
                                   "120", std::to_string(warm_up)});
  java.WriteStdin("x");  // read once warm-up ends: then the measured phases run
  std::this_thread::sleep_for(std::chrono::seconds(warm_up + 2));
  for (int attempt = 0; attempt < 40; ++attempt) {
    const ember::testing::RunResult jcmd = ember::testing::RunProgram(
        {java_home + "/bin/jcmd", std::to_string(java.pid()), "Thread.print"});
    if (!jcmd.exit_code || *jcmd.exit_code != 0) {
      std::fprintf(stderr, "record_jvm: jcmd failed: %s\n", jcmd.output.c_str());
      return 1;
    }
    RecordedMemory fixture;
    fixture.Set("jcmd", absl::CEscape(MainThreadOf(jcmd.output)));
    absl::StatusOr<std::vector<std::string>> lines = RecordOnce(java.pid(), fixture);
    if (!lines.ok()) {
      std::fprintf(stderr, "attempt %d: %s\n", attempt,
                   std::string(lines.status().message()).c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      continue;
    }
    if (absl::Status saved = fixture.Save(argv[3]); !saved.ok()) {
      std::fprintf(stderr, "record_jvm: %s\n", std::string(saved.message()).c_str());
      return 1;
    }
    std::printf("%s\n", MainThreadOf(jcmd.output).c_str());
    std::printf("--- expected frames (innermost first)\n");
    for (const std::string& line : *lines) std::printf("%s\n", line.c_str());
    std::printf("--- %zu ranges, %zu bytes recorded\n", fixture.range_count(),
                fixture.byte_count());
    return 0;
  }
  std::fprintf(stderr, "record_jvm: no attempt walked the main thread to the call stub\n");
  return 1;
}

}  // namespace
}  // namespace ember::hotspot::testing

int main(int argc, char** argv) { return ember::hotspot::testing::Main(argc, argv); }
