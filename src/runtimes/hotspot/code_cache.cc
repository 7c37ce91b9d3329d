// HotSpot's code cache read through a MemoryReader: statics, segment map walk and blob decoding.
#include "runtimes/hotspot/code_cache.h"

#include <algorithm>
#include <cstring>
#include <string_view>

namespace ember::hotspot {
namespace {

// The bytes of a field from a buffer holding the struct that starts at offset 0, sign-extended
// (for ints) or zero-extended to 64 bits; false when the field is absent or outside the buffer.
bool Load(const uint8_t* buffer, size_t size, const Field& field, bool is_signed, uint64_t* out) {
  if (!field.present()) return false;
  const uint32_t width = field.width;
  if (width != 1 && width != 2 && width != 4 && width != 8) return false;
  if (field.offset > size || size - field.offset < width) return false;
  uint64_t raw = 0;
  std::memcpy(&raw, buffer + field.offset, width);  // little-endian target
  if (is_signed && width < 8) {
    const uint64_t sign = uint64_t{1} << (width * 8 - 1);
    raw = (raw ^ sign) - sign;
  }
  *out = raw;
  return true;
}

bool LoadSigned(const uint8_t* buffer, size_t size, const Field& field, int64_t* out) {
  uint64_t raw;
  if (!Load(buffer, size, field, true, &raw)) return false;
  *out = static_cast<int64_t>(raw);
  return true;
}

bool LoadUnsigned(const uint8_t* buffer, size_t size, const Field& field, uint64_t* out) {
  return Load(buffer, size, field, false, out);
}

uint32_t FieldEnd(const Field& field) { return field.present() ? field.offset + field.width : 0; }

bool ReadPointer(MemoryReader& memory, uint64_t address, uint64_t* out) {
  return memory.Read(address, out, sizeof(*out));
}

// The names HotSpot gives its blobs, with their terminating NUL.
constexpr std::string_view kNmethodName("nmethod", 8);
constexpr std::string_view kNativeWrapperName("native nmethod", 15);
constexpr std::string_view kInterpreterName("Interpreter", 12);
constexpr std::string_view kVtableName("vtable chunks", 14);

}  // namespace

const char* CodeCacheStatusName(CodeCacheStatus status) {
  switch (status) {
    case CodeCacheStatus::kReady:
      return "ready";
    case CodeCacheStatus::kNotReady:
      return "not_ready";
    case CodeCacheStatus::kUnreadable:
      return "unreadable";
    case CodeCacheStatus::kBadLayout:
      return "bad_layout";
    case CodeCacheStatus::kInsane:
      return "insane";
  }
  return "unknown";
}

const char* BlobKindName(BlobKind kind) {
  switch (kind) {
    case BlobKind::kNmethod:
      return "nmethod";
    case BlobKind::kNativeWrapper:
      return "native_wrapper";
    case BlobKind::kInterpreter:
      return "interpreter";
    case BlobKind::kVtable:
      return "vtable";
    case BlobKind::kStub:
      return "stub";
  }
  return "unknown";
}

const char* BlobLookupName(BlobLookup lookup) {
  switch (lookup) {
    case BlobLookup::kFound:
      return "found";
    case BlobLookup::kNotInHeap:
      return "not_in_heap";
    case BlobLookup::kFreeSegment:
      return "free_segment";
    case BlobLookup::kSegmapUnreadable:
      return "segmap_unreadable";
    case BlobLookup::kHopLimit:
      return "hop_limit";
    case BlobLookup::kBlobUnreadable:
      return "blob_unreadable";
    case BlobLookup::kBadBlob:
      return "bad_blob";
  }
  return "unknown";
}

const CodeHeapRange* CodeCacheInfo::HeapOf(uint64_t pc) const {
  for (uint32_t i = 0; i < heap_count && i < kMaxCodeHeaps; ++i) {
    if (pc >= heaps[i].low && pc < heaps[i].reserved_high) return &heaps[i];
  }
  return nullptr;
}

CodeCacheStatus ReadCodeCacheInfo(const HotSpotLayout& layout, uint64_t libjvm_bias,
                                  MemoryReader& memory, CodeCacheInfo* out) {
  *out = CodeCacheInfo{};
  const HotSpotLayout::Statics& statics = layout.statics;
  if (statics.code_cache_heaps == 0 || statics.interpreter_code == 0 ||
      statics.call_stub_return_address == 0 || !layout.growable_array_data.present() ||
      !layout.growable_array_len.present() || !layout.code_heap_memory.present() ||
      !layout.code_heap_segmap.present() || !layout.code_heap_log2_segment_size.present() ||
      !layout.virtual_space_low_boundary.present() ||
      !layout.virtual_space_high_boundary.present() || !layout.virtual_space_high.present() ||
      !layout.stub_queue_stub_buffer.present() || !layout.stub_queue_buffer_limit.present()) {
    return CodeCacheStatus::kBadLayout;
  }

  uint64_t heaps_array = 0;
  if (!ReadPointer(memory, statics.code_cache_heaps + libjvm_bias, &heaps_array)) {
    return CodeCacheStatus::kUnreadable;
  }
  if (heaps_array == 0) return CodeCacheStatus::kNotReady;

  uint8_t array[64];
  const uint32_t array_bytes =
      std::max(FieldEnd(layout.growable_array_data), FieldEnd(layout.growable_array_len));
  if (array_bytes > sizeof(array)) return CodeCacheStatus::kBadLayout;
  if (!memory.Read(heaps_array, array, array_bytes)) return CodeCacheStatus::kUnreadable;
  int64_t length = 0;
  uint64_t data = 0;
  if (!LoadSigned(array, array_bytes, layout.growable_array_len, &length) ||
      !LoadUnsigned(array, array_bytes, layout.growable_array_data, &data)) {
    return CodeCacheStatus::kBadLayout;
  }
  // Heaps are added one by one during CodeCache::initialize: none yet is "not ready".
  if (length == 0 || data == 0) return CodeCacheStatus::kNotReady;
  if (length < 0 || length > kMaxCodeHeaps) return CodeCacheStatus::kInsane;
  uint64_t heap_pointers[kMaxCodeHeaps];
  if (!memory.Read(data, heap_pointers, length * sizeof(uint64_t))) {
    return CodeCacheStatus::kUnreadable;
  }

  // The fields of CodeHeap read here; the VirtualSpaces are embedded in it.
  const uint32_t vs_bytes =
      std::max({FieldEnd(layout.virtual_space_low_boundary),
                FieldEnd(layout.virtual_space_high_boundary), FieldEnd(layout.virtual_space_high)});
  const uint32_t heap_bytes = std::max({layout.code_heap_memory.offset + vs_bytes,
                                        layout.code_heap_segmap.offset + vs_bytes,
                                        FieldEnd(layout.code_heap_log2_segment_size)});
  uint8_t heap[1024];
  if (heap_bytes > sizeof(heap)) return CodeCacheStatus::kBadLayout;
  for (int64_t i = 0; i < length; ++i) {
    if (heap_pointers[i] == 0) return CodeCacheStatus::kNotReady;
    if (!memory.Read(heap_pointers[i], heap, heap_bytes)) return CodeCacheStatus::kUnreadable;
    const uint8_t* memory_vs = heap + layout.code_heap_memory.offset;
    const uint8_t* segmap_vs = heap + layout.code_heap_segmap.offset;
    CodeHeapRange range;
    int64_t log2 = 0;
    if (!LoadUnsigned(memory_vs, vs_bytes, layout.virtual_space_low_boundary, &range.low) ||
        !LoadUnsigned(memory_vs, vs_bytes, layout.virtual_space_high, &range.high) ||
        !LoadUnsigned(memory_vs, vs_bytes, layout.virtual_space_high_boundary,
                      &range.reserved_high) ||
        !LoadUnsigned(segmap_vs, vs_bytes, layout.virtual_space_low_boundary, &range.segmap_low) ||
        !LoadUnsigned(segmap_vs, vs_bytes, layout.virtual_space_high, &range.segmap_high) ||
        !LoadUnsigned(segmap_vs, vs_bytes, layout.virtual_space_high_boundary,
                      &range.segmap_reserved_high) ||
        !LoadSigned(heap, heap_bytes, layout.code_heap_log2_segment_size, &log2)) {
      return CodeCacheStatus::kBadLayout;
    }
    if (log2 < kMinLog2SegmentSize || log2 > kMaxLog2SegmentSize) return CodeCacheStatus::kInsane;
    range.log2_segment_size = static_cast<uint32_t>(log2);
    if (range.low == 0 || range.reserved_high <= range.low ||
        range.reserved_high - range.low > kMaxCodeHeapBytes || range.high < range.low ||
        range.high > range.reserved_high || range.segmap_low == 0 ||
        range.segmap_high < range.segmap_low || range.segmap_high > range.segmap_reserved_high ||
        ((range.reserved_high - range.low) >> range.log2_segment_size) >
            range.segmap_reserved_high - range.segmap_low) {
      return CodeCacheStatus::kInsane;
    }
    // Every committed segment has its byte in the committed map.
    if (((range.high - range.low) >> range.log2_segment_size) >
        range.segmap_high - range.segmap_low) {
      return CodeCacheStatus::kInsane;
    }
    for (uint32_t j = 0; j < out->heap_count; ++j) {
      const CodeHeapRange& other = out->heaps[j];
      if (range.low < other.reserved_high && other.low < range.reserved_high) {
        return CodeCacheStatus::kInsane;
      }
    }
    out->heaps[out->heap_count++] = range;
  }

  if (statics.code_cache_low_bound != 0 && statics.code_cache_high_bound != 0) {
    if (!ReadPointer(memory, statics.code_cache_low_bound + libjvm_bias, &out->low_bound) ||
        !ReadPointer(memory, statics.code_cache_high_bound + libjvm_bias, &out->high_bound)) {
      return CodeCacheStatus::kUnreadable;
    }
  }

  uint64_t stub_queue = 0;
  if (!ReadPointer(memory, statics.interpreter_code + libjvm_bias, &stub_queue)) {
    return CodeCacheStatus::kUnreadable;
  }
  if (stub_queue == 0) return CodeCacheStatus::kNotReady;
  uint8_t queue[256];
  const uint32_t queue_bytes =
      std::max(FieldEnd(layout.stub_queue_stub_buffer), FieldEnd(layout.stub_queue_buffer_limit));
  if (queue_bytes > sizeof(queue)) return CodeCacheStatus::kBadLayout;
  if (!memory.Read(stub_queue, queue, queue_bytes)) return CodeCacheStatus::kUnreadable;
  uint64_t buffer = 0;
  int64_t limit = 0;
  if (!LoadUnsigned(queue, queue_bytes, layout.stub_queue_stub_buffer, &buffer) ||
      !LoadSigned(queue, queue_bytes, layout.stub_queue_buffer_limit, &limit)) {
    return CodeCacheStatus::kBadLayout;
  }
  if (buffer == 0 || limit <= 0) return CodeCacheStatus::kNotReady;
  if (static_cast<uint64_t>(limit) > kMaxCodeHeapBytes) return CodeCacheStatus::kInsane;
  out->interpreter_low = buffer;
  out->interpreter_high = buffer + static_cast<uint64_t>(limit);

  if (!ReadPointer(memory, statics.call_stub_return_address + libjvm_bias,
                   &out->call_stub_return_address)) {
    return CodeCacheStatus::kUnreadable;
  }
  if (out->call_stub_return_address == 0) return CodeCacheStatus::kNotReady;
  if (!out->Contains(out->call_stub_return_address)) return CodeCacheStatus::kInsane;
  return CodeCacheStatus::kReady;
}

CodeCache::CodeCache(const HotSpotLayout& layout, const CodeCacheInfo& info)
    : layout_(layout), info_(info) {
  const Field blob_fields[] = {layout.blob_name,       layout.blob_size,
                               layout.blob_frame_size, layout.blob_frame_complete_offset,
                               layout.blob_code_begin, layout.blob_code_end,
                               layout.blob_kind};
  for (const Field& field : blob_fields) {
    min_header_bytes_ = std::max(min_header_bytes_, FieldEnd(field));
  }
  header_bytes_ = min_header_bytes_;
  const Field nmethod_fields[] = {layout.nmethod_compile_id, layout.nmethod_orig_pc_offset,
                                  layout.nmethod_deopt_handler};
  for (const Field& field : nmethod_fields) {
    header_bytes_ = std::max(header_bytes_, FieldEnd(field));
  }
  header_bytes_ = std::min(header_bytes_, kMaxBlobHeaderBytes);
  min_header_bytes_ = std::min(min_header_bytes_, header_bytes_);
}

BlobLookup CodeCache::FindBlobStart(const CodeHeapRange& heap, uint64_t pc, MemoryReader& memory,
                                    uint64_t* block) const {
  uint64_t segment = (pc - heap.low) >> heap.log2_segment_size;
  const uint64_t segments = heap.segmap_reserved_high - heap.segmap_low;
  if (segment >= segments) return BlobLookup::kNotInHeap;
  // The map is read in windows that end at the current segment, so a walk of several short hops
  // costs one read.
  constexpr uint64_t kWindow = 1024;
  uint8_t window[kWindow];
  uint64_t window_first = 1, window_end = 0;  // empty
  for (int hop = 0; hop <= kMaxSegmapHops; ++hop) {
    if (segment < window_first || segment >= window_end) {
      window_end = segment + 1;
      window_first = segment + 1 > kWindow ? segment + 1 - kWindow : 0;
      if (!memory.Read(heap.segmap_low + window_first, window, window_end - window_first)) {
        return BlobLookup::kSegmapUnreadable;
      }
    }
    const uint8_t value = window[segment - window_first];
    if (value == 0xFF) return BlobLookup::kFreeSegment;
    if (value == 0) {
      *block = heap.low + (segment << heap.log2_segment_size);
      return BlobLookup::kFound;
    }
    if (value > segment) return BlobLookup::kHopLimit;
    segment -= value;
  }
  return BlobLookup::kHopLimit;
}

BlobLookup CodeCache::DecodeBlob(uint64_t blob, uint64_t pc, MemoryReader& memory,
                                 BlobInfo* out) const {
  uint8_t header[kMaxBlobHeaderBytes];
  uint32_t size = header_bytes_;
  if (size == 0) return BlobLookup::kBadBlob;
  if (!memory.Read(blob, header, size)) {
    // A small blob at the very end of the committed heap: its CodeBlob fields alone.
    size = min_header_bytes_;
    if (!memory.Read(blob, header, size)) return BlobLookup::kBlobUnreadable;
  }
  BlobInfo info;
  info.address = blob;
  uint64_t name = 0, begin = 0, end = 0;
  int64_t blob_size = 0, frame_size = 0, frame_complete = -1;
  if (!LoadUnsigned(header, size, layout_.blob_name, &name) ||
      !LoadSigned(header, size, layout_.blob_size, &blob_size) ||
      !LoadSigned(header, size, layout_.blob_frame_size, &frame_size) ||
      !LoadUnsigned(header, size, layout_.blob_code_begin, &begin) ||
      !LoadUnsigned(header, size, layout_.blob_code_end, &end)) {
    return BlobLookup::kBadBlob;
  }
  if (layout_.blob_frame_complete_offset.present() &&
      !LoadSigned(header, size, layout_.blob_frame_complete_offset, &frame_complete)) {
    return BlobLookup::kBadBlob;
  }
  if (blob_size <= 0 || static_cast<uint64_t>(blob_size) > kMaxCodeHeapBytes) {
    return BlobLookup::kBadBlob;
  }
  if (layout_.code_as_offsets) {
    // int offsets from the blob's start; the code ends where the data starts.
    const int64_t begin_offset = static_cast<int32_t>(begin),
                  end_offset = static_cast<int32_t>(end);
    if (begin_offset <= 0 || end_offset < begin_offset) return BlobLookup::kBadBlob;
    begin = blob + static_cast<uint64_t>(begin_offset);
    end = blob + static_cast<uint64_t>(end_offset);
  }
  if (begin <= blob || end < begin || end > blob + static_cast<uint64_t>(blob_size)) {
    return BlobLookup::kBadBlob;
  }
  // C1's runtime stubs that make no frame of their own say -1.
  if (frame_size == -1) frame_size = 0;
  if (frame_size < 0 || frame_size > kMaxFrameBytes / 8) return BlobLookup::kBadBlob;
  info.name = name;
  info.code_begin = begin;
  info.code_end = end;
  info.frame_size = static_cast<uint32_t>(frame_size) * 8;
  info.frame_complete_offset = static_cast<int32_t>(frame_complete);
  if (pc < begin || pc >= end) return BlobLookup::kBadBlob;

  // The kind: _kind where the layout has it, else the first bytes of the name. The name tells a
  // JNI wrapper from an nmethod either way ("native nmethod" vs "nmethod").
  bool maybe_nmethod = true;
  bool known = false;
  if (layout_.blob_kind.present()) {
    int64_t kind = 0;
    if (!LoadSigned(header, size, layout_.blob_kind, &kind)) return BlobLookup::kBadBlob;
    known = true;
    if (kind == layout_.kind_nmethod) {
      info.kind = BlobKind::kNmethod;
    } else if (kind == layout_.kind_vtable) {
      info.kind = BlobKind::kVtable;
      maybe_nmethod = false;
    } else {
      info.kind = BlobKind::kStub;
      maybe_nmethod = false;
    }
  }
  if (maybe_nmethod) {
    // Whole names, not four bytes: JDK 17's "native signature handlers" is a buffer blob.
    char text[16] = {};
    const bool read = name != 0 && (memory.Read(name, text, sizeof(text)) ||
                                    memory.Read(name, text, kNmethodName.size() + 1));
    if (!read) {
      if (!known) return BlobLookup::kBlobUnreadable;
    } else {
      const std::string_view prefix(text, sizeof(text));
      if (prefix.starts_with(kNativeWrapperName)) {
        info.kind = BlobKind::kNativeWrapper;
      } else if (prefix.starts_with(kNmethodName)) {
        info.kind = BlobKind::kNmethod;
      } else if (known) {
        // _kind says nmethod: trust it over an unexpected name.
      } else if (prefix.starts_with(kInterpreterName)) {
        info.kind = BlobKind::kInterpreter;
      } else if (prefix.starts_with(kVtableName)) {
        info.kind = BlobKind::kVtable;
      } else {
        info.kind = BlobKind::kStub;
      }
    }
  }

  if (info.kind == BlobKind::kNmethod || info.kind == BlobKind::kNativeWrapper) {
    int64_t compile_id = 0, orig_pc_offset = 0, deopt = 0;
    if (!LoadSigned(header, size, layout_.nmethod_compile_id, &compile_id) ||
        !LoadSigned(header, size, layout_.nmethod_orig_pc_offset, &orig_pc_offset)) {
      return size < header_bytes_ ? BlobLookup::kBlobUnreadable : BlobLookup::kBadBlob;
    }
    info.compile_id = static_cast<int32_t>(compile_id);
    info.orig_pc_offset = static_cast<int32_t>(orig_pc_offset);
    if (layout_.nmethod_deopt_handler.present() &&
        LoadSigned(header, size, layout_.nmethod_deopt_handler, &deopt) && deopt != 0) {
      // From JDK 25 an offset from the blob's start, as every nmethod section offset is.
      info.deopt_handler = layout_.deopt_handler_as_offset
                               ? (deopt > 0 ? blob + static_cast<uint64_t>(deopt) : 0)
                               : static_cast<uint64_t>(deopt);
      if (!info.Contains(info.deopt_handler)) info.deopt_handler = 0;
    }
    // A frame's original pc slot lies inside its frame.
    if (info.orig_pc_offset < 0 ||
        static_cast<uint32_t>(info.orig_pc_offset) + 8 > info.frame_size) {
      info.orig_pc_offset = -1;
    }
  }
  *out = info;
  return BlobLookup::kFound;
}

const BlobInfo* CodeCache::CacheLookup(const std::array<BlobInfo, kCachedBlobs>& cache,
                                       uint32_t count, uint64_t pc) {
  // The last blob starting at or below pc.
  const BlobInfo* first = cache.data();
  const BlobInfo* last = first + count;
  const BlobInfo* it = std::upper_bound(
      first, last, pc, [](uint64_t value, const BlobInfo& blob) { return value < blob.address; });
  if (it == first) return nullptr;
  --it;
  return it->Contains(pc) ? it : nullptr;
}

void CodeCache::CacheInsert(const BlobInfo& blob) {
  if (cached_ == kCachedBlobs) {
    // Full: the older half goes (stamps are distinct), the rest keeps its address order.
    std::array<uint64_t, kCachedBlobs> stamps = stamps_;
    std::nth_element(stamps.begin(), stamps.begin() + kCachedBlobs / 2, stamps.end());
    const uint64_t keep_from = stamps[kCachedBlobs / 2];
    uint32_t kept = 0;
    for (uint32_t i = 0; i < cached_; ++i) {
      if (stamps_[i] < keep_from) continue;
      cache_[kept] = cache_[i];
      stamps_[kept] = stamps_[i];
      ++kept;
    }
    cached_ = kept;
  }
  BlobInfo* first = cache_.data();
  BlobInfo* last = first + cached_;
  BlobInfo* it =
      std::lower_bound(first, last, blob.address,
                       [](const BlobInfo& entry, uint64_t value) { return entry.address < value; });
  const size_t index = static_cast<size_t>(it - first);
  if (it != last && it->address == blob.address) {
    *it = blob;
    stamps_[index] = next_stamp_++;
    return;
  }
  std::move_backward(it, last, last + 1);
  std::move_backward(stamps_.begin() + index, stamps_.begin() + cached_,
                     stamps_.begin() + cached_ + 1);
  *it = blob;
  stamps_[index] = next_stamp_++;
  ++cached_;
}

void CodeCache::NextGeneration() {
  previous_ = cache_;
  previous_count_ = cached_;
  cached_ = 0;
}

BlobLookup CodeCache::FindBlob(uint64_t pc, MemoryReader& memory, BlobInfo* out) {
  if (const BlobInfo* cached = CacheLookup(cache_, cached_, pc)) {
    *out = *cached;
    return BlobLookup::kFound;
  }
  BlobLookup found = FindUncached(pc, memory, out);
  if (found == BlobLookup::kSegmapUnreadable || found == BlobLookup::kBlobUnreadable) {
    if (const BlobInfo* previous = CacheLookup(previous_, previous_count_, pc)) {
      ++previous_generation_hits_;
      *out = *previous;
      return BlobLookup::kFound;
    }
  }
  return found;
}

BlobLookup CodeCache::FindUncached(uint64_t pc, MemoryReader& memory, BlobInfo* out) {
  const CodeHeapRange* heap = info_.HeapOf(pc);
  if (heap == nullptr) return BlobLookup::kNotInHeap;
  if (layout_.heap_block_size == kAbsent || layout_.heap_block_size > 64) {
    return BlobLookup::kBadBlob;
  }
  uint64_t block = 0;
  BlobLookup found = FindBlobStart(*heap, pc, memory, &block);
  if (found != BlobLookup::kFound) return found;
  found = DecodeBlob(block + layout_.heap_block_size, pc, memory, out);
  if (found != BlobLookup::kFound) return found;
  CacheInsert(*out);
  return BlobLookup::kFound;
}

}  // namespace ember::hotspot
