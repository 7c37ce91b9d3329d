// Decoding ring-buffer records never trusts the sizes a record claims.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "sampler/sample_record_layout.h"

namespace ember {
namespace {

std::vector<uint8_t> Record(uint16_t kernel, uint16_t user, size_t extra_bytes = 0) {
  std::vector<uint8_t> bytes(sizeof(ember_sample) + (kernel + user) * 8 + extra_bytes);
  ember_sample header{};
  header.version = EMBER_RECORD_VERSION;
  header.kind = EMBER_RECORD_SAMPLE;
  header.kernel_depth = kernel;
  header.user_depth = user;
  std::memcpy(bytes.data(), &header, sizeof(header));
  for (size_t i = 0; i < kernel + user; ++i) {
    uint64_t ip = 0x1000 + i;
    std::memcpy(bytes.data() + sizeof(header) + i * 8, &ip, 8);
  }
  return bytes;
}

TEST(SampleRecordTest, SplitsKernelAndUserAddresses) {
  std::vector<uint8_t> bytes = Record(2, 3);
  SampleView view;
  ASSERT_EQ(DecodeSample(bytes.data(), bytes.size(), &view), DecodeResult::kOk);
  ASSERT_EQ(view.kernel_ips.size(), 2u);
  ASSERT_EQ(view.user_ips.size(), 3u);
  EXPECT_EQ(view.kernel_ips[1], 0x1001u);
  EXPECT_EQ(view.user_ips[0], 0x1002u);
}

TEST(SampleRecordTest, RejectsShortWrongVersionAndOverlongRecords) {
  SampleView view;
  std::vector<uint8_t> bytes = Record(2, 3);
  EXPECT_EQ(DecodeSample(bytes.data(), 10, &view), DecodeResult::kTooShort);
  EXPECT_EQ(DecodeSample(bytes.data(), bytes.size() - 1, &view), DecodeResult::kBadLength);
  bytes[0] = 99;
  EXPECT_EQ(DecodeSample(bytes.data(), bytes.size(), &view), DecodeResult::kBadVersion);
  bytes = Record(200, 0);
  EXPECT_EQ(DecodeSample(bytes.data(), bytes.size(), &view), DecodeResult::kBadLength);
  bytes = Record(0, 0);
  bytes[2] = 7;  // kind
  EXPECT_EQ(DecodeSample(bytes.data(), bytes.size(), &view), DecodeResult::kBadKind);
}

// A record with `kernel` + `user` addresses, then `snapshot` snapshot bytes (0xa0, 0xa1, ...),
// with user registers when `flags` says so.
std::vector<uint8_t> RecordWithSnapshot(uint16_t kernel, uint16_t user, uint32_t snapshot,
                                        uint32_t flags) {
  std::vector<uint8_t> bytes = Record(kernel, user, snapshot);
  ember_sample header;
  std::memcpy(&header, bytes.data(), sizeof(header));
  header.flags = flags;
  header.user_snapshot_bytes = snapshot;
  for (int i = 0; i < EMBER_USER_REG_COUNT; ++i) {
    header.user_regs[i] = (flags & EMBER_SAMPLE_USER_REGS) ? 0x7000 + i : 0;
  }
  std::memcpy(bytes.data(), &header, sizeof(header));
  const size_t snapshot_at = sizeof(ember_sample) + (kernel + user) * 8;
  for (uint32_t i = 0; i < snapshot; ++i) bytes[snapshot_at + i] = static_cast<uint8_t>(0xa0 + i);
  return bytes;
}

TEST(SampleRecordTest, ViewsRegistersAndTheSnapshotAfterTheAddresses) {
  std::vector<uint8_t> bytes =
      RecordWithSnapshot(2, 3, 21, EMBER_SAMPLE_USER_REGS | EMBER_SAMPLE_SNAPSHOT_CLAMPED);
  SampleView view;
  ASSERT_EQ(DecodeSample(bytes.data(), bytes.size(), &view), DecodeResult::kOk);
  EXPECT_EQ(view.kernel_ips.size(), 2u);
  ASSERT_EQ(view.user_ips.size(), 3u);
  EXPECT_EQ(view.user_ips[2], 0x1004u);

  ASSERT_EQ(view.user_regs.size(), size_t{EMBER_USER_REG_COUNT});
  EXPECT_EQ(view.user_regs[0], 0x7000u);
  EXPECT_EQ(view.user_regs[EMBER_USER_REG_SP], 0x7000u + EMBER_USER_REG_SP);
  EXPECT_EQ(view.user_regs[EMBER_USER_REG_IP], 0x7000u + EMBER_USER_REG_IP);

  ASSERT_EQ(view.user_stack.size(), 21u);
  EXPECT_EQ(view.user_stack.data(), bytes.data() + sizeof(ember_sample) + 5 * 8);
  EXPECT_EQ(view.user_stack.front(), 0xa0);
  EXPECT_EQ(view.user_stack.back(), 0xa0 + 20);
  EXPECT_EQ(view.user_stack.data() + view.user_stack.size(), bytes.data() + bytes.size());
  EXPECT_TRUE(view.header->flags & EMBER_SAMPLE_SNAPSHOT_CLAMPED);
}

TEST(SampleRecordTest, RegistersWithoutASnapshotGiveAnEmptyStack) {
  std::vector<uint8_t> bytes = RecordWithSnapshot(0, 4, 0, EMBER_SAMPLE_USER_REGS);
  SampleView view;
  ASSERT_EQ(DecodeSample(bytes.data(), bytes.size(), &view), DecodeResult::kOk);
  EXPECT_EQ(view.user_regs.size(), size_t{EMBER_USER_REG_COUNT});
  EXPECT_TRUE(view.user_stack.empty());
  EXPECT_EQ(view.user_ips.size(), 4u);
}

TEST(SampleRecordTest, RejectsASnapshotLongerThanTheRecord) {
  SampleView view;
  std::vector<uint8_t> bytes = RecordWithSnapshot(1, 1, 64, EMBER_SAMPLE_USER_REGS);
  EXPECT_EQ(DecodeSample(bytes.data(), bytes.size() - 1, &view), DecodeResult::kBadLength);
  for (uint32_t claimed : {65u, EMBER_MAX_SNAPSHOT_BYTES + 1u, 0xffffffffu}) {
    ember_sample header;
    std::memcpy(&header, bytes.data(), sizeof(header));
    header.user_snapshot_bytes = claimed;
    std::memcpy(bytes.data(), &header, sizeof(header));
    EXPECT_EQ(DecodeSample(bytes.data(), bytes.size(), &view), DecodeResult::kBadLength) << claimed;
  }
}

// Kernel threads have no user registers: no registers and no stack, whatever else the record
// holds, even in a view that held another record's.
TEST(SampleRecordTest, WithoutTheRegistersFlagThereAreNoRegistersAndNoStack) {
  SampleView view;
  std::vector<uint8_t> with = RecordWithSnapshot(1, 1, 16, EMBER_SAMPLE_USER_REGS);
  ASSERT_EQ(DecodeSample(with.data(), with.size(), &view), DecodeResult::kOk);
  ASSERT_FALSE(view.user_stack.empty());

  std::vector<uint8_t> without = RecordWithSnapshot(1, 1, 16, 0);
  ASSERT_EQ(DecodeSample(without.data(), without.size(), &view), DecodeResult::kOk);
  EXPECT_TRUE(view.user_regs.empty());
  EXPECT_TRUE(view.user_stack.empty());
  EXPECT_EQ(view.kernel_ips.size(), 1u);
  EXPECT_EQ(view.user_ips.size(), 1u);
}

// A record with a 21-byte snapshot and `python` Python frames after it, from the next multiple
// of 8, as bpf/profiler.bpf.c writes them.
std::vector<uint8_t> RecordWithPythonFrames(uint16_t python, uint32_t snapshot = 21) {
  std::vector<uint8_t> bytes = RecordWithSnapshot(1, 0, snapshot, EMBER_SAMPLE_USER_REGS);
  const size_t at = PythonFramesOffset(1, snapshot);
  bytes.resize(at + python * sizeof(ember_python_frame), 0xee);  // padding stays garbage
  for (uint16_t i = 0; i < python; ++i) {
    ember_python_frame frame{.code = 0x5000u + i,
                             .position = 0x6000u + i,
                             .flags = i % 2 ? EMBER_PYTHON_FRAME_ENTRY : 0u,
                             .reserved = 0};
    std::memcpy(bytes.data() + at + i * sizeof(frame), &frame, sizeof(frame));
  }
  ember_sample header;
  std::memcpy(&header, bytes.data(), sizeof(header));
  header.flags |= EMBER_SAMPLE_PYTHON;
  header.python_depth = python;
  header.python_status = EMBER_PYTHON_OK;
  std::memcpy(bytes.data(), &header, sizeof(header));
  return bytes;
}

TEST(SampleRecordTest, PythonFramesFollowTheSnapshotAlignedTo8) {
  EXPECT_EQ(PythonFramesOffset(1, 21), sizeof(ember_sample) + 8 + 24);
  EXPECT_EQ(PythonFramesOffset(2, 16), sizeof(ember_sample) + 16 + 16);
  EXPECT_EQ(PythonFramesOffset(0, 0), sizeof(ember_sample));
  std::vector<uint8_t> bytes = RecordWithPythonFrames(3);
  SampleView view;
  ASSERT_EQ(DecodeSample(bytes.data(), bytes.size(), &view), DecodeResult::kOk);
  ASSERT_EQ(view.user_stack.size(), 21u);  // the snapshot is unchanged by what follows it
  EXPECT_EQ(view.user_stack.back(), 0xa0 + 20);
  ASSERT_EQ(view.python_frames.size(), 3u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(view.python_frames.data()) % 8, 0u);
  EXPECT_EQ(view.python_frames[0].code, 0x5000u);
  EXPECT_EQ(view.python_frames[2].position, 0x6002u);
  EXPECT_EQ(view.python_frames[0].flags, 0u);
  EXPECT_EQ(view.python_frames[1].flags, EMBER_PYTHON_FRAME_ENTRY);
  EXPECT_EQ(view.header->python_status, EMBER_PYTHON_OK);
}

TEST(SampleRecordTest, RecordsWithoutPythonFramesHaveAnEmptySpan) {
  SampleView view;
  std::vector<uint8_t> bytes = RecordWithPythonFrames(2);
  ASSERT_EQ(DecodeSample(bytes.data(), bytes.size(), &view), DecodeResult::kOk);
  ASSERT_EQ(view.python_frames.size(), 2u);
  bytes = Record(2, 3);  // the view held another record's frames
  ASSERT_EQ(DecodeSample(bytes.data(), bytes.size(), &view), DecodeResult::kOk);
  EXPECT_TRUE(view.python_frames.empty());
}

TEST(SampleRecordTest, RejectsPythonFramesBeyondTheRecordOrTheLimit) {
  SampleView view;
  std::vector<uint8_t> bytes = RecordWithPythonFrames(4);
  EXPECT_EQ(DecodeSample(bytes.data(), bytes.size() - 1, &view), DecodeResult::kBadLength);
  for (uint16_t claimed : {5, EMBER_MAX_PYTHON_FRAMES + 1, 0xffff}) {
    ember_sample header;
    std::memcpy(&header, bytes.data(), sizeof(header));
    header.python_depth = claimed;
    std::memcpy(bytes.data(), &header, sizeof(header));
    EXPECT_EQ(DecodeSample(bytes.data(), bytes.size(), &view), DecodeResult::kBadLength) << claimed;
  }
  bytes = RecordWithPythonFrames(EMBER_MAX_PYTHON_FRAMES, 0);
  EXPECT_EQ(DecodeSample(bytes.data(), bytes.size(), &view), DecodeResult::kOk);
  EXPECT_EQ(view.python_frames.size(), size_t{EMBER_MAX_PYTHON_FRAMES});
}

TEST(SampleRecordTest, ContextNoticesCarryTheirPidAndAreNoSample) {
  ember_context_notice notice{EMBER_RECORD_VERSION, EMBER_RECORD_CONTEXT_NOTICE, 4242};
  EXPECT_EQ(DecodeContextNotice(&notice, sizeof(notice)), 4242u);
  EXPECT_EQ(DecodeContextNotice(&notice, sizeof(notice) - 1), std::nullopt);
  EXPECT_EQ(DecodeContextNotice(&notice, sizeof(notice) + 8), std::nullopt);
  notice.version = EMBER_RECORD_VERSION - 1;
  EXPECT_EQ(DecodeContextNotice(&notice, sizeof(notice)), std::nullopt);
  // A sample is not a notice.
  std::vector<uint8_t> bytes = Record(2, 3);
  EXPECT_EQ(DecodeContextNotice(bytes.data(), bytes.size()), std::nullopt);
}

}  // namespace
}  // namespace ember
