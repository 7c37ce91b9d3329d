// DwarfUnwinder on stacks this test process captures from itself: built by GCC -O2 without frame
// pointers, so only CFI gets through, and checked against glibc backtrace() (libgcc's unwinder).
#include "unwind/dwarf_unwinder.h"

#include <dlfcn.h>
#include <elf.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <ostream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "process/proc_maps.h"

// Keeps the chain's frames real: no inlining, no cloning, no assumptions across calls.
#if defined(__clang__)
#define EMBER_FRAME [[gnu::noinline]]
#else
#define EMBER_FRAME [[gnu::noinline, gnu::noipa]]
#endif

namespace ember {

// Failure messages name the end instead of printing its bytes.
inline void PrintTo(UnwindEnd end, std::ostream* out) {
  switch (end) {
    case UnwindEnd::kOutermost:
      *out << "kOutermost";
      return;
    case UnwindEnd::kTruncated:
      *out << "kTruncated";
      return;
    case UnwindEnd::kError:
      *out << "kError";
      return;
  }
  *out << "UnwindEnd(" << static_cast<int>(end) << ")";
}

namespace unwind_test {

// One thread's stack as a sample would carry it, plus what libgcc's unwinder made of it.
struct Capture {
  std::array<uint64_t, kUnwindRegisterCount> registers{};
  std::vector<uint8_t> stack;  // from registers[kUnwindRegisterSp] upwards
  bool clamped = false;
  std::vector<uint64_t> backtrace;  // glibc backtrace(), taken right after the registers
  uint64_t chain_a_local = 0;       // the address of a local in ChainA's frame
  int calls = 0;
};

constexpr size_t kMaxSnapshotBytes = 256 * 1024;

// Copies the stack as the BPF program does: every byte from the stack pointer up, the parts
// AddressSanitizer poisons between locals included (so that the sanitizer build may run this).
__attribute__((no_sanitize("address"))) void CopyStack(const uint8_t* from, size_t bytes,
                                                       uint8_t* to) {
  for (size_t i = 0; i < bytes; ++i) to[i] = from[i];
}

// The extern functions below have external linkage (and the binary exports them) so dladdr can
// name the function a return address lies in.

EMBER_FRAME void CaptureHere(Capture* capture) {
  ucontext_t context;
  std::memset(&context, 0, sizeof(context));
  if (getcontext(&context) != 0) std::abort();
  // getcontext returns with the registers of this very point (rip just after the call).
  static constexpr int kDwarfToGreg[kUnwindRegisterCount] = {
      REG_RAX, REG_RDX, REG_RCX, REG_RBX, REG_RSI, REG_RDI, REG_RBP, REG_RSP, REG_R8,
      REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15, REG_RIP};
  for (int i = 0; i < kUnwindRegisterCount; ++i) {
    capture->registers[i] = static_cast<uint64_t>(context.uc_mcontext.gregs[kDwarfToGreg[i]]);
  }
  const uint64_t sp = capture->registers[kUnwindRegisterSp];

  pthread_attr_t attr;
  void* stack_low = nullptr;
  size_t stack_size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) std::abort();
  pthread_attr_getstack(&attr, &stack_low, &stack_size);
  pthread_attr_destroy(&attr);
  const uint64_t stack_end = reinterpret_cast<uint64_t>(stack_low) + stack_size;
  if (sp >= stack_end) std::abort();
  const size_t bytes = std::min<uint64_t>(stack_end - sp, kMaxSnapshotBytes);
  capture->clamped = bytes < stack_end - sp;
  capture->stack.resize(bytes);
  CopyStack(reinterpret_cast<const uint8_t*>(sp), bytes, capture->stack.data());

  void* frames[256];
  int depth = backtrace(frames, 256);
  capture->backtrace.clear();
  for (int i = 0; i < depth; ++i) {
    // In a sanitizer build backtrace() is intercepted: its own frame is not the caller's.
    Dl_info info;
    if (capture->backtrace.empty() && dladdr(frames[i], &info) != 0 && info.dli_fname != nullptr &&
        std::strstr(info.dli_fname, "san.so") != nullptr) {
      continue;
    }
    capture->backtrace.push_back(reinterpret_cast<uint64_t>(frames[i]));
  }
}

// Work after each call keeps the calls from becoming tail calls.
EMBER_FRAME int ChainC(Capture* capture) {
  CaptureHere(capture);
  return ++capture->calls;
}

EMBER_FRAME int ChainB(Capture* capture) {
  int calls = ChainC(capture);
  capture->calls += 10;
  return calls + 1;
}

EMBER_FRAME int ChainA(Capture* capture) {
  volatile int marker = 1;  // lives in this frame, above ChainB's return address
  capture->chain_a_local = reinterpret_cast<uint64_t>(&marker);
  int calls = ChainB(capture);
  capture->calls += marker;
  return calls + 1;
}

// qsort's comparator captures: libc's frames (built without frame pointers) lie between.
Capture* g_sort_capture = nullptr;

EMBER_FRAME int CompareAndCapture(const void* a, const void* b) {
  if (g_sort_capture != nullptr) {
    CaptureHere(g_sort_capture);
    g_sort_capture = nullptr;
  }
  int x = *static_cast<const int*>(a), y = *static_cast<const int*>(b);
  return (x > y) - (x < y);
}

EMBER_FRAME int SortAndCapture(Capture* capture) {
  int values[] = {5, 3, 9, 1, 7, 2, 8, 6, 4};
  g_sort_capture = capture;
  qsort(values, sizeof(values) / sizeof(values[0]), sizeof(values[0]), CompareAndCapture);
  capture->calls += values[0];
  return values[0];
}

// A signal handler that captures: the stack then holds the kernel's signal frame, which only the
// CFI of libc's __restore_rt (a signal-frame FDE) explains.
Capture* g_signal_capture = nullptr;

EMBER_FRAME void CaptureInHandler(int) {
  if (g_signal_capture == nullptr) return;
  CaptureHere(g_signal_capture);
  ++g_signal_capture->calls;  // not a tail call: this frame stays
}

EMBER_FRAME int RaiseAndCapture(Capture* capture) {
  struct sigaction action {};
  struct sigaction old {};
  action.sa_handler = CaptureInHandler;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGUSR1, &action, &old) != 0) std::abort();
  g_signal_capture = capture;
  raise(SIGUSR1);
  g_signal_capture = nullptr;
  sigaction(SIGUSR1, &old, nullptr);
  return ++capture->calls;
}

// A thread's first frame is libc's clone3/start_thread, not _start.
EMBER_FRAME void* CaptureInThread(void* capture) {
  ChainA(static_cast<Capture*>(capture));
  return capture;
}

namespace {

std::vector<MemoryMapping> OwnMaps() {
  std::ifstream in("/proc/self/maps");
  std::stringstream text;
  text << in.rdbuf();
  auto maps = ParseProcMaps(text.str());
  if (!maps.ok()) std::abort();
  return *std::move(maps);
}

// What the agent hands the unwinder, for this process, with files opened by their own path.
std::vector<ExecutableMapping> OwnExecutableMappings() {
  std::vector<ExecutableMapping> mappings;
  for (const MemoryMapping& m : OwnMaps()) {
    if (!m.executable) continue;
    mappings.push_back(
        {{.start = m.start, .end = m.end, .offset = m.offset, .file = m.file, .path = m.path},
         m.IsFileBacked() ? m.path : ""});
  }
  return mappings;
}

UserStack StackOf(const Capture& capture, size_t bytes, bool clamped) {
  return {.registers = capture.registers,
          .stack = std::span<const uint8_t>(capture.stack).first(bytes),
          .clamped = clamped};
}

UserStack WholeStackOf(const Capture& capture) {
  return StackOf(capture, capture.stack.size(), capture.clamped);
}

UnwindResult UnwindOwn(DwarfUnwinder& unwinder, const UserStack& stack) {
  return unwinder.Unwind(getpid(), 1, OwnExecutableMappings, stack);
}

std::vector<uint64_t> Pcs(const UnwindResult& result) {
  std::vector<uint64_t> pcs;
  for (const UnwoundFrame& frame : result.frames) pcs.push_back(frame.pc);
  return pcs;
}

std::string Describe(uint64_t pc) {
  Dl_info info;
  std::ostringstream out;
  out << "0x" << std::hex << pc;
  if (dladdr(reinterpret_cast<void*>(pc), &info) != 0) {
    out << " " << (info.dli_sname != nullptr ? info.dli_sname : "?") << " in "
        << (info.dli_fname != nullptr ? info.dli_fname : "?");
  }
  return out.str();
}

std::string Describe(const std::vector<uint64_t>& pcs) {
  std::string text;
  for (uint64_t pc : pcs) text += "\n  " + Describe(pc);
  return text;
}

// From our first return address on, libgcc's unwinder (glibc backtrace()) found the same frames.
void ExpectCallersMatch(const std::vector<uint64_t>& ours, const std::vector<uint64_t>& theirs) {
  ASSERT_GE(ours.size(), 2u);
  auto common = std::find(theirs.begin(), theirs.end(), ours[1]);
  ASSERT_NE(common, theirs.end());
  EXPECT_EQ(std::vector<uint64_t>(ours.begin() + 1, ours.end()),
            std::vector<uint64_t>(common, theirs.end()));
}

// The function (by its exported symbol) that holds `pc`.
uint64_t FunctionOf(uint64_t pc) {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(pc), &info) == 0 || info.dli_saddr == nullptr) return 0;
  return reinterpret_cast<uint64_t>(info.dli_saddr);
}

template <typename F>
uint64_t AddressOf(F* function) {
  return reinterpret_cast<uint64_t>(function);
}

bool IsPrefix(const std::vector<uint64_t>& prefix, const std::vector<uint64_t>& whole) {
  return prefix.size() <= whole.size() && std::equal(prefix.begin(), prefix.end(), whole.begin());
}

// The executable mapping that holds `addr`.
MemoryMapping MappingOf(uint64_t addr) {
  for (const MemoryMapping& m : OwnMaps()) {
    if (m.start <= addr && addr < m.end) return m;
  }
  return {};
}

class DwarfUnwinderSelfTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    chain_ = new Capture;
    if (ChainA(chain_) <= 0) std::abort();  // not a tail call: this frame stays on the stack
  }
  static void TearDownTestSuite() {
    delete chain_;
    chain_ = nullptr;
  }
  static Capture* chain_;
};
Capture* DwarfUnwinderSelfTest::chain_ = nullptr;

TEST_F(DwarfUnwinderSelfTest, MatchesLibgccFrameForFrameUpToTheFirstFrameOfTheThread) {
  DwarfUnwinder unwinder;
  UnwindResult result = UnwindOwn(unwinder, WholeStackOf(*chain_));
  std::vector<uint64_t> ours = Pcs(result);
  const std::vector<uint64_t>& theirs = chain_->backtrace;
  SCOPED_TRACE("ours:" + Describe(ours) + "\nbacktrace():" + Describe(theirs));

  EXPECT_EQ(result.end, UnwindEnd::kOutermost);
  ASSERT_GE(ours.size(), 5u);
  // Both start in CaptureHere (at different calls), then agree on every return address.
  EXPECT_EQ(FunctionOf(ours[0]), AddressOf(CaptureHere));
  EXPECT_EQ(FunctionOf(theirs[0]), AddressOf(CaptureHere));
  ExpectCallersMatch(ours, theirs);

  EXPECT_FALSE(result.frames[0].is_return_address);
  for (size_t i = 1; i < result.frames.size(); ++i) {
    EXPECT_TRUE(result.frames[i].is_return_address) << i;
  }
}

TEST_F(DwarfUnwinderSelfTest, ReturnAddressesLieInTheChainFunctionsInOrder) {
  DwarfUnwinder unwinder;
  std::vector<uint64_t> ours = Pcs(UnwindOwn(unwinder, WholeStackOf(*chain_)));
  SCOPED_TRACE("ours:" + Describe(ours));
  ASSERT_GE(ours.size(), 4u);
  EXPECT_EQ(FunctionOf(ours[0]), AddressOf(CaptureHere));
  EXPECT_EQ(FunctionOf(ours[1]), AddressOf(ChainC));
  EXPECT_EQ(FunctionOf(ours[2]), AddressOf(ChainB));
  EXPECT_EQ(FunctionOf(ours[3]), AddressOf(ChainA));
  // A return address is past the call, so strictly inside its function.
  EXPECT_GT(ours[1], AddressOf(ChainC));
  EXPECT_GT(ours[3], AddressOf(ChainA));
}

TEST_F(DwarfUnwinderSelfTest, ReachesMainThroughLibcWithoutFramePointers) {
  Capture capture;
  SortAndCapture(&capture);
  ASSERT_FALSE(capture.stack.empty());
  DwarfUnwinder unwinder;
  UnwindResult result = UnwindOwn(unwinder, WholeStackOf(capture));
  std::vector<uint64_t> ours = Pcs(result);
  SCOPED_TRACE("ours:" + Describe(ours) + "\nbacktrace():" + Describe(capture.backtrace));

  EXPECT_EQ(result.end, UnwindEnd::kOutermost);
  ASSERT_GE(ours.size(), 4u);
  EXPECT_EQ(FunctionOf(ours[1]), AddressOf(CompareAndCapture));
  auto caller = std::find_if(ours.begin(), ours.end(), [](uint64_t pc) {
    return FunctionOf(pc) == AddressOf(SortAndCapture);
  });
  ASSERT_NE(caller, ours.end());
  // Everything between the comparator and qsort's caller is libc.
  MemoryMapping libc = MappingOf(reinterpret_cast<uint64_t>(dlsym(RTLD_DEFAULT, "qsort")));
  ASSERT_TRUE(libc.executable) << libc.path;
  ASSERT_GT(caller - ours.begin(), 2);
  for (auto pc = ours.begin() + 2; pc != caller; ++pc) {
    EXPECT_TRUE(libc.start <= *pc && *pc < libc.end) << Describe(*pc) << " is not in " << libc.path;
  }
  auto main_frame = std::find_if(caller, ours.end(), [](uint64_t pc) {
    return FunctionOf(pc) == reinterpret_cast<uint64_t>(dlsym(RTLD_DEFAULT, "main"));
  });
  EXPECT_NE(main_frame, ours.end());
  // And the same frames as libgcc's unwinder from the comparator on.
  ExpectCallersMatch(ours, capture.backtrace);
}

TEST_F(DwarfUnwinderSelfTest, ClampedSnapshotEndsTruncatedWithAPrefixOfTheWholeStack) {
  DwarfUnwinder unwinder;
  std::vector<uint64_t> whole = Pcs(UnwindOwn(unwinder, WholeStackOf(*chain_)));
  // Up to ChainA's local: holds the return addresses into ChainC, ChainB and ChainA.
  const size_t bytes = chain_->chain_a_local - chain_->registers[kUnwindRegisterSp];
  ASSERT_LT(bytes, chain_->stack.size());
  UnwindResult result = UnwindOwn(unwinder, StackOf(*chain_, bytes, /*clamped=*/true));
  std::vector<uint64_t> part = Pcs(result);
  SCOPED_TRACE("part:" + Describe(part) + "\nwhole:" + Describe(whole));
  EXPECT_EQ(result.end, UnwindEnd::kTruncated);
  EXPECT_GE(part.size(), 4u);
  EXPECT_LT(part.size(), whole.size());
  EXPECT_TRUE(IsPrefix(part, whole));
}

// Every cut of the snapshot, aligned or not: a prefix of the whole unwind, never an error. A
// clamped snapshot that lost frames says so; a whole (unclamped) short stack ends there.
TEST_F(DwarfUnwinderSelfTest, EveryCutOfTheSnapshotGivesAPrefixAndNoError) {
  DwarfUnwinder unwinder;
  std::vector<uint64_t> whole = Pcs(UnwindOwn(unwinder, WholeStackOf(*chain_)));
  const size_t size = chain_->stack.size();
  size_t longest_cut_with_lost_frames = 0;
  for (size_t bytes = 0; bytes < size; ++bytes) {
    for (bool clamped : {true, false}) {
      UnwindResult result = UnwindOwn(unwinder, StackOf(*chain_, bytes, clamped));
      std::vector<uint64_t> part = Pcs(result);
      ASSERT_TRUE(IsPrefix(part, whole)) << bytes << " bytes:" << Describe(part);
      ASSERT_NE(result.end, UnwindEnd::kError) << bytes << " bytes, clamped " << clamped;
      if (clamped && part.size() < whole.size()) {
        ASSERT_EQ(result.end, UnwindEnd::kTruncated) << bytes << " bytes";
        longest_cut_with_lost_frames = bytes;
      }
    }
  }
  // The sweep did cut frames off.
  EXPECT_GT(longest_cut_with_lost_frames, 0u);
}

TEST_F(DwarfUnwinderSelfTest, FrameLimitTruncates) {
  DwarfUnwinder whole_unwinder;
  std::vector<uint64_t> whole = Pcs(UnwindOwn(whole_unwinder, WholeStackOf(*chain_)));
  ASSERT_GT(whole.size(), 3u);
  DwarfUnwinder unwinder(DwarfUnwinder::Limits{.max_frames = 3});
  UnwindResult result = UnwindOwn(unwinder, WholeStackOf(*chain_));
  EXPECT_EQ(result.end, UnwindEnd::kTruncated);
  EXPECT_EQ(Pcs(result), std::vector<uint64_t>(whole.begin(), whole.begin() + 3));
}

// Garbage in: no crash, the leaf frame, and no more frames than the limit.
TEST_F(DwarfUnwinderSelfTest, SurvivesGarbageRegistersAndStacks) {
  constexpr size_t kMaxFrames = 24;
  DwarfUnwinder unwinder(DwarfUnwinder::Limits{.max_frames = kMaxFrames});
  std::vector<ExecutableMapping> mappings = OwnExecutableMappings();
  std::mt19937_64 random(20261122);
  auto random_code_address = [&] {
    const ExecutableMapping& m = mappings[random() % mappings.size()];
    return m.start + random() % (m.end - m.start);
  };
  for (int round = 0; round < 3000; ++round) {
    Capture garbage = *chain_;
    const int kind = round % 3;
    if (kind == 0) {  // everything random
      for (uint64_t& reg : garbage.registers) reg = random();
      garbage.stack.resize(random() % 4096);
      for (uint8_t& byte : garbage.stack) byte = static_cast<uint8_t>(random());
    } else if (kind == 1) {  // real registers; random words, many of them code addresses
      garbage.stack.resize(8 * (random() % 1024));
      for (size_t i = 0; i < garbage.stack.size(); i += 8) {
        uint64_t word = random() % 2 ? random_code_address() : random();
        std::memcpy(&garbage.stack[i], &word, 8);
      }
    } else {  // the real stack with some words overwritten and a random pc
      garbage.registers[kUnwindRegisterIp] = random_code_address();
      for (int i = 0; i < 32; ++i) {
        size_t at = (random() % (garbage.stack.size() / 8)) * 8;
        uint64_t word = random() % 2 ? random_code_address() : random();
        std::memcpy(&garbage.stack[at], &word, 8);
      }
    }
    UnwindResult result = UnwindOwn(unwinder, StackOf(garbage, garbage.stack.size(), round % 2));
    ASSERT_FALSE(result.frames.empty()) << round;
    ASSERT_LE(result.frames.size(), kMaxFrames) << round;
    ASSERT_EQ(result.frames[0].pc, garbage.registers[kUnwindRegisterIp]) << round;
  }
}

TEST_F(DwarfUnwinderSelfTest, PcOutsideEveryMappingIsStillTheLeaf) {
  DwarfUnwinder unwinder;
  Capture capture = *chain_;
  capture.registers[kUnwindRegisterIp] = 0x1000;
  UnwindResult result = UnwindOwn(unwinder, WholeStackOf(capture));
  ASSERT_FALSE(result.frames.empty());
  EXPECT_EQ(result.frames[0].pc, 0x1000u);
  EXPECT_LE(result.frames.size(), DwarfUnwinder::Limits{}.max_frames);
}

// Steps one pc of code in no file to the registers of a real frame, as a runtime that knows its
// code's frames (HotSpot's) does; every other pc is not its own.
class OnePcStepper : public RuntimeStepper {
 public:
  OnePcStepper(uint64_t pc, std::span<const uint64_t> caller, bool steps)
      : pc_(pc), caller_(caller), steps_(steps) {}
  bool Step(uint32_t pid, const FrameRegisters& frame, bool is_return_address,
            const StackMemory& stack, StepResult& result, RuntimeFrame& runtime_frame) override {
    ++asked;
    if (frame.value[kUnwindRegisterIp] != pc_) return false;
    result.Reset();
    runtime_frame = {.object = 0x7000, .position = 42, .kind = 3};
    if (!steps_) return true;  // its own pc, but no caller: the walk ends there
    for (int reg = 0; reg < kUnwindRegisterCount; ++reg) result.caller.Set(reg, caller_[reg]);
    result.end = StepEnd::kStepped;
    last_pid = pid;
    last_was_return_address = is_return_address;
    return true;
  }
  int asked = 0;
  uint32_t last_pid = 0;
  bool last_was_return_address = true;

 private:
  uint64_t pc_;
  std::span<const uint64_t> caller_;
  bool steps_;
};

// The caller the stepper gives is the real leaf frame, so the walk goes on from there to the
// thread's first frame exactly as from the real leaf, one frame deeper: the runtime's frame
// first, with what the runtime kept of it, and no other frame carrying any.
TEST_F(DwarfUnwinderSelfTest, ARuntimeStepsItsOwnCodeAndTheWalkGoesOnToTheOutermostFrame) {
  constexpr uint64_t kJitPc = 0x1000;  // in no mapping
  OnePcStepper stepper(kJitPc, chain_->registers, /*steps=*/true);
  DwarfUnwinder unwinder;
  unwinder.set_runtime_stepper(&stepper);
  UnwindResult real = UnwindOwn(unwinder, WholeStackOf(*chain_));
  EXPECT_EQ(unwinder.runtime_steps(), 0u);  // every frame lay in a file
  Capture capture = *chain_;
  capture.registers[kUnwindRegisterIp] = kJitPc;
  UnwindResult result = UnwindOwn(unwinder, WholeStackOf(capture));
  EXPECT_EQ(unwinder.runtime_steps(), 1u);
  EXPECT_EQ(stepper.last_pid, static_cast<uint32_t>(getpid()));
  EXPECT_FALSE(stepper.last_was_return_address);
  EXPECT_EQ(result.end, UnwindEnd::kOutermost);
  ASSERT_EQ(result.frames.size(), real.frames.size() + 1);
  EXPECT_EQ(result.frames[0].pc, kJitPc);
  EXPECT_EQ(result.frames[0].runtime, (RuntimeFrame{.object = 0x7000, .position = 42, .kind = 3}));
  for (size_t i = 1; i < result.frames.size(); ++i) {
    EXPECT_EQ(result.frames[i].pc, real.frames[i - 1].pc) << i;
    EXPECT_EQ(result.frames[i].runtime, RuntimeFrame{}) << i;
  }
}

// A pc the runtime claims but cannot step ends the walk there (an error, not the frame
// pointer's guess); a pc it does not claim is left to the frame pointer as before.
TEST_F(DwarfUnwinderSelfTest, ARuntimeThatCannotStepItsPcEndsTheWalkAndOthersKeepFramePointers) {
  constexpr uint64_t kJitPc = 0x1000;
  OnePcStepper stuck(kJitPc, chain_->registers, /*steps=*/false);
  DwarfUnwinder unwinder;
  unwinder.set_runtime_stepper(&stuck);
  Capture capture = *chain_;
  capture.registers[kUnwindRegisterIp] = kJitPc;
  UnwindResult result = UnwindOwn(unwinder, WholeStackOf(capture));
  EXPECT_EQ(result.end, UnwindEnd::kError);
  ASSERT_EQ(result.frames.size(), 1u);
  EXPECT_EQ(result.frames[0].runtime.kind, 3u);

  OnePcStepper other(/*pc=*/0x2000, chain_->registers, /*steps=*/true);
  DwarfUnwinder plain;
  DwarfUnwinder asking;
  asking.set_runtime_stepper(&other);
  UnwindResult by_frame_pointer = UnwindOwn(plain, WholeStackOf(capture));
  UnwindResult asked = UnwindOwn(asking, WholeStackOf(capture));
  EXPECT_GE(other.asked, 1);
  EXPECT_EQ(asking.runtime_steps(), 0u);
  EXPECT_EQ(Pcs(asked), Pcs(by_frame_pointer));
  EXPECT_EQ(asked.end, by_frame_pointer.end);
}

TEST_F(DwarfUnwinderSelfTest, WrongRegisterCountGivesNothing) {
  DwarfUnwinder unwinder;
  UserStack stack = WholeStackOf(*chain_);
  stack.registers = stack.registers.first(kUnwindRegisterCount - 1);
  UnwindResult result = UnwindOwn(unwinder, stack);
  EXPECT_EQ(result.end, UnwindEnd::kError);
  EXPECT_EQ(unwinder.processes(), 0u);
}

// A temporary file with the given bytes, removed on destruction.
class TempFile {
 public:
  explicit TempFile(const std::string& bytes) {
    path_ = testing::TempDir() + "/ember_unwind_XXXXXX";
    int fd = mkstemp(path_.data());
    if (fd < 0 || write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
      std::abort();
    }
    close(fd);
  }
  ~TempFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }
  FileIdentity identity() const {
    struct stat st;
    if (stat(path_.c_str(), &st) != 0) std::abort();
    return {.dev = st.st_dev, .inode = st.st_ino};
  }

 private:
  std::string path_;
};

std::string FirstBytesOf(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  std::string data(bytes, '\0');
  in.read(data.data(), static_cast<std::streamsize>(bytes));
  data.resize(static_cast<size_t>(in.gcount()));
  return data;
}

// Nothing to unwind with is an error, not a complete stack: the agent then falls back to the
// frame-pointer walk.
TEST_F(DwarfUnwinderSelfTest, UnreadableMappingsGiveTheLeafAndAnError) {
  TempFile not_elf(std::string(8192, 'x'));
  TempFile header_only(FirstBytesOf("/proc/self/exe", 64));  // program headers past the end
  const uint64_t rip = chain_->registers[kUnwindRegisterIp];
  const uint64_t page = rip & ~uint64_t{0xfff};
  auto covering_rip = [&](const std::string& path, FileIdentity file) {
    return ExecutableMapping{
        {.start = page, .end = page + 0x2000, .offset = 0, .file = file, .path = path}, path};
  };
  const std::vector<std::vector<ExecutableMapping>> cases = {
      {},
      {covering_rip(not_elf.path(), not_elf.identity())},
      {covering_rip(header_only.path(), header_only.identity())},
      {covering_rip("/nonexistent/ember/lib.so", {.dev = 1, .inode = 424242})},
  };
  // Without a file, code gets a frame-pointer step: make rbp no frame pointer, as it is not in
  // this binary (built without them) unless a sanitizer build kept one.
  Capture no_frame_pointer = *chain_;
  no_frame_pointer.registers[6] = 0;  // DWARF register 6: rbp
  uint32_t pid = 5000;
  for (const auto& mappings : cases) {
    DwarfUnwinder unwinder;
    UnwindResult result = unwinder.Unwind(
        ++pid, 1, [&] { return mappings; }, WholeStackOf(no_frame_pointer));
    ASSERT_EQ(result.frames.size(), 1u) << pid;
    EXPECT_EQ(result.frames[0].pc, rip);
    EXPECT_EQ(result.end, UnwindEnd::kError) << pid;
  }
}

// Bad mappings next to good ones cost only their own frames.
TEST_F(DwarfUnwinderSelfTest, UnreadableMappingsDoNotSpoilTheOthers) {
  TempFile not_elf(std::string(8192, 'x'));
  TempFile header_only(FirstBytesOf("/proc/self/exe", 64));
  std::vector<ExecutableMapping> mappings = OwnExecutableMappings();
  // Low addresses that nothing maps: below the executable in a PIE process.
  const std::vector<std::pair<std::string, FileIdentity>> bad = {
      {not_elf.path(), not_elf.identity()},
      {header_only.path(), header_only.identity()},
      {"/nonexistent/ember/lib.so", {.dev = 1, .inode = 424242}}};
  uint64_t next = 0x10000;
  for (const auto& [path, file] : bad) {
    mappings.push_back({{.start = next, .end = next + 0x2000, .file = file, .path = path}, path});
    next += 0x10000;
  }
  std::sort(mappings.begin(), mappings.end(),
            [](const auto& a, const auto& b) { return a.start < b.start; });

  DwarfUnwinder reference;
  UnwindResult expected = UnwindOwn(reference, WholeStackOf(*chain_));
  DwarfUnwinder unwinder;
  UnwindResult result = unwinder.Unwind(
      getpid(), 1, [&] { return mappings; }, WholeStackOf(*chain_));
  EXPECT_EQ(result.end, UnwindEnd::kOutermost);
  EXPECT_EQ(Pcs(result), Pcs(expected));
}

// Counts how often the unwinder asks for a process's mappings.
struct CountingMappings {
  std::vector<ExecutableMapping> mappings = OwnExecutableMappings();
  int calls = 0;
  std::vector<ExecutableMapping> Get() {
    ++calls;
    return mappings;
  }
};

TEST_F(DwarfUnwinderSelfTest, RebuildsAProcessOnlyForANewLayoutVersion) {
  DwarfUnwinder unwinder;
  CountingMappings maps;
  auto unwind = [&](uint64_t version) {
    return unwinder.Unwind(
        77, version, [&] { return maps.Get(); }, WholeStackOf(*chain_));
  };
  std::vector<uint64_t> first = Pcs(unwind(1));
  EXPECT_EQ(maps.calls, 1);
  EXPECT_EQ(Pcs(unwind(1)), first);
  EXPECT_EQ(maps.calls, 1);
  EXPECT_EQ(Pcs(unwind(2)), first);
  EXPECT_EQ(maps.calls, 2);
  unwind(2);
  EXPECT_EQ(maps.calls, 2);
  EXPECT_EQ(unwinder.processes(), 1u);
}

TEST_F(DwarfUnwinderSelfTest, KeepsAtMostMaxProcessesEvictingTheLeastRecentlyUsed) {
  DwarfUnwinder unwinder(DwarfUnwinder::Limits{.max_processes = 2});
  CountingMappings maps[4];
  auto unwind = [&](uint32_t pid) {
    UnwindResult result = unwinder.Unwind(
        pid, 1, [&] { return maps[pid].Get(); }, WholeStackOf(*chain_));
    EXPECT_EQ(result.end, UnwindEnd::kOutermost) << pid;
    EXPECT_LE(unwinder.processes(), 2u);
  };
  unwind(1);
  unwind(2);
  unwind(1);  // now 2 is the least recently used
  unwind(3);  // evicts 2
  EXPECT_EQ(unwinder.processes(), 2u);
  unwind(1);
  EXPECT_EQ(maps[1].calls, 1);
  unwind(2);  // built again; evicts 3
  EXPECT_EQ(maps[2].calls, 2);
  unwind(1);
  EXPECT_EQ(maps[1].calls, 1);
  unwind(3);
  EXPECT_EQ(maps[3].calls, 2);
}

TEST_F(DwarfUnwinderSelfTest, AForgottenProcessGoesAtOnceAndOthersStay) {
  DwarfUnwinder unwinder;
  CountingMappings exited, other;
  unwinder.Unwind(
      1, 1, [&] { return exited.Get(); }, WholeStackOf(*chain_));
  unwinder.Unwind(
      2, 1, [&] { return other.Get(); }, WholeStackOf(*chain_));
  unwinder.ForgetProcess(1);
  unwinder.ForgetProcess(3);  // never seen: nothing to forget
  EXPECT_EQ(unwinder.processes(), 1u);
  UnwindResult result = unwinder.Unwind(
      2, 1, [&] { return other.Get(); }, WholeStackOf(*chain_));
  EXPECT_EQ(result.end, UnwindEnd::kOutermost);
  EXPECT_EQ(other.calls, 1);
  unwinder.Unwind(
      1, 1, [&] { return exited.Get(); }, WholeStackOf(*chain_));
  EXPECT_EQ(exited.calls, 2) << "a new process of the pid builds its own";
  EXPECT_EQ(unwinder.processes(), 2u);
}

TEST_F(DwarfUnwinderSelfTest, NextGenerationDropsProcessesUnusedForKeepGenerations) {
  DwarfUnwinder unwinder;
  CountingMappings busy, idle;
  unwinder.Unwind(
      1, 1, [&] { return busy.Get(); }, WholeStackOf(*chain_));
  unwinder.Unwind(
      2, 1, [&] { return idle.Get(); }, WholeStackOf(*chain_));
  // Process 2 was used in generation 0 only; it survives while that is one of the last two.
  for (int generation = 1; generation <= 2; ++generation) {
    unwinder.NextGeneration(2);
    EXPECT_EQ(unwinder.processes(), 2u) << generation;
    unwinder.Unwind(
        1, 1, [&] { return busy.Get(); }, WholeStackOf(*chain_));
  }
  unwinder.NextGeneration(2);
  EXPECT_EQ(unwinder.processes(), 1u);
  EXPECT_EQ(busy.calls, 1);
  unwinder.Unwind(
      2, 1, [&] { return idle.Get(); }, WholeStackOf(*chain_));
  EXPECT_EQ(idle.calls, 2);  // rebuilt
}

size_t DistinctFiles(const std::vector<ExecutableMapping>& mappings) {
  std::set<std::pair<uint64_t, uint64_t>> files;
  for (const ExecutableMapping& m : mappings) {
    if (m.file.inode != 0 && !m.path.empty() && m.path[0] == '/') {
      files.insert({m.file.dev, m.file.inode});
    }
  }
  return files.size();
}

TEST_F(DwarfUnwinderSelfTest, ProcessesMappingTheSameFilesShareTheirImages) {
  DwarfUnwinder unwinder;
  std::vector<ExecutableMapping> mappings = OwnExecutableMappings();
  const size_t files = DistinctFiles(mappings);
  ASSERT_GE(files, 2u);  // at least the test binary and libc
  std::vector<uint64_t> first;
  for (uint32_t pid = 100; pid < 105; ++pid) {
    UnwindResult result = unwinder.Unwind(
        pid, 1, [&] { return mappings; }, WholeStackOf(*chain_));
    EXPECT_EQ(result.end, UnwindEnd::kOutermost);
    if (first.empty()) first = Pcs(result);
    EXPECT_EQ(Pcs(result), first);
  }
  EXPECT_EQ(unwinder.processes(), 5u);
  EXPECT_EQ(unwinder.images(), files);

  // A process with only some of the files adds none.
  std::vector<ExecutableMapping> some(mappings.begin(), mappings.begin() + 1);
  unwinder.Unwind(
      200, 1, [&] { return some; }, WholeStackOf(*chain_));
  EXPECT_EQ(unwinder.images(), files);

  // Once no process uses them, the images go too: the cache stays bounded.
  for (int i = 0; i < 10; ++i) unwinder.NextGeneration();
  EXPECT_EQ(unwinder.processes(), 0u);
  EXPECT_EQ(unwinder.images(), 0u);
}

TEST_F(DwarfUnwinderSelfTest, UnwindsThroughASignalFrameToTheInterruptedCode) {
  Capture capture;
  RaiseAndCapture(&capture);
  ASSERT_FALSE(capture.stack.empty());
  DwarfUnwinder unwinder;
  UnwindResult result = UnwindOwn(unwinder, WholeStackOf(capture));
  std::vector<uint64_t> ours = Pcs(result);
  SCOPED_TRACE("ours:" + Describe(ours) + "\nbacktrace():" + Describe(capture.backtrace));

  EXPECT_EQ(result.end, UnwindEnd::kOutermost);
  ASSERT_GE(ours.size(), 4u);
  EXPECT_EQ(FunctionOf(ours[1]), AddressOf(CaptureInHandler));
  auto raiser = std::find_if(ours.begin(), ours.end(), [](uint64_t pc) {
    return FunctionOf(pc) == AddressOf(RaiseAndCapture);
  });
  ASSERT_NE(raiser, ours.end()) << "the unwind did not cross the signal frame";
  // Two frames are exact instructions, not return addresses: the signal trampoline the kernel
  // "returned" to (its first byte; a byte before it is another function), and the instruction
  // the signal interrupted. Both lie between the handler and the raiser.
  std::vector<size_t> activations;
  for (size_t i = 1; i < result.frames.size(); ++i) {
    if (!result.frames[i].is_return_address) activations.push_back(i);
  }
  EXPECT_EQ(activations, (std::vector<size_t>{2, 3}));
  EXPECT_GT(raiser - ours.begin(), 3);
  // libgcc's unwinder agrees from the handler on.
  ExpectCallersMatch(ours, capture.backtrace);
}

TEST_F(DwarfUnwinderSelfTest, AThreadStackEndsAtTheThreadsFirstFrame) {
  Capture capture;
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, nullptr, CaptureInThread, &capture), 0);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
  ASSERT_FALSE(capture.stack.empty());
  DwarfUnwinder unwinder;
  UnwindResult result = UnwindOwn(unwinder, WholeStackOf(capture));
  std::vector<uint64_t> ours = Pcs(result);
  SCOPED_TRACE("ours:" + Describe(ours) + "\nbacktrace():" + Describe(capture.backtrace));

  EXPECT_EQ(result.end, UnwindEnd::kOutermost);
  auto entry = std::find_if(ours.begin(), ours.end(), [](uint64_t pc) {
    return FunctionOf(pc) == AddressOf(CaptureInThread);
  });
  ASSERT_NE(entry, ours.end());
  // Above the thread's entry only libc's thread start remains. (libc found by a function no
  // sanitizer runtime intercepts.)
  MemoryMapping libc =
      MappingOf(reinterpret_cast<uint64_t>(dlsym(RTLD_DEFAULT, "gnu_get_libc_version")));
  ASSERT_NE(entry + 1, ours.end());
  for (auto pc = entry + 1; pc != ours.end(); ++pc) {
    EXPECT_TRUE(libc.start <= *pc && *pc < libc.end) << Describe(*pc);
  }
  ExpectCallersMatch(ours, capture.backtrace);
}

// The start of this executable's .plt section in memory, from its section headers.
uint64_t OwnPltAddress() {
  std::ifstream in("/proc/self/exe", std::ios::binary);
  std::string image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (image.size() < sizeof(Elf64_Ehdr)) return 0;
  const auto* ehdr = reinterpret_cast<const Elf64_Ehdr*>(image.data());
  if (ehdr->e_shoff + uint64_t{ehdr->e_shnum} * sizeof(Elf64_Shdr) > image.size()) return 0;
  const auto* shdrs = reinterpret_cast<const Elf64_Shdr*>(image.data() + ehdr->e_shoff);
  const Elf64_Shdr& names = shdrs[ehdr->e_shstrndx];
  for (int i = 0; i < ehdr->e_shnum; ++i) {
    const char* name = image.data() + names.sh_offset + shdrs[i].sh_name;
    if (std::strcmp(name, ".plt") != 0) continue;
    // The load bias: where the function really is minus where the ELF file says it is.
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&ChainA), &info) == 0) return 0;
    return reinterpret_cast<uint64_t>(info.dli_fbase) + shdrs[i].sh_addr;
  }
  return 0;
}

// A sample that lands in a PLT stub: the stub has no frame of its own, and its CFI is an
// expression on rip (the CFA is rsp+8 before the stub's push, rsp+16 after it).
TEST_F(DwarfUnwinderSelfTest, UnwindsFromInsideAPltStub) {
  DwarfUnwinder unwinder;
  std::vector<uint64_t> whole = Pcs(UnwindOwn(unwinder, WholeStackOf(*chain_)));
  ASSERT_GE(whole.size(), 4u);
  const uint64_t plt = OwnPltAddress();
  ASSERT_NE(plt, 0u);
  // Where CaptureHere's return address into ChainC lies: a call into a stub from ChainC would
  // have put it at the same place.
  const uint64_t sp = chain_->registers[kUnwindRegisterSp];
  size_t slot = 0;
  while (slot + 8 <= chain_->stack.size()) {
    uint64_t word;
    std::memcpy(&word, chain_->stack.data() + slot, 8);
    if (word == whole[1]) break;
    slot += 8;
  }
  ASSERT_LT(slot + 8, chain_->stack.size());

  for (uint64_t offset_in_entry : {0, 11}) {
    SCOPED_TRACE("at byte " + std::to_string(offset_in_entry) + " of the second PLT entry");
    Capture at_stub = *chain_;
    // Byte 11 of a lazy-binding entry is past its push of the relocation index.
    const size_t pushed = offset_in_entry >= 11 ? 8 : 0;
    const uint64_t stub_sp = sp + slot - pushed;
    at_stub.stack.assign(chain_->stack.begin() + slot, chain_->stack.end());
    at_stub.stack.insert(at_stub.stack.begin(), pushed, 0);
    at_stub.registers[kUnwindRegisterSp] = stub_sp;
    at_stub.registers[kUnwindRegisterIp] = plt + 16 + offset_in_entry;
    UnwindResult result = UnwindOwn(unwinder, WholeStackOf(at_stub));
    std::vector<uint64_t> ours = Pcs(result);
    SCOPED_TRACE("ours:" + Describe(ours) + "\nwhole:" + Describe(whole));
    EXPECT_EQ(result.end, UnwindEnd::kOutermost);
    ASSERT_GE(ours.size(), 2u);
    EXPECT_EQ(ours[0], plt + 16 + offset_in_entry);
    // Then exactly the callers the real call had.
    EXPECT_EQ(std::vector<uint64_t>(ours.begin() + 1, ours.end()),
              std::vector<uint64_t>(whole.begin() + 1, whole.end()));
  }
}

// Compact CFI rows are a cache of what libdwfl computes: every stack unwinds to the same frames,
// exact or return address, and ends the same way, with the rows on and off.
void ExpectSameUnwind(const UnwindResult& rows, const UnwindResult& libdwfl,
                      const std::string& what) {
  ASSERT_EQ(Pcs(rows), Pcs(libdwfl))
      << what << "\nrows:" << Describe(Pcs(rows)) << "\nlibdwfl:" << Describe(Pcs(libdwfl));
  for (size_t i = 0; i < rows.frames.size(); ++i) {
    ASSERT_EQ(rows.frames[i].is_return_address, libdwfl.frames[i].is_return_address)
        << what << ", frame " << i;
  }
  ASSERT_EQ(rows.end, libdwfl.end) << what;
}

TEST_F(DwarfUnwinderSelfTest, CompactRowsUnwindExactlyAsLibdwfl) {
  DwarfUnwinder with_rows;
  DwarfUnwinder libdwfl_only(DwarfUnwinder::Limits{.compact_rows = false});
  auto compare = [&](const UserStack& stack, const std::string& what) {
    ExpectSameUnwind(UnwindOwn(with_rows, stack), UnwindOwn(libdwfl_only, stack), what);
  };

  Capture signal;
  RaiseAndCapture(&signal);
  Capture thread;
  pthread_t id;
  ASSERT_EQ(pthread_create(&id, nullptr, CaptureInThread, &thread), 0);
  ASSERT_EQ(pthread_join(id, nullptr), 0);
  for (const Capture* capture : {chain_, &signal, &thread}) {
    const size_t size = capture->stack.size();
    for (size_t bytes = 0; bytes <= size; bytes += (bytes < 1024 ? 1 : 7)) {
      compare(StackOf(*capture, bytes, true), "cut at " + std::to_string(bytes));
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_EQ(libdwfl_only.row_stats().compact_steps, 0u);
  EXPECT_GT(with_rows.row_cache_bytes(), 0u);
  // On whole stacks the rows do the work: libdwfl steps only the frame whose caller is the signal
  // trampoline (a cut snapshot adds the step that reads past its end).
  for (const Capture* capture : {chain_, &signal, &thread}) {
    DwarfUnwinder fresh;
    const size_t frames = UnwindOwn(fresh, WholeStackOf(*capture)).frames.size();
    const ModuleCfi::RowStats stats = fresh.row_stats();
    EXPECT_EQ(stats.compact_steps + stats.libdwfl_steps, frames);
    EXPECT_EQ(stats.libdwfl_steps, capture == &signal ? 1u : 0u);
  }

  // Garbage: the real stack with words overwritten by code addresses and random values.
  std::vector<ExecutableMapping> mappings = OwnExecutableMappings();
  std::mt19937_64 random(20261123);
  for (int round = 0; round < 2000; ++round) {
    Capture garbage = *chain_;
    const ExecutableMapping& m = mappings[random() % mappings.size()];
    if (round % 2) garbage.registers[kUnwindRegisterIp] = m.start + random() % (m.end - m.start);
    for (int i = 0; i < 8; ++i) {
      size_t at = (random() % (garbage.stack.size() / 8)) * 8;
      const ExecutableMapping& w = mappings[random() % mappings.size()];
      uint64_t word = random() % 2 ? w.start + random() % (w.end - w.start) : random();
      std::memcpy(&garbage.stack[at], &word, 8);
    }
    compare(WholeStackOf(garbage), "garbage round " + std::to_string(round));
    if (HasFatalFailure()) return;
  }
}

// A file's rows are bounded: past the limit the cache starts over, and unwinds stay the same.
TEST_F(DwarfUnwinderSelfTest, RowCacheStaysWithinItsLimit) {
  DwarfUnwinder unwinder(DwarfUnwinder::Limits{.max_rows_per_file = 4});
  DwarfUnwinder libdwfl_only(DwarfUnwinder::Limits{.compact_rows = false});
  for (int i = 0; i < 3; ++i) {
    ExpectSameUnwind(UnwindOwn(unwinder, WholeStackOf(*chain_)),
                     UnwindOwn(libdwfl_only, WholeStackOf(*chain_)), "round " + std::to_string(i));
  }
  ModuleCfi::RowStats stats = unwinder.row_stats();
  EXPECT_LE(stats.rows_cached, 4u * unwinder.images() + 4u);  // the vDSO has rows too
  EXPECT_GT(stats.compact_steps, 0u);
}

// Past the byte budget of every file's rows together, a generation step empties the biggest:
// the rows are read again when needed, the counts of steps stay, and unwinds do not change.
TEST_F(DwarfUnwinderSelfTest, RowCachesTogetherStayWithinTheirByteBudget) {
  DwarfUnwinder unwinder(DwarfUnwinder::Limits{.max_row_cache_bytes = 1});
  DwarfUnwinder libdwfl_only(DwarfUnwinder::Limits{.compact_rows = false});
  const UnwindResult expected = UnwindOwn(libdwfl_only, WholeStackOf(*chain_));
  ExpectSameUnwind(UnwindOwn(unwinder, WholeStackOf(*chain_)), expected, "before");
  const ModuleCfi::RowStats before = unwinder.row_stats();
  ASSERT_GT(before.rows_cached, 0u);
  ASSERT_GT(unwinder.row_cache_bytes(), 1u);

  unwinder.NextGeneration();
  EXPECT_EQ(unwinder.row_cache_bytes(), 0u);
  EXPECT_EQ(unwinder.rows_evicted(), before.rows_cached);
  EXPECT_EQ(unwinder.row_stats().compact_steps, before.compact_steps);

  ExpectSameUnwind(UnwindOwn(unwinder, WholeStackOf(*chain_)), expected, "after");
  EXPECT_GT(unwinder.row_stats().rows_read, before.rows_read);
}

}  // namespace
}  // namespace unwind_test
}  // namespace ember
