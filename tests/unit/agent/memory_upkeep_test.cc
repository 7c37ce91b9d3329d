// MemoryUpkeep::TrimHeap's rules on a heap the test stands in for: it looks only after the agent
// grew or its caches shrank, and trims only when more than kFreeHeapKept was freed above what
// was free after the last trim.
#include "agent/memory_upkeep.h"

#include "gtest/gtest.h"
#include "process/process_table.h"

namespace ember {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

class MemoryUpkeepTest : public ::testing::Test {
 protected:
  HeapAccess Heap() {
    return {.resident_bytes = [this] { return resident_; },
            .free_heap_bytes =
                [this] {
                  ++looks_;
                  return free_;
                },
            .trim =
                [this] {
                  ++trims_;
                  free_ = free_after_trim_;
                }};
  }

  ProcessTable processes_;
  ModuleCache modules_;
  FrameResolver frames_{&processes_, &modules_, nullptr};
  DwarfUnwinder unwinder_{DwarfUnwinder::Limits{}};
  size_t resident_ = 100 * kMiB;
  size_t free_ = 20 * kMiB;
  size_t free_after_trim_ = 2 * kMiB;
  int looks_ = 0;
  int trims_ = 0;
};

TEST_F(MemoryUpkeepTest, TrimsWhatPiledUpSinceTheLastTrimOnly) {
  MemoryUpkeep upkeep(modules_, frames_, unwinder_, Heap());
  upkeep.TrimHeap(50 * kMiB);  // the first look: grown from nothing
  EXPECT_EQ(looks_, 2);        // before and after the trim
  EXPECT_EQ(trims_, 1);

  // Neither grown nor shrunk: the heap is not walked at all.
  upkeep.TrimHeap(50 * kMiB);
  EXPECT_EQ(looks_, 2);

  // Caches shrank by more than kFreeHeapKept, but what is free (5 MiB) is within kFreeHeapKept
  // of what was free after the trim (2 MiB): kept for the next interval.
  free_ = 5 * kMiB;
  upkeep.TrimHeap(40 * kMiB);
  EXPECT_EQ(looks_, 3);
  EXPECT_EQ(trims_, 0 + 1);

  // Grown by more than kFreeHeapKept, and 11 MiB freed above the mark: trimmed.
  resident_ += 9 * kMiB;
  free_ = 13 * kMiB;
  upkeep.TrimHeap(40 * kMiB);
  EXPECT_EQ(trims_, 2);

  // Free bytes taken into use lower the mark: what is freed again above it goes back.
  resident_ += 9 * kMiB;
  free_ = 0;
  upkeep.TrimHeap(40 * kMiB);
  EXPECT_EQ(trims_, 2);
  resident_ += 9 * kMiB;
  free_ = 9 * kMiB;
  free_after_trim_ = 0;
  upkeep.TrimHeap(40 * kMiB);
  EXPECT_EQ(trims_, 3);
}

TEST_F(MemoryUpkeepTest, UnreadableResidentBytesStillLetItLook) {
  resident_ = 0;
  free_after_trim_ = 0;
  MemoryUpkeep upkeep(modules_, frames_, unwinder_, Heap());
  upkeep.TrimHeap(10 * kMiB);
  EXPECT_EQ(trims_, 1);
  free_ = 9 * kMiB;
  upkeep.TrimHeap(10 * kMiB);
  EXPECT_EQ(trims_, 2);
}

}  // namespace
}  // namespace ember
