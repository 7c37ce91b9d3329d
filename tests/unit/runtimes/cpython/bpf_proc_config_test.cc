// The BPF map entry made from each verified layout: every offset carried over, and a frame header
// copy that holds every field the BPF walk reads from it.
#include "runtimes/cpython/bpf_proc_config.h"

#include "gtest/gtest.h"
#include "runtimes/cpython/cpython_layout.h"

namespace ember::python {
namespace {

WalkerConfig ConfigOf(const CPythonLayout& layout) {
  return WalkerConfig{
      .layout = layout, .runtime_address = 0x7f0000100000, .code_type_address = 0x7f0000200000};
}

__u16 Expected(uint32_t offset) {
  return offset == kNoOffset ? EMBER_PYTHON_NO_OFFSET : static_cast<__u16>(offset);
}

TEST(BpfProcConfigTest, EveryLayoutFitsWithItsOffsets) {
  for (const CPythonLayout& layout : AllLayouts()) {
    SCOPED_TRACE(testing::Message() << "3." << int{layout.minor});
    std::optional<ember_python_proc> proc = MakeBpfPythonProc(ConfigOf(layout));
    ASSERT_TRUE(proc.has_value());
    EXPECT_EQ(proc->runtime_address, 0x7f0000100000u);
    EXPECT_EQ(proc->code_type_address, 0x7f0000200000u);
    EXPECT_EQ(proc->interpreters_head, layout.runtime_interpreters_head);
    EXPECT_EQ(proc->interp_threads_head, layout.interp_threads_head);
    EXPECT_EQ(proc->tstate_next, layout.tstate_next);
    EXPECT_EQ(proc->tstate_thread_id, layout.tstate_thread_id);
    EXPECT_EQ(proc->tstate_frame, layout.tstate_frame);
    EXPECT_EQ(proc->cframe_current_frame, Expected(layout.cframe_current_frame));
    EXPECT_EQ(proc->frame_previous, layout.frame_previous);
    EXPECT_EQ(proc->frame_code, layout.frame_code);
    EXPECT_EQ(proc->frame_position, layout.frame_last_instruction);
    EXPECT_EQ(proc->frame_owner, Expected(layout.frame_owner));
    EXPECT_EQ(proc->frame_is_entry, Expected(layout.frame_is_entry));
    EXPECT_EQ(proc->code_type_offset, layout.object_type);
    EXPECT_EQ(proc->minor, layout.minor);
    EXPECT_EQ(proc->position_kind, static_cast<__u8>(layout.last_instruction));
    if (layout.runtime_tstate_current == kNoOffset) {
      EXPECT_EQ(proc->tstate_current_address, 0u);
    } else {
      EXPECT_EQ(proc->tstate_current_address, 0x7f0000100000u + layout.runtime_tstate_current);
    }
    EXPECT_EQ(proc->owner_cstack, layout.owner_cstack >= 0 ? layout.owner_cstack : 0xff);
    EXPECT_EQ((proc->flags & EMBER_PYTHON_PROC_INTERPRETER_FRAMES) != 0, layout.interpreter_frames);
    // The header copy holds every field the walk reads, and the BPF buffer holds the header.
    EXPECT_LE(proc->frame_header_bytes, EMBER_MAX_PYTHON_FRAME_HEADER);
    EXPECT_GE(proc->frame_header_bytes, proc->frame_previous + 8);
    EXPECT_GE(proc->frame_header_bytes, proc->frame_code + 8);
    EXPECT_GE(proc->frame_header_bytes, proc->frame_position + (proc->position_kind <= 2 ? 4 : 8));
    if (proc->frame_owner != EMBER_PYTHON_NO_OFFSET) {
      EXPECT_GT(proc->frame_header_bytes, proc->frame_owner);
    }
    if (proc->frame_is_entry != EMBER_PYTHON_NO_OFFSET) {
      EXPECT_GT(proc->frame_header_bytes, proc->frame_is_entry);
    }
  }
}

TEST(BpfProcConfigTest, HeaderSizesPerVersion) {
  // PyFrameObject up to f_lasti (3.8-3.10), _PyInterpreterFrame up to owner / is_entry (3.11+).
  const std::pair<int, int> expected[] = {{8, 108}, {9, 108}, {10, 100},
                                          {11, 70}, {12, 71}, {13, 71}};
  for (auto [minor, bytes] : expected) {
    const CPythonLayout* layout = FindLayout(3, minor);
    ASSERT_NE(layout, nullptr);
    std::optional<ember_python_proc> proc = MakeBpfPythonProc(ConfigOf(*layout));
    ASSERT_TRUE(proc.has_value());
    EXPECT_EQ(proc->frame_header_bytes, bytes) << "3." << minor;
  }
}

TEST(BpfProcConfigTest, RefusesWhatTheWalkCannotUse) {
  const CPythonLayout* layout = FindLayout(3, 11);
  ASSERT_NE(layout, nullptr);
  WalkerConfig config = ConfigOf(*layout);
  config.runtime_address = 0;
  EXPECT_FALSE(MakeBpfPythonProc(config).has_value());
  config = ConfigOf(*layout);
  config.layout.interp_threads_head = 70000;  // does not fit 16 bits
  EXPECT_FALSE(MakeBpfPythonProc(config).has_value());
  config = ConfigOf(*layout);
  config.layout.frame_previous = 200;  // past the header the BPF program copies
  EXPECT_FALSE(MakeBpfPythonProc(config).has_value());
  config = ConfigOf(*layout);
  config.layout.tstate_next = kNoOffset;  // required
  EXPECT_FALSE(MakeBpfPythonProc(config).has_value());
}

TEST(BpfProcConfigTest, RawFrameOfCarriesTheEntryFlag) {
  RawFrame raw = RawFrameOf(
      {.code = 0x10, .position = 0x20, .flags = EMBER_PYTHON_FRAME_ENTRY, .reserved = 0});
  EXPECT_EQ(raw.code_address, 0x10u);
  EXPECT_EQ(raw.last_instruction, 0x20u);
  EXPECT_TRUE(raw.entry);
  EXPECT_FALSE(RawFrameOf({.code = 0x10, .position = 0x20, .flags = 0, .reserved = 0}).entry);
}

}  // namespace
}  // namespace ember::python
