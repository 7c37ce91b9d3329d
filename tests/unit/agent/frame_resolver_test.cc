// FrameResolver on this test process itself, the way the agent resolves a sampled address: a
// native frame in inlined code carries the inlined function, with its own line.
#include "agent/frame_resolver.h"

#include <unistd.h>

#include <cstdint>

#include "gtest/gtest.h"

namespace ember_resolver_test {

volatile int sink;

constexpr uint32_t kInnerLine = __LINE__ + 2;
inline __attribute__((always_inline)) int Inner(int x) {
  sink = x * 5;
  return sink + 1;
}

constexpr uint32_t kCallLine = __LINE__ + 3;
__attribute__((noipa)) int Outer(int x) {
  sink = x;
  const int y = Inner(sink);
  sink = y - 2;
  return sink;
}

}  // namespace ember_resolver_test

namespace ember {
namespace {

TEST(FrameResolverTest, NativeFrameCarriesTheFunctionsInlinedAtItsAddress) {
  ProcessTable processes;
  ModuleCache modules;
  FrameResolver resolver(&processes, &modules, nullptr);
  Process* self = processes.Get(static_cast<uint32_t>(getpid()));
  ASSERT_NE(self, nullptr);

  const auto start = reinterpret_cast<uint64_t>(&ember_resolver_test::Outer);
  const Frame* inlined = nullptr;
  int outer_frames = 0;
  for (uint64_t ip = start; ip < start + 256 && inlined == nullptr; ++ip) {
    const Frame* frame = resolver.User(self, ip, /*caller=*/false);
    ASSERT_NE(frame, nullptr);
    if (frame->function != "ember_resolver_test::Outer(int)") break;
    ++outer_frames;
    if (!frame->inlined.empty()) inlined = frame;
  }
  ASSERT_GT(outer_frames, 0) << "the test binary has no symbol for Outer";
  ASSERT_NE(inlined, nullptr) << "no address of Outer resolved into Inner's inlined body";
  EXPECT_EQ(inlined->kind, FrameKind::kNative);
  EXPECT_EQ(inlined->source_file, __FILE__);
  EXPECT_EQ(inlined->line, ember_resolver_test::kCallLine);
  ASSERT_EQ(inlined->inlined.size(), 1u);
  EXPECT_EQ(inlined->inlined[0].function, "ember_resolver_test::Inner(int)");
  EXPECT_EQ(inlined->inlined[0].source_file, __FILE__);
  EXPECT_GE(inlined->inlined[0].line, ember_resolver_test::kInnerLine);
  EXPECT_LE(inlined->inlined[0].line, ember_resolver_test::kInnerLine + 1);

  // The first instruction sets `sink = x` in Outer itself.
  const Frame* entry = resolver.User(self, start, /*caller=*/false);
  EXPECT_TRUE(entry->inlined.empty());
}

}  // namespace
}  // namespace ember
