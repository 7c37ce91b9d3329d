// HotSpotRuntime's step on a live JVM whose memory stops answering, as a JVM's does once it has
// exited: the agent reads samples late, so a JVM's last samples often arrive after its exit.
// Where the JVM keeps frame pointers (-XX:+PreserveFramePointer) the walk goes on by rbp; that
// side is checked by bpf.JavaJitTest, whose JVM does.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "process/process_table.h"
#include "runtimes/hotspot/code_cache.h"
#include "runtimes/hotspot/frame_step.h"
#include "runtimes/hotspot/hotspot_runtime.h"
#include "runtimes/hotspot/vm_structs.h"
#include "runtimes/process_memory.h"
#include "status/metrics_registry.h"
#include "vm_live_jvm.h"

namespace ember::hotspot {
namespace {

// The JVM's memory until `gone` is set; then no read succeeds, as process_vm_readv on an exited
// process.
class VanishingMemory : public MemoryReader {
 public:
  VanishingMemory(pid_t pid, std::shared_ptr<const bool> gone)
      : live_(pid), gone_(std::move(gone)) {}
  bool Read(uint64_t address, void* out, size_t size) override {
    return !*gone_ && live_.Read(address, out, size);
  }

 private:
  ProcessMemoryReader live_;
  std::shared_ptr<const bool> gone_;
};

// A pc in one of the code heaps, outside the interpreter: stepping it needs the segment map.
uint64_t CompiledCodePc(const CodeCacheInfo& info) {
  for (uint32_t i = 0; i < info.heap_count; ++i) {
    for (uint64_t pc = info.heaps[i].low + 64; pc < info.heaps[i].high; pc += 4096) {
      if (!info.InInterpreter(pc)) return pc;
    }
  }
  return 0;
}

// A JVM whose compiled frames were never seen keeping rbp as their frame pointer (this one has
// run no compiled Java code that was sampled): the frame-pointer rule would skip frames, so the
// walk ends at the frame rather than going on by rbp.
TEST(HotSpotRuntimeStepTest, UnreadableCodeEndsTheWalkUnlessFramePointersWereSeenKept) {
  live::LiveJvm jvm(live::kJdk17);
  ASSERT_TRUE(jvm.ok());
  std::optional<JvmProcess> detected = jvm.Detect();
  ASSERT_TRUE(detected.has_value());
  ProcessMemoryReader memory(jvm.pid());
  absl::StatusOr<HotSpotLayout> layout = ReadHotSpotLayout(memory, *detected);
  ASSERT_TRUE(layout.ok()) << layout.status();
  CodeCacheInfo info;
  ASSERT_EQ(ReadCodeCacheInfo(*layout, detected->bias, memory, &info), CodeCacheStatus::kReady);
  const uint64_t pc = CompiledCodePc(info);
  ASSERT_NE(pc, 0u);

  auto gone = std::make_shared<bool>(false);
  MetricsRegistry metrics;
  HotSpotRuntime runtime(metrics, [gone](uint32_t pid) {
    return std::make_unique<VanishingMemory>(static_cast<pid_t>(pid), gone);
  });
  Process process;
  process.pid = static_cast<uint32_t>(jvm.pid());
  process.name = "java";
  process.mappings = jvm.Mappings();
  runtime.ProcessMapsChanged(process);
  ASSERT_EQ(runtime.OutcomeOf(process.pid), JvmOutcome::kSupported);

  *gone = true;
  // A frame the frame-pointer rule could follow: bp just above sp.
  const uint64_t sp = 0x7ff000001000;
  std::vector<uint8_t> bytes(64, 0);
  const StackMemory stack{.start = sp, .bytes = bytes};
  FrameRegisters frame;
  frame.Set(kRegIp, pc);
  frame.Set(kRegSp, sp);
  frame.Set(kRegBp, sp + 16);
  StepResult result;
  RuntimeFrame runtime_frame;
  EXPECT_TRUE(runtime.StepCodeOutsideFiles(process.pid, frame, /*is_return_address=*/false, stack,
                                           result, runtime_frame));
  EXPECT_NE(result.end, StepEnd::kStepped);
  EXPECT_EQ(runtime_frame, RuntimeFrame{});
}

}  // namespace
}  // namespace ember::hotspot
