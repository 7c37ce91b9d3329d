// The code cache's statics, segment map walk and blob decoding over synthetic JDK 17 and JDK 25
// code caches, and their refusals of a VM still starting and of hostile images.
#include "runtimes/hotspot/code_cache.h"

#include <gtest/gtest.h>

#include "step_fake_jvm.h"

namespace ember::hotspot {
namespace {

using step_test::FakeJvm;
using step_test::Jdk;

class CodeCacheTest : public ::testing::TestWithParam<Jdk> {
 protected:
  FakeJvm jvm{GetParam()};
};

TEST_P(CodeCacheTest, ReadsHeapsInterpreterAndCallStub) {
  CodeCacheInfo info;
  ASSERT_EQ(ReadCodeCacheInfo(jvm.layout, FakeJvm::kBias, jvm.memory, &info),
            CodeCacheStatus::kReady);
  ASSERT_EQ(info.heap_count, 1u);
  EXPECT_EQ(info.heaps[0].low, FakeJvm::kHeapLow);
  EXPECT_EQ(info.heaps[0].high, FakeJvm::kHeapLow + FakeJvm::kHeapBytes);
  EXPECT_EQ(info.heaps[0].segmap_low, FakeJvm::kSegmap);
  EXPECT_EQ(info.heaps[0].log2_segment_size, FakeJvm::kLog2Segment);
  EXPECT_EQ(info.interpreter_low, jvm.interpreter.code_begin);
  EXPECT_EQ(info.interpreter_high, jvm.interpreter.code_end);
  EXPECT_EQ(info.call_stub_return_address, jvm.call_stub_return);
  EXPECT_EQ(info.low_bound, FakeJvm::kHeapLow);
  EXPECT_TRUE(info.Contains(jvm.nmethod.code_begin));
  EXPECT_FALSE(info.Contains(FakeJvm::kHeapLow + FakeJvm::kHeapBytes));
}

TEST_P(CodeCacheTest, VmStillStartingIsNotReady) {
  CodeCacheInfo info;
  jvm.memory.Put<uint64_t>(FakeJvm::kBias + FakeJvm::kHeapsStatic, 0);
  EXPECT_EQ(ReadCodeCacheInfo(jvm.layout, FakeJvm::kBias, jvm.memory, &info),
            CodeCacheStatus::kNotReady);

  FakeJvm no_heaps(GetParam());
  no_heaps.memory.Put<int32_t>(FakeJvm::kArray, 0);
  EXPECT_EQ(ReadCodeCacheInfo(no_heaps.layout, FakeJvm::kBias, no_heaps.memory, &info),
            CodeCacheStatus::kNotReady);

  FakeJvm no_interpreter(GetParam());
  no_interpreter.memory.Put<uint64_t>(FakeJvm::kBias + FakeJvm::kInterpreterStatic, 0);
  EXPECT_EQ(ReadCodeCacheInfo(no_interpreter.layout, FakeJvm::kBias, no_interpreter.memory, &info),
            CodeCacheStatus::kNotReady);

  FakeJvm no_call_stub(GetParam());
  no_call_stub.memory.Put<uint64_t>(FakeJvm::kBias + FakeJvm::kCallStubStatic, 0);
  EXPECT_EQ(ReadCodeCacheInfo(no_call_stub.layout, FakeJvm::kBias, no_call_stub.memory, &info),
            CodeCacheStatus::kNotReady);
}

TEST_P(CodeCacheTest, RefusesHostileStatics) {
  CodeCacheInfo info;
  {
    FakeJvm many(GetParam());
    many.memory.Put<int32_t>(FakeJvm::kArray, 1000);
    EXPECT_EQ(ReadCodeCacheInfo(many.layout, FakeJvm::kBias, many.memory, &info),
              CodeCacheStatus::kInsane);
  }
  {
    FakeJvm segment(GetParam());
    segment.memory.Put<int32_t>(FakeJvm::kHeap + 240, 40);
    EXPECT_EQ(ReadCodeCacheInfo(segment.layout, FakeJvm::kBias, segment.memory, &info),
              CodeCacheStatus::kInsane);
  }
  {
    // A heap whose end lies below its start.
    FakeJvm inverted(GetParam());
    inverted.memory.Put<uint64_t>(FakeJvm::kHeap + 8 + 8, FakeJvm::kHeapLow - 1);
    EXPECT_EQ(ReadCodeCacheInfo(inverted.layout, FakeJvm::kBias, inverted.memory, &info),
              CodeCacheStatus::kInsane);
  }
  {
    // A segment map too small for the heap it maps.
    FakeJvm small(GetParam());
    small.memory.Put<uint64_t>(FakeJvm::kHeap + 120 + 24, FakeJvm::kSegmap + 10);
    EXPECT_EQ(ReadCodeCacheInfo(small.layout, FakeJvm::kBias, small.memory, &info),
              CodeCacheStatus::kInsane);
  }
  {
    FakeJvm unmapped(GetParam());
    unmapped.memory.Unmap(FakeJvm::kArray);
    EXPECT_EQ(ReadCodeCacheInfo(unmapped.layout, FakeJvm::kBias, unmapped.memory, &info),
              CodeCacheStatus::kUnreadable);
  }
  {
    FakeJvm missing(GetParam());
    missing.layout.code_heap_log2_segment_size = Field{};
    EXPECT_EQ(ReadCodeCacheInfo(missing.layout, FakeJvm::kBias, missing.memory, &info),
              CodeCacheStatus::kBadLayout);
  }
}

TEST_P(CodeCacheTest, FindsEachBlobThroughTheSegmentMap) {
  CodeCache cache(jvm.layout, jvm.ReadInfo());
  BlobInfo blob;
  // The last instruction of the large nmethod: its segment is hops away from the block start.
  const uint64_t pc = jvm.nmethod.code_end - 1;
  ASSERT_GT((pc - FakeJvm::kHeapLow) >> FakeJvm::kLog2Segment, FakeJvm::kNmethodSeg + 2 * 254);
  ASSERT_EQ(cache.FindBlob(pc, jvm.memory, &blob), BlobLookup::kFound);
  EXPECT_EQ(blob.address, jvm.nmethod.address);
  EXPECT_EQ(blob.code_begin, jvm.nmethod.code_begin);
  EXPECT_EQ(blob.code_end, jvm.nmethod.code_end);
  EXPECT_EQ(blob.kind, BlobKind::kNmethod);
  EXPECT_EQ(blob.frame_size, FakeJvm::kNmethodFrameWords * 8);
  EXPECT_EQ(blob.frame_complete_offset, static_cast<int32_t>(FakeJvm::kFrameComplete));
  EXPECT_EQ(blob.compile_id, FakeJvm::kCompileId);
  EXPECT_EQ(blob.orig_pc_offset, static_cast<int32_t>(FakeJvm::kOrigPcOffset));
  EXPECT_EQ(blob.deopt_handler, jvm.nmethod.code_begin + FakeJvm::kDeoptHandler);

  ASSERT_EQ(cache.FindBlob(jvm.wrapper.code_begin, jvm.memory, &blob), BlobLookup::kFound);
  EXPECT_EQ(blob.kind, BlobKind::kNativeWrapper);
  EXPECT_EQ(blob.compile_id, FakeJvm::kCompileId + 1);
  ASSERT_EQ(cache.FindBlob(jvm.vtable.code_begin + 3, jvm.memory, &blob), BlobLookup::kFound);
  EXPECT_EQ(blob.kind, BlobKind::kVtable);
  ASSERT_EQ(cache.FindBlob(jvm.runtime_stub.code_begin, jvm.memory, &blob), BlobLookup::kFound);
  EXPECT_EQ(blob.kind, BlobKind::kStub);
  EXPECT_EQ(blob.frame_size, FakeJvm::kRuntimeStubFrameWords * 8);
  ASSERT_EQ(cache.FindBlob(jvm.call_stub_return, jvm.memory, &blob), BlobLookup::kFound);
  EXPECT_EQ(blob.address, jvm.call_stub.address);
  EXPECT_EQ(blob.kind, BlobKind::kStub);
  EXPECT_EQ(blob.frame_size, 0u);
  ASSERT_EQ(cache.FindBlob(jvm.interpreter.code_begin, jvm.memory, &blob), BlobLookup::kFound);
  // JDK 25's _kind says Buffer for the interpreter; the interpreter range names it instead.
  EXPECT_EQ(blob.kind, GetParam() == Jdk::k17 ? BlobKind::kInterpreter : BlobKind::kStub);
}

TEST_P(CodeCacheTest, FindsBlobsInPartsCommittedAfterTheRead) {
  // When read, only the first 32 segments (and their map bytes) were committed.
  jvm.memory.Put<uint64_t>(FakeJvm::kHeap + 8 + 24,
                           FakeJvm::kHeapLow + (32 << FakeJvm::kLog2Segment));
  jvm.memory.Put<uint64_t>(FakeJvm::kHeap + 120 + 24, FakeJvm::kSegmap + 32);
  const CodeCacheInfo info = jvm.ReadInfo();
  EXPECT_EQ(info.heaps[0].high, FakeJvm::kHeapLow + (32 << FakeJvm::kLog2Segment));
  EXPECT_TRUE(info.Contains(jvm.nmethod.code_end - 1));
  CodeCache cache(jvm.layout, info);
  BlobInfo blob;
  ASSERT_EQ(cache.FindBlob(jvm.nmethod.code_end - 1, jvm.memory, &blob), BlobLookup::kFound);
  EXPECT_EQ(blob.address, jvm.nmethod.address);
  EXPECT_FALSE(info.Contains(FakeJvm::kHeapLow + FakeJvm::kHeapBytes));
}

TEST_P(CodeCacheTest, NamesAndFrameSizesOfRealStubs) {
  // JDK 17's "native signature handlers" buffer blob is no JNI wrapper, whatever its first bytes.
  const uint64_t name = FakeJvm::kBias + FakeJvm::kNames + 0x800;
  jvm.memory.PutString(name, "native signature handlers");
  jvm.SetField(jvm.runtime_stub.address, jvm.layout.blob_name, static_cast<int64_t>(name));
  if (jvm.layout.blob_kind.present())
    jvm.SetField(jvm.runtime_stub.address, jvm.layout.blob_kind, 2);
  // C1's runtime stubs without a frame of their own have frame size -1.
  jvm.SetField(jvm.runtime_stub.address, jvm.layout.blob_frame_size, -1);
  CodeCache cache(jvm.layout, jvm.ReadInfo());
  BlobInfo blob;
  ASSERT_EQ(cache.FindBlob(jvm.runtime_stub.code_begin, jvm.memory, &blob), BlobLookup::kFound);
  EXPECT_EQ(blob.kind, BlobKind::kStub);
  EXPECT_EQ(blob.frame_size, 0u);
  // A JNI wrapper's name only matches as a whole.
  jvm.memory.PutString(name, "native nmethod");
  if (jvm.layout.blob_kind.present())
    jvm.SetField(jvm.runtime_stub.address, jvm.layout.blob_kind, 1);
  cache.NextGeneration();
  ASSERT_EQ(cache.FindBlob(jvm.runtime_stub.code_begin, jvm.memory, &blob), BlobLookup::kFound);
  EXPECT_EQ(blob.kind, BlobKind::kNativeWrapper);
}

TEST_P(CodeCacheTest, FullBlobCacheDropsItsOlderHalf) {
  // More one-segment stubs past the fixed blobs than the cache holds.
  std::vector<step_test::FakeBlob> stubs;
  for (uint64_t i = 0; i < CodeCache::kCachedBlobs + 1; ++i) {
    stubs.push_back(jvm.PutBlob(FakeJvm::kEndSeg + 2 * i, 2, "stub", 6, 0, -1));
  }
  CodeCache cache(jvm.layout, jvm.ReadInfo());
  BlobInfo blob;
  // Inserted from the highest address down, so age and address order differ.
  for (size_t i = stubs.size(); i-- > 0;) {
    ASSERT_EQ(cache.FindBlob(stubs[i].code_begin, jvm.memory, &blob), BlobLookup::kFound);
    EXPECT_EQ(blob.address, stubs[i].address);
  }
  EXPECT_EQ(cache.cached_blobs(), CodeCache::kCachedBlobs / 2 + 1);
  // The newest half is still there; the oldest was dropped.
  const int reads = jvm.memory.reads;
  for (size_t i = 0; i <= CodeCache::kCachedBlobs / 2; ++i) {
    ASSERT_EQ(cache.FindBlob(stubs[i].code_begin, jvm.memory, &blob), BlobLookup::kFound);
    EXPECT_EQ(blob.address, stubs[i].address);
  }
  EXPECT_EQ(jvm.memory.reads, reads);
  ASSERT_EQ(cache.FindBlob(stubs.back().code_begin, jvm.memory, &blob), BlobLookup::kFound);
  EXPECT_GT(jvm.memory.reads, reads);
}

TEST_P(CodeCacheTest, KnownBlobCostsNoReadUntilTheNextGeneration) {
  CodeCache cache(jvm.layout, jvm.ReadInfo());
  BlobInfo blob;
  ASSERT_EQ(cache.FindBlob(jvm.nmethod.code_begin + 8, jvm.memory, &blob), BlobLookup::kFound);
  const int reads = jvm.memory.reads;
  ASSERT_EQ(cache.FindBlob(jvm.nmethod.code_begin + 100, jvm.memory, &blob), BlobLookup::kFound);
  EXPECT_EQ(jvm.memory.reads, reads);
  EXPECT_EQ(blob.address, jvm.nmethod.address);
  // Another blob next to it is looked up, not taken from the neighbour's entry.
  ASSERT_EQ(cache.FindBlob(jvm.wrapper.code_begin, jvm.memory, &blob), BlobLookup::kFound);
  EXPECT_EQ(blob.address, jvm.wrapper.address);
  EXPECT_GT(jvm.memory.reads, reads);

  // The blob is freed and its memory reused: the next generation sees the new one.
  jvm.SetField(jvm.nmethod.address, jvm.layout.nmethod_compile_id, 99);
  cache.NextGeneration();
  EXPECT_EQ(cache.cached_blobs(), 0u);
  ASSERT_EQ(cache.FindBlob(jvm.nmethod.code_begin + 100, jvm.memory, &blob), BlobLookup::kFound);
  EXPECT_EQ(blob.compile_id, 99);
}

TEST_P(CodeCacheTest, UnreadableLookupsFallBackToThePreviousGenerationsBlobs) {
  CodeCache cache(jvm.layout, jvm.ReadInfo());
  BlobInfo blob;
  ASSERT_EQ(cache.FindBlob(jvm.nmethod.code_begin + 8, jvm.memory, &blob), BlobLookup::kFound);
  cache.NextGeneration();
  // Readable memory is believed: a segment freed since is no blob.
  const uint8_t first = 0;
  jvm.memory.Put<uint8_t>(FakeJvm::kSegmap + FakeJvm::kNmethodSeg, 0xFF);
  EXPECT_EQ(cache.FindBlob(jvm.nmethod.code_begin + 8, jvm.memory, &blob),
            BlobLookup::kFreeSegment);
  jvm.memory.Put<uint8_t>(FakeJvm::kSegmap + FakeJvm::kNmethodSeg, first);
  EXPECT_EQ(cache.previous_generation_hits(), 0u);
  // The process is gone: its samples still walked find the blob seen a generation before, and
  // only that one.
  jvm.memory.Unmap(FakeJvm::kSegmap);
  ASSERT_EQ(cache.FindBlob(jvm.nmethod.code_begin + 100, jvm.memory, &blob), BlobLookup::kFound);
  EXPECT_EQ(blob.address, jvm.nmethod.address);
  EXPECT_EQ(blob.compile_id, FakeJvm::kCompileId);
  EXPECT_EQ(cache.previous_generation_hits(), 1u);
  EXPECT_EQ(cache.FindBlob(jvm.wrapper.code_begin, jvm.memory, &blob),
            BlobLookup::kSegmapUnreadable);
  // Two generations on, nothing is left to fall back to.
  cache.NextGeneration();
  cache.NextGeneration();
  EXPECT_EQ(cache.FindBlob(jvm.nmethod.code_begin + 100, jvm.memory, &blob),
            BlobLookup::kSegmapUnreadable);
  EXPECT_EQ(cache.previous_generation_hits(), 1u);
}

TEST_P(CodeCacheTest, FreeAndUnmappedSegments) {
  CodeCache cache(jvm.layout, jvm.ReadInfo());
  BlobInfo blob;
  const uint64_t free_pc = FakeJvm::kHeapLow + ((FakeJvm::kEndSeg + 3) << FakeJvm::kLog2Segment);
  EXPECT_EQ(cache.FindBlob(free_pc, jvm.memory, &blob), BlobLookup::kFreeSegment);
  EXPECT_EQ(cache.FindBlob(FakeJvm::kHeapLow - 1, jvm.memory, &blob), BlobLookup::kNotInHeap);
  // A free segment inside a blob: a hop lands on it.
  jvm.memory.Put<uint8_t>(FakeJvm::kSegmap + FakeJvm::kNmethodSeg + 254, 0xFF);
  EXPECT_EQ(cache.FindBlob(jvm.nmethod.code_end - 1, jvm.memory, &blob), BlobLookup::kFreeSegment);
  jvm.memory.Unmap(FakeJvm::kSegmap);
  EXPECT_EQ(cache.FindBlob(jvm.wrapper.code_begin, jvm.memory, &blob),
            BlobLookup::kSegmapUnreadable);
}

TEST_P(CodeCacheTest, HostileSegmentMapsStop) {
  CodeCache cache(jvm.layout, jvm.ReadInfo());
  BlobInfo blob;
  // Hops of one segment each: more hops than allowed.
  std::vector<uint8_t> ones(FakeJvm::kNmethodSegs, 1);
  jvm.memory.PutBytes(FakeJvm::kSegmap + FakeJvm::kNmethodSeg, ones.data(), ones.size());
  EXPECT_EQ(cache.FindBlob(jvm.nmethod.code_end - 1, jvm.memory, &blob), BlobLookup::kHopLimit);
  // A hop out of the map's start.
  jvm.memory.Put<uint8_t>(FakeJvm::kSegmap + 2, 200);
  EXPECT_EQ(cache.FindBlob(FakeJvm::kHeapLow + (2 << FakeJvm::kLog2Segment), jvm.memory, &blob),
            BlobLookup::kHopLimit);
}

TEST_P(CodeCacheTest, HostileBlobsAreRefused) {
  BlobInfo blob;
  const uint64_t pc = jvm.nmethod.code_begin + 0x40;
  auto find = [&] {
    CodeCache cache(jvm.layout, jvm.ReadInfo());
    return cache.FindBlob(pc, jvm.memory, &blob);
  };
  ASSERT_EQ(find(), BlobLookup::kFound);
  const uint64_t b = jvm.nmethod.address;
  const bool offsets = jvm.layout.code_as_offsets;
  // Huge frame size.
  jvm.SetField(b, jvm.layout.blob_frame_size, 1 << 24);
  EXPECT_EQ(find(), BlobLookup::kBadBlob);
  jvm.SetField(b, jvm.layout.blob_frame_size, -2);
  EXPECT_EQ(find(), BlobLookup::kBadBlob);
  jvm.SetField(b, jvm.layout.blob_frame_size, FakeJvm::kNmethodFrameWords);
  ASSERT_EQ(find(), BlobLookup::kFound);
  // Code that starts outside the blob.
  jvm.SetField(b, jvm.layout.blob_code_begin, offsets ? -64 : static_cast<int64_t>(b - 64));
  EXPECT_EQ(find(), BlobLookup::kBadBlob);
  jvm.SetField(b, jvm.layout.blob_code_begin,
               static_cast<int64_t>(offsets ? jvm.nmethod.code_begin - b : jvm.nmethod.code_begin));
  ASSERT_EQ(find(), BlobLookup::kFound);
  // Code that ends past the blob's size.
  jvm.SetField(b, jvm.layout.blob_size, 0x100);
  EXPECT_EQ(find(), BlobLookup::kBadBlob);
  jvm.SetField(b, jvm.layout.blob_size, 0);
  EXPECT_EQ(find(), BlobLookup::kBadBlob);
  jvm.SetField(b, jvm.layout.blob_size, static_cast<int64_t>(jvm.nmethod.code_end - b + 64));
  ASSERT_EQ(find(), BlobLookup::kFound);
  // A pc past the code (in the blob's data).
  CodeCache cache(jvm.layout, jvm.ReadInfo());
  EXPECT_EQ(cache.FindBlob(jvm.nmethod.code_end + 8, jvm.memory, &blob), BlobLookup::kBadBlob);
  // A name that cannot be read, where the kind comes from the name.
  jvm.SetField(b, jvm.layout.blob_name, 0x10);
  EXPECT_EQ(find(), GetParam() == Jdk::k17 ? BlobLookup::kBlobUnreadable : BlobLookup::kFound);
}

INSTANTIATE_TEST_SUITE_P(Jdks, CodeCacheTest, ::testing::Values(Jdk::k17, Jdk::k25),
                         [](const auto& info) {
                           return info.param == Jdk::k17 ? "Jdk17" : "Jdk25";
                         });

}  // namespace
}  // namespace ember::hotspot
