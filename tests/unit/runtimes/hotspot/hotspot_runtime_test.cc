// HotSpotRuntime, the runtime the stack builder drives, on a live JVM (ember.fixture.Phases under
// Debian's JDK 17, no JVM flag) read through process_vm_readv and ptrace: detection from the
// process's maps, the step of a Java leaf, the splice naming it, the retry of a JVM not yet ready
// (its tables read as zeros through a stand-in reader, an injected clock), a process that is no
// JVM, a libjvm that cannot be read, exit, and the cache of named frames across generations.
#include "runtimes/hotspot/hotspot_runtime.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "process/proc_maps.h"
#include "process/process_table.h"
#include "runtimes/process_memory.h"
#include "status/metrics_registry.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"
#include "support/thread_capture.h"

namespace ember::hotspot {
namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A Process as the process table publishes it: executable mappings from /proc/PID/maps.
Process ProcessOf(pid_t pid) {
  Process process;
  process.pid = static_cast<uint32_t>(pid);
  process.name = "java";
  process.proc_dir = absl::StrCat("/proc/", pid);
  absl::StatusOr<std::vector<MemoryMapping>> maps =
      ParseProcMaps(ReadText(process.proc_dir + "/maps"));
  EXPECT_TRUE(maps.ok()) << maps.status();
  if (maps.ok()) {
    for (MemoryMapping& mapping : *maps) {
      if (mapping.executable) process.mappings.push_back(std::move(mapping));
    }
  }
  return process;
}

// The line of `series` (name{labels}) in the registry's text, or "" when absent.
std::string MetricLine(const MetricsRegistry& metrics, const std::string& series) {
  const std::string text = metrics.Render();
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return "";
  return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

// Reads as a fresh JVM's libjvm does before the VM set its tables up (every word 0), until
// `live` is set; then reads the process.
class NotYetReadyMemory : public MemoryReader {
 public:
  NotYetReadyMemory(pid_t pid, const bool& live) : process_(pid), live_(live) {}
  bool Read(uint64_t address, void* out, size_t size) override {
    if (live_) return process_.Read(address, out, size);
    std::memset(out, 0, size);
    return true;
  }

 private:
  ProcessMemoryReader process_;
  const bool& live_;
};

// The runtime's frame kind (low byte: JavaFrameKind plus one) is an interpreted or compiled
// Java method, not a stub or a JNI wrapper.
bool IsJavaMethod(const RuntimeFrame& frame) {
  const uint32_t kind = frame.kind & 0xff;
  return kind == static_cast<uint32_t>(JavaFrameKind::kInterpreted) + 1 ||
         kind == static_cast<uint32_t>(JavaFrameKind::kCompiled) + 1;
}

class HotSpotRuntimeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string java = std::string(EMBER_JDK17_HOME) + "/bin/java";
    if (!std::filesystem::exists(java)) return;
    // A long warm-up: the phases run (compiled and interpreted Java on the main thread) for the
    // whole test without waiting for stdin.
    java_ = new ember::testing::Subprocess(
        {java, "-cp", EMBER_JAVA_FIXTURE_CLASSES, "ember.fixture.Phases", "1", "120"});
    // Ready once libjvm is mapped and the VM has run Java code for a while.
    std::this_thread::sleep_for(std::chrono::seconds(3));
  }
  static void TearDownTestSuite() {
    delete java_;
    java_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(java_, nullptr) << EMBER_JDK17_HOME << "/bin/java is missing: install "
                              << "openjdk-17-jdk-headless";
  }

  // Stops the JVM's main thread until its pc is in a compiled or interpreted Java method that
  // `runtime` steps; then runs `with_leaf` with the step's RuntimeFrame while it stands still.
  // False when no stop found one (bounded).
  bool WithJavaLeaf(HotSpotRuntime& runtime,
                    const std::function<void(uint64_t pc, const RuntimeFrame&)>& with_leaf) {
    const pid_t pid = java_->pid();
    for (int attempt = 0; attempt < 50; ++attempt) {
      bool found = false;
      auto stopped = [&](const ember::testing::ThreadCapture& capture) -> absl::Status {
        // Java's main runs on the launcher's first thread: the lowest tid after the pid's.
        const ember::testing::CapturedThread* main_thread = nullptr;
        for (const ember::testing::CapturedThread& thread : capture.threads) {
          if (thread.tid > pid) {
            main_thread = &thread;
            break;
          }
        }
        if (main_thread == nullptr) return absl::NotFoundError("no main thread");
        StepResult result;
        RuntimeFrame frame;
        if (runtime.StepCodeOutsideFiles(static_cast<uint32_t>(pid), main_thread->frame_registers(),
                                         /*is_return_address=*/false, main_thread->stack_memory(),
                                         result, frame) &&
            result.end == StepEnd::kStepped && IsJavaMethod(frame)) {
          found = true;
          with_leaf(main_thread->ip(), frame);
        }
        return absl::OkStatus();
      };
      absl::StatusOr<ember::testing::ThreadCapture> capture =
          ember::testing::CaptureThreads(pid, 0, stopped, {});
      EXPECT_TRUE(capture.ok()) << capture.status();
      if (found) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Splices a sample of one user frame (the leaf at `pc`, named "[anon]" by the resolver) and
  // returns the frames it became.
  std::vector<const Frame*> SpliceLeaf(HotSpotRuntime& runtime, const Process& process, uint64_t pc,
                                       const RuntimeFrame& frame) {
    std::vector<const Frame*> stack = {&anon_};
    const uint64_t pcs[] = {pc};
    const RuntimeFrame frames[] = {frame};
    runtime.Splice(process, SampleView{},
                   UserFrames{.stack = stack, .begin = 0, .pcs = pcs, .runtime_frames = frames});
    return stack;
  }

  static ember::testing::Subprocess* java_;
  Frame anon_{.kind = FrameKind::kNative, .function = "[anon]"};
};

ember::testing::Subprocess* HotSpotRuntimeTest::java_ = nullptr;

TEST_F(HotSpotRuntimeTest, ALiveJvmIsSupportedItsJavaLeafSteppedAndSplicedAsJavaFrames) {
  MetricsRegistry metrics;
  HotSpotRuntime runtime(metrics);
  const Process process = ProcessOf(java_->pid());
  runtime.ProcessMapsChanged(process);
  ASSERT_EQ(runtime.OutcomeOf(process.pid), JvmOutcome::kSupported);
  runtime.SyncMetrics();
  EXPECT_EQ(MetricLine(metrics, "ember_hotspot_processes_total{outcome=\"supported\"}"),
            "ember_hotspot_processes_total{outcome=\"supported\"} 1");
  // The same maps again (a re-read that found nothing new) are not a second JVM.
  runtime.ProcessMapsChanged(process);
  runtime.SyncMetrics();
  EXPECT_EQ(runtime.stats().processes[static_cast<size_t>(JvmOutcome::kSupported)], 1u);

  std::vector<const Frame*> spliced;
  ASSERT_TRUE(WithJavaLeaf(runtime, [&](uint64_t pc, const RuntimeFrame& frame) {
    spliced = SpliceLeaf(runtime, process, pc, frame);
  })) << "the main thread was never stopped in Java code the runtime steps";
  EXPECT_EQ(runtime.stats().steps[static_cast<size_t>(StepOutcome::kStepped)], 1u);
  ASSERT_FALSE(spliced.empty());
  for (const Frame* frame : spliced) {
    EXPECT_EQ(frame->kind, FrameKind::kJvm) << frame->function;
    EXPECT_TRUE(absl::StartsWith(frame->function, "ember.fixture.Phases.") ||
                absl::StartsWith(frame->function, "sun.management.") ||
                absl::StartsWith(frame->function, "java."))
        << frame->function;
  }
  // The outermost is the method the frame runs (a compiled one's own, after those it inlined).
  EXPECT_TRUE(absl::EndsWith(spliced.back()->source_file, ".java")) << spliced.back()->function;
  EXPECT_EQ(runtime.stats().named, 1u);
  EXPECT_EQ(runtime.cached_frames(), 1u);
  runtime.SyncMetrics();
  EXPECT_EQ(MetricLine(metrics, "ember_hotspot_frames_stepped_total{outcome=\"stepped\"}"),
            "ember_hotspot_frames_stepped_total{outcome=\"stepped\"} 1");
}

TEST_F(HotSpotRuntimeTest, AJvmWhoseTablesAreNotReadyIsReadAgainAtEachGeneration) {
  MetricsRegistry metrics;
  bool live = false;
  int64_t now = 1'000'000'000;
  HotSpotRuntime runtime(
      metrics,
      [&](uint32_t pid) {
        return std::make_unique<NotYetReadyMemory>(static_cast<pid_t>(pid), live);
      },
      [&] { return now; });
  const Process process = ProcessOf(java_->pid());
  runtime.ProcessMapsChanged(process);
  ASSERT_EQ(runtime.OutcomeOf(process.pid), JvmOutcome::kNotReady);
  EXPECT_EQ(runtime.stats().processes[static_cast<size_t>(JvmOutcome::kNotReady)], 0u)
      << "counted once decided, not while pending";

  // Its tables unread, a sampled frame reads nothing again (no table reads, no log line on the
  // sampling path); each generation does, until the VM has set them up.
  FrameRegisters frame;
  frame.Set(kRegIp, 0x1000);
  frame.Set(kRegSp, 0x2000);
  StepResult result;
  RuntimeFrame runtime_frame;
  const StackMemory stack{};
  now += 10 * HotSpotRuntime::kRetryIntervalNs;
  EXPECT_FALSE(
      runtime.StepCodeOutsideFiles(process.pid, frame, false, stack, result, runtime_frame));
  EXPECT_EQ(runtime.stats().retries, 0u);
  runtime.NextGeneration();
  EXPECT_EQ(runtime.stats().retries, 1u);
  EXPECT_EQ(runtime.OutcomeOf(process.pid), JvmOutcome::kNotReady);

  live = true;  // the VM has set its tables up
  EXPECT_FALSE(
      runtime.StepCodeOutsideFiles(process.pid, frame, false, stack, result, runtime_frame));
  EXPECT_EQ(runtime.stats().retries, 1u) << "not on the sampling path";
  runtime.NextGeneration();
  EXPECT_EQ(runtime.stats().retries, 2u);
  EXPECT_EQ(runtime.OutcomeOf(process.pid), JvmOutcome::kSupported);
  runtime.SyncMetrics();
  EXPECT_EQ(MetricLine(metrics, "ember_hotspot_processes_total{outcome=\"supported\"}"),
            "ember_hotspot_processes_total{outcome=\"supported\"} 1");
  EXPECT_EQ(MetricLine(metrics, "ember_hotspot_processes_total{outcome=\"not_ready\"}"),
            "ember_hotspot_processes_total{outcome=\"not_ready\"} 0");
}

TEST_F(HotSpotRuntimeTest, AProcessWithoutLibjvmIsNoJvm) {
  MetricsRegistry metrics;
  HotSpotRuntime runtime(metrics);
  const Process process = ProcessOf(getpid());
  ASSERT_FALSE(process.mappings.empty());
  runtime.ProcessMapsChanged(process);
  EXPECT_EQ(runtime.OutcomeOf(process.pid), std::nullopt);
  for (uint64_t count : runtime.stats().processes) EXPECT_EQ(count, 0u);
}

TEST_F(HotSpotRuntimeTest, ALibjvmThatCannotBeReadIsCountedUnreadable) {
  // A process root (proc_root/PID/root) whose libjvm.so is not an ELF file.
  ember::testing::TempDir proc("hotspot-proc");
  ASSERT_FALSE(proc.path().empty());
  const uint32_t pid = 4242;
  const std::string inside = "/usr/lib/jvm/broken/lib/server/libjvm.so";
  const std::string file = absl::StrCat(proc.path(), "/", pid, "/root", inside);
  std::filesystem::create_directories(std::filesystem::path(file).parent_path());
  ember::testing::WriteFile(file, "not an ELF file, though named like libjvm");
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  Process process;
  process.pid = pid;
  process.name = "java";
  process.mappings.push_back(
      MemoryMapping{.start = 0x7f0000000000,
                    .end = 0x7f0000100000,
                    .offset = 0,
                    .readable = true,
                    .executable = true,
                    .file = FileIdentity{.dev = st.st_dev, .inode = st.st_ino},
                    .path = inside});

  MetricsRegistry metrics;
  HotSpotRuntime runtime(metrics, nullptr, nullptr, proc.path());
  runtime.ProcessMapsChanged(process);
  // Its outcome is kept while that libjvm stays mapped: maps read again count and log nothing.
  EXPECT_EQ(runtime.OutcomeOf(pid), JvmOutcome::kUnreadableLibjvm);
  runtime.ProcessMapsChanged(process);
  EXPECT_EQ(runtime.stats().processes[static_cast<size_t>(JvmOutcome::kUnreadableLibjvm)], 1u);
  runtime.SyncMetrics();
  EXPECT_EQ(MetricLine(metrics, "ember_hotspot_processes_total{outcome=\"unreadable_libjvm\"}"),
            "ember_hotspot_processes_total{outcome=\"unreadable_libjvm\"} 1");
}

TEST_F(HotSpotRuntimeTest, AnExitedProcessIsForgotten) {
  MetricsRegistry metrics;
  HotSpotRuntime runtime(metrics);
  const Process process = ProcessOf(java_->pid());
  runtime.ProcessMapsChanged(process);
  ASSERT_EQ(runtime.OutcomeOf(process.pid), JvmOutcome::kSupported);
  runtime.ProcessExited(process.pid);
  EXPECT_EQ(runtime.OutcomeOf(process.pid), std::nullopt);
  // Its frames are no longer stepped: the pid may name another process next.
  FrameRegisters frame;
  frame.Set(kRegIp, 0x1000);
  StepResult result;
  RuntimeFrame runtime_frame;
  EXPECT_FALSE(runtime.StepCodeOutsideFiles(process.pid, frame, false, StackMemory{}, result,
                                            runtime_frame));
}

TEST_F(HotSpotRuntimeTest, NamedFramesLastTwoGenerationsAfterTheirLastUse) {
  MetricsRegistry metrics;
  HotSpotRuntime runtime(metrics);
  const Process process = ProcessOf(java_->pid());
  runtime.ProcessMapsChanged(process);
  ASSERT_EQ(runtime.OutcomeOf(process.pid), JvmOutcome::kSupported);
  uint64_t pc = 0;
  RuntimeFrame leaf;
  std::vector<const Frame*> first;
  ASSERT_TRUE(WithJavaLeaf(runtime, [&](uint64_t at, const RuntimeFrame& frame) {
    pc = at;
    leaf = frame;
    first = SpliceLeaf(runtime, process, pc, frame);
  }));
  ASSERT_EQ(runtime.cached_frames(), 1u);
  ASSERT_FALSE(first.empty());
  ASSERT_NE(first[0], &anon_);

  runtime.NextGeneration();  // generation 1: used in 0, kept
  EXPECT_EQ(runtime.cached_frames(), 1u);
  // Used again: the same Frame objects, from the cache, with no read of the process.
  const uint64_t named = runtime.stats().named;
  EXPECT_EQ(SpliceLeaf(runtime, process, pc, leaf), first);
  EXPECT_EQ(runtime.stats().named, named);
  runtime.NextGeneration();  // generation 2: used in 1, kept
  EXPECT_EQ(runtime.cached_frames(), 1u);
  runtime.NextGeneration();  // generation 3: unused for two, dropped
  EXPECT_EQ(runtime.cached_frames(), 0u);
}

}  // namespace
}  // namespace ember::hotspot
