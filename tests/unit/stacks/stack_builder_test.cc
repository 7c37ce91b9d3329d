// StackBuilder on synthetic sample records of this test process itself: its own functions for
// the walked frames, a real snapshot of its own stack unwound with DWARF CFI, the markers, how
// user stacks ended, and runtime splices (a fake runtime, and CPython's on a live python3.11).
#include "stacks/stack_builder.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtimes/cpython/cpython_runtime.h"
#include "runtimes/cpython/frame_walker.h"
#include "support/subprocess.h"

namespace ember {
namespace {

using ::testing::HasSubstr;

// A ring-buffer record as bpf/profiler.bpf.c writes it, from its parts.
struct Record {
  std::vector<uint64_t> kernel;
  std::vector<uint64_t> user;
  uint32_t flags = 0;
  std::array<uint64_t, EMBER_USER_REG_COUNT> regs{};
  std::vector<uint8_t> snapshot;
  std::vector<ember_python_frame> python;
  uint8_t python_status = EMBER_PYTHON_OK;
  uint32_t pid = static_cast<uint32_t>(getpid());

  // The record's bytes (8-aligned, as the ring buffer keeps them), decoded.
  SampleView Decode() {
    const size_t frames = kernel.size() + user.size();
    const size_t python_at = PythonFramesOffset(frames, snapshot.size());
    const size_t size = python_at + python.size() * sizeof(ember_python_frame);
    storage_.assign((size + 7) / 8, 0);
    auto* bytes = reinterpret_cast<uint8_t*>(storage_.data());
    ember_sample header{};
    header.version = EMBER_RECORD_VERSION;
    header.kind = EMBER_RECORD_SAMPLE;
    header.flags = flags | (python.empty() ? 0 : EMBER_SAMPLE_PYTHON);
    header.pid = pid;
    header.tid = pid;
    header.kernel_depth = static_cast<uint16_t>(kernel.size());
    header.user_depth = static_cast<uint16_t>(user.size());
    header.user_snapshot_bytes = static_cast<uint32_t>(snapshot.size());
    header.python_depth = static_cast<uint16_t>(python.size());
    header.python_status = python_status;
    std::memcpy(header.comm, "test", 5);
    std::memcpy(header.user_regs, regs.data(), sizeof(header.user_regs));
    std::memcpy(bytes, &header, sizeof(header));
    uint8_t* at = bytes + sizeof(header);
    for (uint64_t ip : kernel) at = static_cast<uint8_t*>(std::memcpy(at, &ip, 8)) + 8;
    for (uint64_t ip : user) at = static_cast<uint8_t*>(std::memcpy(at, &ip, 8)) + 8;
    if (!snapshot.empty()) std::memcpy(at, snapshot.data(), snapshot.size());
    if (!python.empty()) {
      std::memcpy(bytes + python_at, python.data(), python.size() * sizeof(ember_python_frame));
    }
    SampleView view;
    EXPECT_EQ(DecodeSample(bytes, size, &view), DecodeResult::kOk);
    return view;
  }

 private:
  std::vector<uint64_t> storage_;
};

// The user stack of the calling thread, as the BPF program copies it: the registers of the frame
// that called Capture (a walk stopped there: its return address, stack pointer and frame
// pointer), and the stack from there up to `max_bytes` (0: to the end of the stack mapping).
struct Snapshot {
  std::array<uint64_t, EMBER_USER_REG_COUNT> regs{};
  std::vector<uint8_t> stack;
  bool clamped = false;
  uint64_t capture_pc = 0;  // an address in Capture: the frame a BPF walk would have named first
};

// The end of the mapping holding `address`, from /proc/self/maps; 0 if none.
uint64_t MappingEnd(uint64_t address) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    uint64_t start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &start, &end) == 2 && address >= start &&
        address < end) {
      return end;
    }
  }
  return 0;
}

volatile int sink;

__attribute__((noinline)) void Capture(Snapshot* out, size_t max_bytes) {
  // The frame address makes the compiler keep a frame pointer here: the caller's stack pointer is
  // 16 bytes above it, its frame pointer is saved at it.
  const auto* frame = static_cast<const uint64_t*>(__builtin_frame_address(0));
  const uint64_t caller_sp = reinterpret_cast<uint64_t>(frame) + 16;
  out->regs[EMBER_USER_REG_SP] = caller_sp;
  out->regs[EMBER_USER_REG_BP] = frame[0];
  out->regs[EMBER_USER_REG_IP] = reinterpret_cast<uint64_t>(__builtin_return_address(0));
  out->capture_pc = reinterpret_cast<uint64_t>(&Capture) + 4;
  const uint64_t end = MappingEnd(caller_sp);
  size_t bytes = end > caller_sp ? end - caller_sp : 0;
  if (max_bytes != 0 && bytes > max_bytes) {
    bytes = max_bytes;
    out->clamped = true;
  }
  // Read as the kernel copies it for the BPF program: through the process's memory, not a
  // memcpy AddressSanitizer would check against the callers' redzones.
  out->stack.resize(bytes);
  const int mem = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  const ssize_t read =
      mem >= 0 ? pread(mem, out->stack.data(), bytes, static_cast<off_t>(caller_sp)) : -1;
  if (mem >= 0) close(mem);
  out->stack.resize(read > 0 ? static_cast<size_t>(read) : 0);
}

// Callers whose frames the snapshot holds; the additions after the calls keep them from being
// tail calls.
constexpr uint32_t kCaptureCallLine = __LINE__ + 2;
__attribute__((noinline)) int SnapshotCallerB(Snapshot* out, size_t max_bytes) {
  Capture(out, max_bytes);
  return sink + 1;
}

__attribute__((noinline)) int SnapshotCallerA(Snapshot* out, size_t max_bytes) {
  const int result = SnapshotCallerB(out, max_bytes);
  return result + sink + 2;
}

__attribute__((noinline)) Snapshot TakeSnapshot(size_t max_bytes = 0) {
  Snapshot snapshot;
  sink = SnapshotCallerA(&snapshot, max_bytes);
  return snapshot;
}

__attribute__((noinline)) int WalkedLeaf() { return sink + 3; }
__attribute__((noinline)) int WalkedMiddle() { return WalkedLeaf() + 4; }
__attribute__((noinline)) int WalkedRoot() { return WalkedMiddle() + 5; }

// Addresses in the Walked* functions, as a frame-pointer or CFI walk gives them: the leaf's own
// pc, then return addresses (one past a call).
std::vector<uint64_t> WalkedPcs() {
  return {reinterpret_cast<uint64_t>(&WalkedLeaf) + 1,
          reinterpret_cast<uint64_t>(&WalkedMiddle) + 2,
          reinterpret_cast<uint64_t>(&WalkedRoot) + 2};
}

std::vector<std::string> Names(const std::vector<const Frame*>& frames) {
  std::vector<std::string> names;
  for (const Frame* frame : frames) names.push_back(frame->function);
  return names;
}

// Where in `frames` the first function containing `name` is; -1 when none.
int IndexOf(const std::vector<const Frame*>& frames, const std::string& name, size_t from = 0) {
  for (size_t i = from; i < frames.size(); ++i) {
    if (frames[i]->function.find(name) != std::string::npos) return static_cast<int>(i);
  }
  return -1;
}

// A runtime that records what it is told and puts one frame of its own in place of the leaf
// user frame of samples of processes it knows.
class FakeRuntime : public Runtime {
 public:
  explicit FakeRuntime(FrameResolver* frames) : frame_(frames->Marker("[fake runtime]")) {}
  void ProcessMapsChanged(const Process& process) override { known.push_back(process.pid); }
  void ProcessExited(uint32_t pid) override { exited.push_back(pid); }
  void Splice(const Process& process, const SampleView&, UserFrames frames) override {
    ++splices;
    begin = frames.begin;
    pcs.assign(frames.pcs.begin(), frames.pcs.end());
    runtime_frames.assign(frames.runtime_frames.begin(), frames.runtime_frames.end());
    if (std::find(known.begin(), known.end(), process.pid) == known.end()) return;
    if (frames.stack.size() > frames.begin) frames.stack[frames.begin] = frame_;
  }
  // Steps `step_pc` to the registers of `step_caller` (EMBER_USER_REG_* order, as DWARF's).
  bool StepCodeOutsideFiles(uint32_t pid, const FrameRegisters& frame, bool, const StackMemory&,
                            StepResult& result, RuntimeFrame& runtime_frame) override {
    if (step_pc == 0 || frame.value[kUnwindRegisterIp] != step_pc) return false;
    result.Reset();
    for (int reg = 0; reg < kUnwindRegisterCount; ++reg) result.caller.Set(reg, step_caller[reg]);
    result.end = StepEnd::kStepped;
    runtime_frame = {.object = pid, .position = 5, .kind = 1};
    return true;
  }
  void NextGeneration() override { ++generations; }
  void SyncMetrics() override { ++syncs; }
  void LogSummary(const BpfStats&) const override {}

  std::vector<uint32_t> known;
  std::vector<uint32_t> exited;
  int splices = 0;
  size_t begin = 0;
  std::vector<uint64_t> pcs;
  std::vector<RuntimeFrame> runtime_frames;
  uint64_t step_pc = 0;
  std::vector<uint64_t> step_caller;
  int generations = 0;
  int syncs = 0;

 private:
  const Frame* frame_;
};

class StackBuilderTest : public ::testing::Test {
 protected:
  Process* Self() {
    Process* process = processes_.Get(static_cast<uint32_t>(getpid()));
    EXPECT_NE(process, nullptr);
    return process;
  }
  // The /metrics line of one ember_user_stacks_unwound_total series.
  std::string UnwoundLine(const std::string& result) {
    const std::string text = metrics_.Render();
    const std::string prefix =
        absl::StrCat("ember_user_stacks_unwound_total{result=\"", result, "\"} ");
    const size_t at = text.find(prefix);
    if (at == std::string::npos) return "missing";
    return text.substr(at, text.find('\n', at) - at);
  }

  ProcessTable processes_;
  ModuleCache modules_;
  FrameResolver frames_{&processes_, &modules_, nullptr};
  DwarfUnwinder unwinder_;
  MetricsRegistry metrics_;
  StackBuilder builder_{&frames_, &processes_, &unwinder_, metrics_};
};

TEST_F(StackBuilderTest, KernelThenUserFramesOfAFramePointerWalk) {
  Record record;
  record.kernel = {0xffffffff81000010, 0xffffffff81000020};
  record.user = WalkedPcs();
  record.flags = EMBER_SAMPLE_USER_REGS;
  const std::vector<const Frame*>& stack = builder_.Build(record.Decode(), Self());
  ASSERT_EQ(stack.size(), 5u) << ::testing::PrintToString(Names(stack));
  EXPECT_EQ(stack[0]->kind, FrameKind::kKernel);
  EXPECT_EQ(stack[0]->address, 0xffffffff81000010u);  // the leaf's own address
  EXPECT_EQ(stack[1]->kind, FrameKind::kKernel);
  EXPECT_EQ(stack[1]->address, 0xffffffff81000020u - 1);  // a return address: the call before it
  EXPECT_EQ(stack[2]->kind, FrameKind::kNative);
  EXPECT_THAT(stack[2]->function, HasSubstr("WalkedLeaf"));
  EXPECT_THAT(stack[3]->function, HasSubstr("WalkedMiddle"));
  EXPECT_THAT(stack[4]->function, HasSubstr("WalkedRoot"));
  // A frame-pointer walk short of the limit is whole as far as it can tell: no marker, and no
  // CFI walk to count.
  EXPECT_EQ(builder_.ends().complete + builder_.ends().truncated + builder_.ends().failed, 0u);
}

TEST_F(StackBuilderTest, KernelStackAtTheLimitIsMarkedTruncatedBeforeTheUserFrames) {
  Record record;
  for (int i = 0; i < EMBER_MAX_STACK_DEPTH; ++i) record.kernel.push_back(0xffffffff81000000 + i);
  record.user = WalkedPcs();
  const std::vector<const Frame*>& stack = builder_.Build(record.Decode(), Self());
  ASSERT_EQ(stack.size(), EMBER_MAX_STACK_DEPTH + 1u + 3u);
  EXPECT_EQ(stack[EMBER_MAX_STACK_DEPTH]->function, "[truncated]");
  EXPECT_EQ(stack[EMBER_MAX_STACK_DEPTH - 1]->kind, FrameKind::kKernel);
  EXPECT_THAT(stack[EMBER_MAX_STACK_DEPTH + 1]->function, HasSubstr("WalkedLeaf"));
  EXPECT_EQ(stack.back()->function.find("[truncated]"), std::string::npos);
}

TEST_F(StackBuilderTest, FramePointerWalkAtTheLimitEndsTruncated) {
  Record record;
  for (int i = 0; i < EMBER_MAX_STACK_DEPTH; ++i) {
    record.user.push_back(WalkedPcs()[i % 3]);
  }
  const std::vector<const Frame*>& stack = builder_.Build(record.Decode(), Self());
  ASSERT_EQ(stack.size(), EMBER_MAX_STACK_DEPTH + 1u);
  EXPECT_EQ(stack.back()->function, "[truncated]");
  EXPECT_THAT(stack[EMBER_MAX_STACK_DEPTH - 1]->function, HasSubstr("Walked"));
}

TEST_F(StackBuilderTest, AWholeBpfWalkIsCountedComplete) {
  Record record;
  record.kernel = {0xffffffff81000010};
  record.user = WalkedPcs();
  record.flags =
      EMBER_SAMPLE_USER_REGS | EMBER_SAMPLE_UNWOUND_IN_BPF | EMBER_SAMPLE_UNWIND_COMPLETE;
  const std::vector<const Frame*>& stack = builder_.Build(record.Decode(), Self());
  ASSERT_EQ(stack.size(), 4u);
  EXPECT_THAT(stack[1]->function, HasSubstr("WalkedLeaf"));
  EXPECT_THAT(stack[3]->function, HasSubstr("WalkedRoot"));
  EXPECT_EQ(builder_.ends().complete, 1u);
  EXPECT_EQ(builder_.ends().failed, 0u);
  EXPECT_EQ(UnwoundLine("complete"), "ember_user_stacks_unwound_total{result=\"complete\"} 1");
  EXPECT_EQ(UnwoundLine("failed"), "ember_user_stacks_unwound_total{result=\"failed\"} 0");
}

// Stopped short with nothing to go on with: the frame it stopped at (a return address, from the
// registers it handed over), then the cut, counted failed.
TEST_F(StackBuilderTest, ABpfWalkStoppedShortWithoutASnapshotEndsTruncated) {
  Record record;
  record.user = {WalkedPcs()[0], WalkedPcs()[1]};
  record.flags = EMBER_SAMPLE_USER_REGS | EMBER_SAMPLE_UNWOUND_IN_BPF | EMBER_SAMPLE_CONTINUE_REGS;
  record.regs[EMBER_USER_REG_IP] = WalkedPcs()[2];
  const std::vector<const Frame*>& stack = builder_.Build(record.Decode(), Self());
  ASSERT_EQ(stack.size(), 4u) << ::testing::PrintToString(Names(stack));
  EXPECT_THAT(stack[0]->function, HasSubstr("WalkedLeaf"));
  EXPECT_THAT(stack[1]->function, HasSubstr("WalkedMiddle"));
  EXPECT_THAT(stack[2]->function, HasSubstr("WalkedRoot"));
  EXPECT_EQ(stack[3]->function, "[truncated]");
  EXPECT_EQ(builder_.ends().failed, 1u);
  EXPECT_EQ(builder_.ends().complete, 0u);
  EXPECT_EQ(UnwoundLine("failed"), "ember_user_stacks_unwound_total{result=\"failed\"} 1");

  // Without the registers flag there is no frame to add: the walk's frames, then the cut.
  Record bare;
  bare.user = {WalkedPcs()[0]};
  bare.flags = EMBER_SAMPLE_UNWOUND_IN_BPF | EMBER_SAMPLE_CONTINUE_REGS;
  const std::vector<const Frame*>& cut = builder_.Build(bare.Decode(), Self());
  ASSERT_EQ(cut.size(), 2u);
  EXPECT_EQ(cut[1]->function, "[truncated]");
  EXPECT_EQ(builder_.ends().failed, 2u);
}

// The whole stack of this thread, copied as the BPF program copies it, unwound with the CFI of
// this test binary (and of libc and ld.so above the test body) down to the thread's first frame.
TEST_F(StackBuilderTest, UnwindsARealSnapshotWithDwarfCfi) {
  Snapshot snapshot = TakeSnapshot();
  ASSERT_GT(snapshot.stack.size(), 256u);
  Record record;
  record.kernel = {0xffffffff81000010};
  record.flags = EMBER_SAMPLE_USER_REGS;
  record.regs = snapshot.regs;
  record.snapshot = snapshot.stack;
  const std::vector<const Frame*>& stack = builder_.Build(record.Decode(), Self());
  const std::vector<std::string> names = Names(stack);
  // The leaf is where Capture returns to in SnapshotCallerB (the registers are the caller's).
  ASSERT_GE(stack.size(), 5u) << ::testing::PrintToString(names);
  EXPECT_EQ(stack[0]->kind, FrameKind::kKernel);
  EXPECT_THAT(stack[1]->function, HasSubstr("SnapshotCallerB"));
  EXPECT_THAT(stack[2]->function, HasSubstr("SnapshotCallerA"));
  EXPECT_THAT(stack[3]->function, HasSubstr("TakeSnapshot"));
  EXPECT_GT(IndexOf(stack, "UnwindsARealSnapshotWithDwarfCfi"), 3)
      << ::testing::PrintToString(names);
  EXPECT_GT(IndexOf(stack, "main"), IndexOf(stack, "UnwindsARealSnapshotWithDwarfCfi"))
      << ::testing::PrintToString(names);
  // The thread's first frame (glibc's _start has no caller in its CFI): nothing is missing.
  EXPECT_EQ(stack.back()->function, "_start") << ::testing::PrintToString(names);
  EXPECT_EQ(builder_.ends().complete, 1u);
  EXPECT_EQ(builder_.ends().truncated + builder_.ends().failed, 0u);
}

// A runtime steps a frame of its code in no file (the leaf here) to the real frame below it; the
// walk goes on from there, and the runtime's splice gets back what it kept of that frame beside
// its pc, and nothing for the other frames.
TEST_F(StackBuilderTest, ARuntimeStepsItsCodeInNoFileAndGetsItsFramesBackInTheSplice) {
  auto owned = std::make_unique<FakeRuntime>(&frames_);
  FakeRuntime* runtime = owned.get();
  builder_.runtimes().Add(std::move(owned));
  Snapshot snapshot = TakeSnapshot();
  constexpr uint64_t kJitPc = 0x1000;  // in no mapping of this process
  runtime->step_pc = kJitPc;
  runtime->step_caller.assign(snapshot.regs.begin(), snapshot.regs.end());
  Record record;
  record.flags = EMBER_SAMPLE_USER_REGS;
  record.regs = snapshot.regs;
  record.regs[EMBER_USER_REG_IP] = kJitPc;
  record.snapshot = snapshot.stack;
  const std::vector<const Frame*>& stack = builder_.Build(record.Decode(), Self());
  const std::vector<std::string> names = Names(stack);
  ASSERT_GE(stack.size(), 5u) << ::testing::PrintToString(names);
  EXPECT_THAT(stack[1]->function, HasSubstr("SnapshotCallerB"));
  EXPECT_EQ(stack.back()->function, "_start") << ::testing::PrintToString(names);
  ASSERT_EQ(runtime->pcs.size(), stack.size());
  ASSERT_EQ(runtime->runtime_frames.size(), stack.size());
  EXPECT_EQ(runtime->pcs[0], kJitPc);
  EXPECT_EQ(runtime->runtime_frames[0],
            (RuntimeFrame{.object = static_cast<uint64_t>(getpid()), .position = 5, .kind = 1}));
  for (size_t i = 1; i < stack.size(); ++i) {
    EXPECT_EQ(runtime->runtime_frames[i], RuntimeFrame{}) << i;
  }
  EXPECT_EQ(builder_.ends().complete, 1u);
}

// The snapshot cut short (clamped): the frames it holds, then "[truncated]", counted truncated.
TEST_F(StackBuilderTest, AClampedSnapshotEndsTruncated) {
  Snapshot snapshot = TakeSnapshot(/*max_bytes=*/512);
  ASSERT_TRUE(snapshot.clamped);
  Record record;
  record.flags = EMBER_SAMPLE_USER_REGS | EMBER_SAMPLE_SNAPSHOT_CLAMPED;
  record.regs = snapshot.regs;
  record.snapshot = snapshot.stack;
  const std::vector<const Frame*>& stack = builder_.Build(record.Decode(), Self());
  const std::vector<std::string> names = Names(stack);
  ASSERT_GE(stack.size(), 3u) << ::testing::PrintToString(names);
  EXPECT_THAT(stack[0]->function, HasSubstr("SnapshotCallerB"));
  EXPECT_EQ(stack.back()->function, "[truncated]") << ::testing::PrintToString(names);
  EXPECT_EQ(IndexOf(stack, "main"), -1) << ::testing::PrintToString(names);
  EXPECT_EQ(builder_.ends().truncated, 1u);
  EXPECT_EQ(builder_.ends().complete + builder_.ends().failed, 0u);
  EXPECT_EQ(UnwoundLine("truncated"), "ember_user_stacks_unwound_total{result=\"truncated\"} 1");
}

// The BPF walk named the leaf and stopped; the agent goes on from the registers it handed over
// (sp, ip as a return address, bp) through the snapshot taken from there.
TEST_F(StackBuilderTest, ContinuesAShortBpfWalkThroughTheSnapshot) {
  Snapshot snapshot = TakeSnapshot();
  Record record;
  record.user = {snapshot.capture_pc};
  record.flags = EMBER_SAMPLE_USER_REGS | EMBER_SAMPLE_UNWOUND_IN_BPF | EMBER_SAMPLE_CONTINUE_REGS;
  // Only sp, ip and bp are handed over: the others must not be used.
  for (uint64_t& reg : record.regs) reg = 0xdeadbeefdeadbeef;
  record.regs[EMBER_USER_REG_SP] = snapshot.regs[EMBER_USER_REG_SP];
  record.regs[EMBER_USER_REG_IP] = snapshot.regs[EMBER_USER_REG_IP];
  record.regs[EMBER_USER_REG_BP] = snapshot.regs[EMBER_USER_REG_BP];
  record.snapshot = snapshot.stack;
  const std::vector<const Frame*>& stack = builder_.Build(record.Decode(), Self());
  const std::vector<std::string> names = Names(stack);
  ASSERT_GE(stack.size(), 5u) << ::testing::PrintToString(names);
  EXPECT_THAT(stack[0]->function, HasSubstr("Capture"));          // walked in BPF
  EXPECT_THAT(stack[1]->function, HasSubstr("SnapshotCallerB"));  // the agent's from here
  // Named as a return address: the line of the call, not the line after it.
  EXPECT_EQ(stack[1]->line, kCaptureCallLine);
  EXPECT_THAT(stack[2]->function, HasSubstr("SnapshotCallerA"));
  EXPECT_THAT(stack[3]->function, HasSubstr("TakeSnapshot"));
  EXPECT_GT(IndexOf(stack, "main"), 3) << ::testing::PrintToString(names);
  EXPECT_NE(stack.back()->function, "[truncated]");
  EXPECT_EQ(builder_.ends().complete, 1u);
}

// The BPF walk's row maps, entries by pid; the rows themselves are never built here.
class FakeUnwindMaps : public UnwindMaps {
 public:
  absl::Status WriteRows(uint32_t, std::span<const ember_unwind_row>) override {
    return absl::OkStatus();
  }
  absl::Status WriteBuckets(uint32_t, std::span<const uint32_t>) override {
    return absl::OkStatus();
  }
  absl::Status SetProcess(uint32_t, const ember_unwind_proc&) override { return absl::OkStatus(); }
  void RemoveProcess(uint32_t) override {}
};

// Samples whose BPF walk fell short (or that were walked by frame pointers only) count towards
// building the tables of the files their frames run through; whole walks count for none.
TEST_F(StackBuilderTest, ShortWalksCountTowardsBuildingTheirFilesTables) {
  FakeUnwindMaps maps;
  BpfUnwindTables tables(
      maps, 1024,
      [](const ExecutableMapping&) -> absl::StatusOr<FileUnwindTable> {
        return absl::UnavailableError("not built here");
      },
      1.0, [](uint32_t) { return true; },
      TableBuildThreshold{.min_short_walks = 1, .code_bytes_per_short_walk = 0});
  builder_.set_bpf_unwind_tables(&tables);
  Process* self = Self();
  tables.SetProcess(self->pid, UnwindMappingsOf(processes_, *self));
  ASSERT_EQ(tables.stats().files_queued, 0u);

  Record whole;
  whole.user = WalkedPcs();
  whole.flags = EMBER_SAMPLE_UNWOUND_IN_BPF | EMBER_SAMPLE_UNWIND_COMPLETE;
  builder_.Build(whole.Decode(), self);
  EXPECT_EQ(tables.stats().files_queued, 0u);

  Record short_walk;
  short_walk.user = WalkedPcs();  // every frame in this test's own file
  builder_.Build(short_walk.Decode(), self);
  EXPECT_EQ(tables.stats().files_queued, 1u);
}

TEST_F(StackBuilderTest, AProcessThatExitedBeforeItsFirstReadGetsAMarker) {
  Record record;
  record.kernel = {0xffffffff81000010, 0xffffffff81000020};
  record.user = WalkedPcs();
  const std::vector<const Frame*>& stack = builder_.Build(record.Decode(), nullptr);
  ASSERT_EQ(stack.size(), 3u) << ::testing::PrintToString(Names(stack));
  EXPECT_EQ(stack[0]->kind, FrameKind::kKernel);
  EXPECT_EQ(stack[1]->kind, FrameKind::kKernel);
  EXPECT_EQ(stack[2]->function, "[process exited]");

  // Registers alone (a snapshot that failed) say it ran in user space too.
  Record regs_only;
  regs_only.flags = EMBER_SAMPLE_USER_REGS;
  const std::vector<const Frame*>& marked = builder_.Build(regs_only.Decode(), nullptr);
  ASSERT_EQ(marked.size(), 1u);
  EXPECT_EQ(marked[0]->function, "[process exited]");

  // A kernel thread has no user part to miss: its kernel frames only.
  Record kernel_thread;
  kernel_thread.kernel = {0xffffffff81000010};
  const std::vector<const Frame*>& kernel = builder_.Build(kernel_thread.Decode(), nullptr);
  ASSERT_EQ(kernel.size(), 1u);
  EXPECT_EQ(kernel[0]->kind, FrameKind::kKernel);
  EXPECT_EQ(builder_.ends().complete + builder_.ends().truncated + builder_.ends().failed, 0u);
}

// The stack is rebuilt from scratch for each sample: nothing of the last one is left.
TEST_F(StackBuilderTest, EachSampleStartsAfresh) {
  Record deep;
  deep.kernel = {1, 2, 3, 4};
  deep.user = WalkedPcs();
  EXPECT_EQ(builder_.Build(deep.Decode(), Self()).size(), 7u);
  Record shallow;
  shallow.user = {WalkedPcs()[0]};
  const std::vector<const Frame*>& stack = builder_.Build(shallow.Decode(), Self());
  ASSERT_EQ(stack.size(), 1u);
  EXPECT_THAT(stack[0]->function, HasSubstr("WalkedLeaf"));
}

TEST_F(StackBuilderTest, RuntimesSpliceTheUserFramesOfProcessesTheyKnow) {
  auto owned = std::make_unique<FakeRuntime>(&frames_);
  FakeRuntime* runtime = owned.get();
  builder_.runtimes().Add(std::move(owned));
  Process* self = Self();

  Record record;
  record.kernel = {0xffffffff81000010};
  record.user = WalkedPcs();
  // Not known to the runtime yet: asked, nothing changes.
  std::vector<const Frame*> stack = builder_.Build(record.Decode(), self);
  EXPECT_EQ(runtime->splices, 1);
  EXPECT_EQ(runtime->begin, 1u);  // after the kernel frame
  EXPECT_EQ(runtime->pcs, WalkedPcs());
  EXPECT_THAT(stack[1]->function, HasSubstr("WalkedLeaf"));

  builder_.runtimes().OnMapsChanged(*self);
  EXPECT_EQ(runtime->known, std::vector<uint32_t>{self->pid});
  stack = builder_.Build(record.Decode(), self);
  ASSERT_EQ(stack.size(), 4u);
  EXPECT_EQ(stack[0]->kind, FrameKind::kKernel);
  EXPECT_EQ(stack[1]->function, "[fake runtime]");
  EXPECT_THAT(stack[2]->function, HasSubstr("WalkedMiddle"));

  // A truncated user stack hands its marker over with pc 0.
  Record cut;
  cut.user = {WalkedPcs()[0]};
  cut.flags = EMBER_SAMPLE_UNWOUND_IN_BPF;
  builder_.Build(cut.Decode(), self);
  EXPECT_EQ(runtime->pcs, (std::vector<uint64_t>{WalkedPcs()[0], 0}));
  EXPECT_EQ(runtime->begin, 0u);

  // A process gone before its first read has no user frames to splice into.
  builder_.Build(record.Decode(), nullptr);
  EXPECT_EQ(runtime->splices, 3);

  builder_.runtimes().OnExited(77);
  builder_.runtimes().NextGeneration();
  builder_.runtimes().SyncMetrics();
  EXPECT_EQ(runtime->exited, std::vector<uint32_t>{77});
  EXPECT_EQ(runtime->generations, 1);
  EXPECT_EQ(runtime->syncs, 1);
}

// CPython through its real splice: a live python3.11 (tests/data/python/walk_target.py), detected
// from its maps, its main thread's frames walked as the BPF program records them, spliced into a
// native stack in place of its _PyEval_EvalFrameDefault frame and named from its memory.
namespace fs = std::filesystem;

class StoppedPython {
 public:
  StoppedPython()
      : python_(
            {EMBER_PYTHON311, "-u", std::string(EMBER_PYTHON_SCRIPTS_DIR) + "/walk_target.py"}) {
    if (!python_.WaitForOutput("\n", std::chrono::seconds(20))) return;
    std::istringstream words(python_.output());
    std::string ready;
    words >> ready >> main_ident_;
    if (ready != "ready") return;
    usleep(200 * 1000);  // into the spin loops
    kill(python_.pid(), SIGSTOP);
    int status = 0;
    stopped_ = waitpid(python_.pid(), &status, WUNTRACED) == python_.pid() && WIFSTOPPED(status);
  }
  bool stopped() const { return stopped_; }
  uint32_t pid() const { return static_cast<uint32_t>(python_.pid()); }
  uint64_t main_ident_ = 0;

 private:
  ember::testing::Subprocess python_;  // killed when the test ends
  bool stopped_ = false;
};

class RecordingBpfConfig : public RuntimeBpfConfig {
 public:
  absl::Status SetPythonProcess(uint32_t pid, const ember_python_proc& config) override {
    set.push_back(pid);
    runtime_address = config.runtime_address;
    return absl::OkStatus();
  }
  void RemovePythonProcess(uint32_t pid) override { removed.push_back(pid); }
  std::vector<uint32_t> set;
  std::vector<uint32_t> removed;
  uint64_t runtime_address = 0;
};

// A process without an interpreter (this test) gets no BPF entry, and Python frames in its
// samples (which the BPF program would not record) are not spliced.
TEST_F(StackBuilderTest, CPythonLeavesOtherProcessesNative) {
  RecordingBpfConfig bpf;
  auto owned = std::make_unique<python::CPythonRuntime>(bpf, metrics_);
  python::CPythonRuntime* runtime = owned.get();
  builder_.runtimes().Add(std::move(owned));
  Process* self = Self();
  builder_.runtimes().OnMapsChanged(*self);
  EXPECT_TRUE(bpf.set.empty());
  const python::PythonProcess* detected = runtime->namer().Find(self->pid);
  ASSERT_NE(detected, nullptr);
  EXPECT_FALSE(detected->bpf.has_value());

  Record record;
  record.user = WalkedPcs();
  record.python = {
      {.code = 0x1000, .position = 0x2000, .flags = EMBER_PYTHON_FRAME_ENTRY, .reserved = 0}};
  const std::vector<const Frame*>& stack = builder_.Build(record.Decode(), self);
  ASSERT_EQ(stack.size(), 3u) << ::testing::PrintToString(Names(stack));
  for (const Frame* frame : stack) EXPECT_EQ(frame->kind, FrameKind::kNative);
  EXPECT_EQ(runtime->namer().stats().named + runtime->namer().stats().unreadable, 0u);
}

TEST_F(StackBuilderTest, SplicesTheFramesOfALivePython) {
  ASSERT_TRUE(fs::exists(EMBER_PYTHON311)) << "apt-get install python3.11";
  StoppedPython python;
  ASSERT_TRUE(python.stopped());
  RecordingBpfConfig bpf;
  auto owned = std::make_unique<python::CPythonRuntime>(bpf, metrics_);
  python::CPythonRuntime* runtime = owned.get();
  builder_.runtimes().Add(std::move(owned));

  Process* process = processes_.Get(python.pid());
  ASSERT_NE(process, nullptr);
  builder_.runtimes().OnMapsChanged(*process);
  ASSERT_EQ(bpf.set, std::vector<uint32_t>{python.pid()});
  const python::PythonProcess* detected = runtime->namer().Find(python.pid());
  ASSERT_NE(detected, nullptr);
  ASSERT_TRUE(detected->bpf.has_value());
  EXPECT_EQ(bpf.runtime_address, detected->bpf->runtime_address);

  // The main thread's frames as the BPF walk records them, and their names as the walker reads
  // them.
  ProcessMemoryReader memory(static_cast<pid_t>(python.pid()));
  const python::WalkerConfig& config = detected->process.config;
  uint64_t tstate = 0;
  ASSERT_EQ(python::FindThreadState(memory, config, {.pthread_id = python.main_ident_}, &tstate),
            python::WalkStatus::kOk);
  std::vector<python::RawFrame> raw;
  ASSERT_EQ(python::WalkRawFrames(memory, config, tstate, &raw), python::WalkStatus::kOk);
  std::vector<python::PythonFrame> expected;
  ASSERT_EQ(python::WalkFrames(memory, config, tstate, &expected), python::WalkStatus::kOk);
  ASSERT_EQ(raw.size(), expected.size());
  ASSERT_GE(raw.size(), 5u);

  Record record;
  record.pid = python.pid();
  record.kernel = {0xffffffff81000010};
  // Native: a leaf outside the eval loop, one eval frame per entry frame's group (3.11 runs a
  // whole Python call chain in one), then the root.
  const uint64_t eval = detected->process.eval_frame_start + 16;
  size_t groups = 0;
  for (const python::RawFrame& frame : raw) groups += frame.entry ? 1 : 0;
  ASSERT_GE(groups, 1u);
  record.user.push_back(detected->process.eval_frame_end + 1);
  for (size_t i = 0; i < groups; ++i) record.user.push_back(eval);
  record.user.push_back(detected->process.eval_frame_start - 1);
  for (const python::RawFrame& frame : raw) {
    record.python.push_back({.code = frame.code_address,
                             .position = frame.last_instruction,
                             .flags = frame.entry ? EMBER_PYTHON_FRAME_ENTRY : 0u,
                             .reserved = 0});
  }
  const std::vector<const Frame*>& stack = builder_.Build(record.Decode(), process);
  const std::vector<std::string> names = Names(stack);
  // Kernel, the native leaf, every Python frame in the walk's order, the native root.
  ASSERT_EQ(stack.size(), 1 + 1 + raw.size() + 1) << ::testing::PrintToString(names);
  EXPECT_EQ(stack[0]->kind, FrameKind::kKernel);
  EXPECT_EQ(stack[1]->kind, FrameKind::kNative);
  for (size_t i = 0; i < raw.size(); ++i) {
    EXPECT_EQ(stack[2 + i]->kind, FrameKind::kCPython) << i;
    EXPECT_EQ(stack[2 + i]->function, expected[i].qualname) << i;
    EXPECT_EQ(static_cast<int>(stack[2 + i]->line), expected[i].line) << i;
  }
  EXPECT_NE(IndexOf(stack, "Outer.run"), -1) << ::testing::PrintToString(names);
  EXPECT_EQ(stack.back()->kind, FrameKind::kNative);
  EXPECT_EQ(runtime->splice_stats().eval_frames_left_native, 0u);
  EXPECT_EQ(runtime->splice_stats().python_groups_unplaced, 0u);

  // The names reach /metrics once synced.
  runtime->SyncMetrics();
  EXPECT_THAT(metrics_.Render(),
              HasSubstr(absl::StrCat("ember_python_frame_names_total{result=\"named\"} ",
                                     runtime->namer().stats().named)));
  EXPECT_EQ(runtime->namer().stats().named, raw.size());

  // Gone: its BPF entry and its detection go; its samples stay native.
  builder_.runtimes().OnExited(python.pid());
  EXPECT_EQ(bpf.removed, std::vector<uint32_t>{python.pid()});
  EXPECT_EQ(runtime->namer().Find(python.pid()), nullptr);
  const std::vector<const Frame*>& native = builder_.Build(record.Decode(), process);
  ASSERT_EQ(native.size(), 1 + record.user.size());
  for (size_t i = 1; i < native.size(); ++i) EXPECT_EQ(native[i]->kind, FrameKind::kNative) << i;
}

}  // namespace
}  // namespace ember
