// Each counter of the BPF program's stats map lands in the BpfStats member of the same name.
#include <cstdint>
#include <cstring>

#include "gtest/gtest.h"
#include "sampler/bpf_profiler.h"

namespace ember {
namespace {

// A distinct value per counter: a counter added to another's member shows up as a wrong sum.
uint64_t ValueOf(uint32_t index) { return uint64_t{1} << index; }

TEST(BpfStatsTest, EachCounterLandsInItsNamedMember) {
  BpfStats stats;
  for (uint32_t index = 0; index < EMBER_STAT_COUNT; ++index) {
    AddBpfStat(index, ValueOf(index), stats);
  }
  EXPECT_EQ(stats.samples, ValueOf(EMBER_STAT_SAMPLES));
  EXPECT_EQ(stats.ring_buffer_full, ValueOf(EMBER_STAT_RINGBUF_FULL));
  EXPECT_EQ(stats.kernel_stack_errors, ValueOf(EMBER_STAT_KERNEL_STACK_ERRORS));
  EXPECT_EQ(stats.user_stack_errors, ValueOf(EMBER_STAT_USER_STACK_ERRORS));
  EXPECT_EQ(stats.snapshot_errors, ValueOf(EMBER_STAT_SNAPSHOT_ERRORS));
  EXPECT_EQ(stats.snapshot_no_mapping, ValueOf(EMBER_STAT_SNAPSHOT_NO_MAPPING));
  EXPECT_EQ(stats.snapshot_clamped, ValueOf(EMBER_STAT_SNAPSHOT_CLAMPED));
  EXPECT_EQ(stats.python_ok, ValueOf(EMBER_STAT_PYTHON_OK));
  EXPECT_EQ(stats.python_no_thread_state, ValueOf(EMBER_STAT_PYTHON_NO_THREAD_STATE));
  EXPECT_EQ(stats.python_read_failed, ValueOf(EMBER_STAT_PYTHON_READ_FAILED));
  EXPECT_EQ(stats.python_not_code, ValueOf(EMBER_STAT_PYTHON_NOT_CODE));
  EXPECT_EQ(stats.python_truncated, ValueOf(EMBER_STAT_PYTHON_TRUNCATED));
  EXPECT_EQ(stats.unwind_complete, ValueOf(EMBER_STAT_UNWIND_COMPLETE));
  EXPECT_EQ(stats.unwind_stopped, ValueOf(EMBER_STAT_UNWIND_STOPPED));
  EXPECT_EQ(stats.unwind_no_tables, ValueOf(EMBER_STAT_UNWIND_NO_TABLES));
  EXPECT_EQ(stats.context_ok, ValueOf(EMBER_STAT_CONTEXT_OK));
  EXPECT_EQ(stats.context_none, ValueOf(EMBER_STAT_CONTEXT_NONE));
  EXPECT_EQ(stats.context_invalid, ValueOf(EMBER_STAT_CONTEXT_INVALID));
  EXPECT_EQ(stats.context_read_failed, ValueOf(EMBER_STAT_CONTEXT_READ_FAILED));
  EXPECT_EQ(stats.context_no_tls_block, ValueOf(EMBER_STAT_CONTEXT_NO_TLS_BLOCK));
  EXPECT_EQ(stats.context_notices, ValueOf(EMBER_STAT_CONTEXT_NOTICES));
  EXPECT_EQ(stats.context_notices_lost, ValueOf(EMBER_STAT_CONTEXT_NOTICES_LOST));
  EXPECT_EQ(stats.context_notices_suppressed, ValueOf(EMBER_STAT_CONTEXT_NOTICES_SUPPRESSED));
}

TEST(BpfStatsTest, SumsSharesAndIgnoresIndexesOutsideTheEnum) {
  BpfStats stats;
  AddBpfStat(EMBER_STAT_PYTHON_OK, 3, stats);
  AddBpfStat(EMBER_STAT_PYTHON_OK, 4, stats);  // another CPU's share
  AddBpfStat(EMBER_STAT_COUNT, 100, stats);
  AddBpfStat(UINT32_MAX, 100, stats);
  BpfStats expected;
  expected.python_ok = 7;
  EXPECT_EQ(std::memcmp(&stats, &expected, sizeof(stats)), 0);
}

}  // namespace
}  // namespace ember
