// A HotSpot JVM's code cache as one process holds it: where its code heaps, the interpreter and
// the call stub lie (read from the VM's statics), and the code blob that holds a pc (the JVM's
// own segment map walk), decoded into the few facts the frame step needs.
#pragma once

#include <array>
#include <cstdint>

#include "runtimes/hotspot/hotspot_layout.h"
#include "runtimes/process_memory.h"

namespace ember::hotspot {

// HotSpot makes at most three heaps (non-nmethods, profiled, non-profiled nmethods).
inline constexpr uint32_t kMaxCodeHeaps = 4;
// Bounds that keep a corrupt or hostile image from steering the reads.
inline constexpr uint64_t kMaxCodeHeapBytes = uint64_t{4} << 30;  // ReservedCodeCacheSize <= 2G
inline constexpr uint32_t kMinLog2SegmentSize = 4;
inline constexpr uint32_t kMaxLog2SegmentSize = 16;
// Segment map hops: current JDKs cap a hop at 0xFE segments, so 64 hops reach a blob of at least
// 16256 segments (1 MiB with 64-byte segments), far past any real nmethod.
inline constexpr int kMaxSegmapHops = 64;
// One read of a blob's header covers every field the step reads (352 bytes in JDK 17).
inline constexpr uint32_t kMaxBlobHeaderBytes = 512;
// A frame larger than this is taken for a corrupt blob.
inline constexpr uint32_t kMaxFrameBytes = 256 * 1024;

enum class CodeCacheStatus : uint8_t {
  kReady,
  kNotReady,    // CodeCache::_heaps, the interpreter or the call stub is still null: retry later
  kUnreadable,  // a read of the statics or the heaps failed
  kBadLayout,   // the layout lacks a field this needs
  kInsane,      // values out of bounds (heap count, ranges, segment size)
};
const char* CodeCacheStatusName(CodeCacheStatus status);

// A heap grows by committing more of its reserved range (and of its segment map's) while the VM
// runs, so lookups use the reserved ranges: the facts stay true until the VM exits, and a pc in a
// part committed later is found without reading the statics again.
struct CodeHeapRange {
  uint64_t low = 0;                   // VirtualSpace _low_boundary: segment 0 starts here
  uint64_t high = 0;                  // _high: the committed end when read
  uint64_t reserved_high = 0;         // _high_boundary: no code lies above it
  uint64_t segmap_low = 0;            // the segment map's first byte
  uint64_t segmap_high = 0;           // its committed end when read
  uint64_t segmap_reserved_high = 0;  // its reserved end
  uint32_t log2_segment_size = 0;
};

// The per-process facts, plain data (a BPF map entry can be made from it).
struct CodeCacheInfo {
  std::array<CodeHeapRange, kMaxCodeHeaps> heaps{};
  uint32_t heap_count = 0;
  uint64_t low_bound = 0;  // CodeCache::_low_bound .. _high_bound
  uint64_t high_bound = 0;
  uint64_t interpreter_low = 0;  // StubQueue _stub_buffer .. + _buffer_limit
  uint64_t interpreter_high = 0;
  uint64_t call_stub_return_address = 0;

  bool InInterpreter(uint64_t pc) const { return pc >= interpreter_low && pc < interpreter_high; }
  const CodeHeapRange* HeapOf(uint64_t pc) const;
  // Whether `pc` can be code of this cache: in a heap or in the interpreter.
  bool Contains(uint64_t pc) const { return InInterpreter(pc) || HeapOf(pc) != nullptr; }
};

// Reads the statics of a process whose libjvm is loaded with `libjvm_bias` (process address =
// ELF address + bias).
CodeCacheStatus ReadCodeCacheInfo(const HotSpotLayout& layout, uint64_t libjvm_bias,
                                  MemoryReader& memory, CodeCacheInfo* out);

enum class BlobKind : uint8_t {
  kNmethod,        // compiled Java method
  kNativeWrapper,  // "native nmethod": a compiled JNI wrapper
  kInterpreter,
  kVtable,  // vtable/itable chunks: only the return address is on the stack
  kStub,    // everything else: StubRoutines (the call stub too), runtime stubs, adapters
};
const char* BlobKindName(BlobKind kind);

struct BlobInfo {
  uint64_t address = 0;  // the CodeBlob
  uint64_t code_begin = 0;
  uint64_t code_end = 0;
  uint64_t name = 0;        // the const char* _name
  uint32_t frame_size = 0;  // bytes
  // From code_begin; negative when the blob has none (stubs), which means "always complete".
  int32_t frame_complete_offset = -1;
  BlobKind kind = BlobKind::kStub;
  // nmethods only (0 otherwise).
  int32_t compile_id = 0;
  int32_t orig_pc_offset = 0;
  uint64_t deopt_handler = 0;  // absolute address, 0 when unknown
  bool Contains(uint64_t pc) const { return pc >= code_begin && pc < code_end; }
};

enum class BlobLookup : uint8_t {
  kFound,
  kNotInHeap,         // the pc is in no code heap
  kFreeSegment,       // the segment map says 0xFF: no blob there
  kSegmapUnreadable,  // reading the segment map failed
  kHopLimit,          // more hops than kMaxSegmapHops, or a walk out of the map
  kBlobUnreadable,    // reading the blob failed
  kBadBlob,           // its fields fail the sanity checks, or the pc is outside its code
};
const char* BlobLookupName(BlobLookup lookup);

// One process's code cache and a small cache of decoded blobs. The blob cache is keyed by code
// range and dropped whole by NextGeneration (its older half when it fills): HotSpot frees and
// reuses blobs, so an entry is trusted for one generation only. Not thread-safe.
class CodeCache {
 public:
  // The layout must outlive this.
  CodeCache(const HotSpotLayout& layout, const CodeCacheInfo& info);

  const CodeCacheInfo& info() const { return info_; }
  const HotSpotLayout& layout() const { return layout_; }

  // The blob whose code holds `pc`. A pc in a cached blob costs no read; otherwise one read of
  // segment map bytes per window of hops, one of the blob's header and one of its name's first
  // bytes (only when the layout has no _kind, or for nmethods).
  BlobLookup FindBlob(uint64_t pc, MemoryReader& memory, BlobInfo* out);

  // Decodes the blob at `blob` (no cache); `pc` must lie in its code.
  BlobLookup DecodeBlob(uint64_t blob, uint64_t pc, MemoryReader& memory, BlobInfo* out) const;

  // Starts a generation: the blobs cached so far are kept only as the fallback of lookups whose
  // reads fail. A process that has exited can no longer be read, yet the samples it took before
  // it exited are walked after it: the blobs seen in the generation before are the best knowledge
  // left of its code. A lookup that reads (a freed segment, another blob) never uses them.
  void NextGeneration();
  uint32_t cached_blobs() const { return cached_; }
  // Lookups answered from the previous generation's blobs because reading failed.
  uint64_t previous_generation_hits() const { return previous_generation_hits_; }

  static constexpr uint32_t kCachedBlobs = 256;

 private:
  BlobLookup FindBlobStart(const CodeHeapRange& heap, uint64_t pc, MemoryReader& memory,
                           uint64_t* block) const;
  BlobLookup FindUncached(uint64_t pc, MemoryReader& memory, BlobInfo* out);
  static const BlobInfo* CacheLookup(const std::array<BlobInfo, kCachedBlobs>& cache,
                                     uint32_t count, uint64_t pc);
  void CacheInsert(const BlobInfo& blob);

  const HotSpotLayout& layout_;
  CodeCacheInfo info_;
  uint32_t header_bytes_ = 0;      // how much of a blob to read: every field used, bounded
  uint32_t min_header_bytes_ = 0;  // the CodeBlob fields alone
  // Sorted by address; blobs never overlap.
  std::array<BlobInfo, kCachedBlobs> cache_{};
  std::array<uint64_t, kCachedBlobs> stamps_{};  // when each entry was inserted, by cache_ index
  uint64_t next_stamp_ = 0;
  uint32_t cached_ = 0;
  std::array<BlobInfo, kCachedBlobs> previous_{};
  uint32_t previous_count_ = 0;
  uint64_t previous_generation_hits_ = 0;
};

}  // namespace ember::hotspot
