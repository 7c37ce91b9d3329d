// The synthetic code cache of step_fake_jvm.h. Offsets follow the field order of JDK 17's and
// JDK 25's CodeBlob and nmethod; the values are this image's own (the tables give a real JVM's).
#include "step_fake_jvm.h"

#include <cstdlib>

namespace ember::hotspot::step_test {

bool FakeMemory::Read(uint64_t address, void* out, size_t size) {
  ++reads;
  auto it = regions_.upper_bound(address);
  if (it == regions_.begin()) return false;
  --it;
  const uint64_t offset = address - it->first;
  if (offset > it->second.size() || it->second.size() - offset < size) return false;
  std::memcpy(out, it->second.data() + offset, size);
  return true;
}

void FakeMemory::Map(uint64_t address, size_t size, uint8_t fill) {
  regions_[address] = std::vector<uint8_t>(size, fill);
}

void FakeMemory::Unmap(uint64_t address) { regions_.erase(address); }

void FakeMemory::PutBytes(uint64_t address, const void* bytes, size_t size) {
  auto it = regions_.upper_bound(address);
  if (it == regions_.begin()) std::abort();
  --it;
  const uint64_t offset = address - it->first;
  if (offset > it->second.size() || it->second.size() - offset < size) std::abort();
  std::memcpy(it->second.data() + offset, bytes, size);
}

void FakeMemory::PutString(uint64_t address, const std::string& text) {
  PutBytes(address, text.c_str(), text.size() + 1);
}

namespace {

Field F(uint32_t offset, uint8_t width) { return Field{offset, width}; }

}  // namespace

FakeJvm::FakeJvm(Jdk which) : jdk(which) {
  HotSpotLayout& l = layout;
  l.major = jdk == Jdk::k17 ? 17 : 25;
  l.statics = {kHeapsStatic, kLowStatic, kHighStatic, kInterpreterStatic, kCallStubStatic};
  l.growable_array_len = F(0, 4);
  l.growable_array_data = F(8, 8);
  l.code_heap_memory = F(8, 0);
  l.code_heap_segmap = F(120, 0);
  l.code_heap_log2_segment_size = F(240, 4);
  l.virtual_space_low_boundary = F(0, 8);
  l.virtual_space_high_boundary = F(8, 8);
  l.virtual_space_low = F(16, 8);
  l.virtual_space_high = F(24, 8);
  l.stub_queue_stub_buffer = F(8, 8);
  l.stub_queue_buffer_limit = F(16, 4);
  l.interpreter_frame_sender_sp_offset = -1;
  l.interpreter_frame_last_sp_offset = -2;
  l.entry_frame_call_wrapper_offset = -6;
  if (jdk == Jdk::k17) {
    l.heap_block_size = 16;
    l.blob_name = F(8, 8);
    l.blob_size = F(20, 4);
    l.blob_frame_complete_offset = F(28, 4);
    l.blob_frame_size = F(36, 4);
    l.blob_code_begin = F(48, 8);
    l.blob_code_end = F(56, 8);
    l.code_blob_size = 104;
    l.nmethod_method = F(104, 8);
    l.nmethod_deopt_handler = F(160, 8);
    l.nmethod_compile_id = F(200, 4);
    l.nmethod_orig_pc_offset = F(240, 4);
    l.nmethod_size = 352;
  } else {
    l.heap_block_size = 8;
    l.blob_name = F(0, 8);
    l.blob_size = F(8, 4);
    l.blob_kind = F(12, 1);
    l.kind_nmethod = 1;
    l.kind_vtable = 4;
    l.code_as_offsets = true;
    l.blob_code_begin = F(24, 4);
    l.blob_frame_complete_offset = F(28, 2);
    l.blob_code_end = F(32, 4);
    l.blob_frame_size = F(36, 4);
    l.code_blob_size = 64;
    l.nmethod_method = F(64, 8);
    l.deopt_handler_as_offset = true;
    l.nmethod_deopt_handler = F(100, 4);
    l.nmethod_orig_pc_offset = F(108, 4);
    l.nmethod_compile_id = F(120, 4);
    l.nmethod_size = 224;
  }

  memory.Map(kBias + 0x1000, 0x2000);
  memory.Map(kArray, 0x4000);
  memory.Map(kHeapLow, kHeapBytes);
  memory.Map(kSegmap, kHeapBytes >> kLog2Segment, 0xFF);
  memory.Put<uint64_t>(kBias + kHeapsStatic, kArray);
  memory.Put<uint64_t>(kBias + kLowStatic, kHeapLow);
  memory.Put<uint64_t>(kBias + kHighStatic, kHeapLow + kHeapBytes);
  memory.Put<uint64_t>(kBias + kInterpreterStatic, kStubQueue);
  memory.Put<int32_t>(kArray, 1);
  memory.Put<uint64_t>(kArray + 8, kArrayData);
  memory.Put<uint64_t>(kArrayData, kHeap);
  // CodeHeap: _memory and _segmap VirtualSpaces, then the segment size.
  for (auto [vs, low, bytes] : {std::tuple{kHeap + 8, kHeapLow, kHeapBytes},
                                std::tuple{kHeap + 120, kSegmap, kHeapBytes >> kLog2Segment}}) {
    memory.Put<uint64_t>(vs, low);
    memory.Put<uint64_t>(vs + 8, low + bytes);
    memory.Put<uint64_t>(vs + 16, low);
    memory.Put<uint64_t>(vs + 24, low + bytes);
  }
  memory.Put<int32_t>(kHeap + 240, kLog2Segment);

  const bool k25 = jdk == Jdk::k25;
  interpreter = PutBlob(kInterpreterSeg, kCallStubSeg - kInterpreterSeg, "Interpreter", 2, 0, -1);
  call_stub = PutBlob(kCallStubSeg, kVtableSeg - kCallStubSeg,
                      k25 ? "StubRoutines (initialstubs)" : "StubRoutines (1)", 2, 0, -1);
  vtable = PutBlob(kVtableSeg, kRuntimeStubSeg - kVtableSeg, "vtable chunks", 4, 0, -1);
  runtime_stub = PutBlob(kRuntimeStubSeg, kNmethodSeg - kRuntimeStubSeg, "_new_array_Java", 6,
                         kRuntimeStubFrameWords, 0x10);
  nmethod = PutBlob(kNmethodSeg, kNmethodSegs, "nmethod", 1, kNmethodFrameWords, kFrameComplete);
  wrapper = PutBlob(kWrapperSeg, kEndSeg - kWrapperSeg, "native nmethod", 1, 4, 0x18);
  for (const FakeBlob* blob : {&nmethod, &wrapper}) {
    SetField(blob->address, l.nmethod_compile_id, blob == &nmethod ? kCompileId : kCompileId + 1);
    SetField(blob->address, l.nmethod_orig_pc_offset, kOrigPcOffset);
    // JDK 25's offset counts from the blob's start.
    SetField(blob->address, l.nmethod_deopt_handler,
             static_cast<int64_t>(blob->code_begin + kDeoptHandler - (k25 ? blob->address : 0)));
  }
  call_stub_return = call_stub.code_begin + kCallStubReturn;
  memory.Put<uint64_t>(kBias + kCallStubStatic, call_stub_return);
  memory.Put<uint64_t>(kStubQueue + 8, interpreter.code_begin);
  memory.Put<int32_t>(kStubQueue + 16,
                      static_cast<int32_t>(interpreter.code_end - interpreter.code_begin));
}

void FakeJvm::MarkUsed(uint64_t first, uint64_t count) {
  std::vector<uint8_t> bytes(count);
  for (uint64_t k = 1; k < count; ++k) bytes[k] = static_cast<uint8_t>((k - 1) % 254 + 1);
  memory.PutBytes(kSegmap + first, bytes.data(), bytes.size());
}

void FakeJvm::SetField(uint64_t blob, const Field& field, int64_t value) {
  memory.PutBytes(blob + field.offset, &value, field.width);
}

FakeBlob FakeJvm::PutBlob(uint64_t segment, uint64_t segments, const std::string& name, int kind,
                          uint32_t frame_words, int32_t frame_complete) {
  const uint64_t name_address = kBias + kNames + (next_name_++ % 16) * 64;
  memory.PutString(name_address, name);
  MarkUsed(segment, segments);
  FakeBlob blob;
  blob.address = kHeapLow + (segment << kLog2Segment) + layout.heap_block_size;
  const uint64_t end = kHeapLow + ((segment + segments) << kLog2Segment);
  const uint32_t header = kind == 1 ? layout.nmethod_size : layout.code_blob_size;
  blob.code_begin = blob.address + ((header + 31) & ~31u);
  blob.code_end = end - 64;  // data after the code
  SetField(blob.address, layout.blob_name, static_cast<int64_t>(name_address));
  SetField(blob.address, layout.blob_size, static_cast<int64_t>(end - blob.address));
  SetField(blob.address, layout.blob_frame_size, frame_words);
  SetField(blob.address, layout.blob_frame_complete_offset, frame_complete);
  if (layout.blob_frame_complete_offset.width == 2) {
    // Bytes after a 16-bit field that a 32-bit read would take in.
    memory.Put<uint16_t>(blob.address + layout.blob_frame_complete_offset.offset + 2, 0x7777);
  }
  if (layout.code_as_offsets) {
    SetField(blob.address, layout.blob_code_begin,
             static_cast<int64_t>(blob.code_begin - blob.address));
    SetField(blob.address, layout.blob_code_end,
             static_cast<int64_t>(blob.code_end - blob.address));
  } else {
    SetField(blob.address, layout.blob_code_begin, static_cast<int64_t>(blob.code_begin));
    SetField(blob.address, layout.blob_code_end, static_cast<int64_t>(blob.code_end));
  }
  if (layout.blob_kind.present()) SetField(blob.address, layout.blob_kind, kind);
  // Code bytes that match no epilogue pattern (nop).
  std::vector<uint8_t> code(blob.code_end - blob.code_begin, 0x90);
  memory.PutBytes(blob.code_begin, code.data(), code.size());
  return blob;
}

void FakeJvm::PutStack(uint64_t address, uint64_t value) {
  if (address < kStack || address + 8 > kStack + kStackBytes) std::abort();
  std::memcpy(stack_bytes.data() + (address - kStack), &value, 8);
}

CodeCacheInfo FakeJvm::ReadInfo() {
  CodeCacheInfo info;
  if (ReadCodeCacheInfo(layout, kBias, memory, &info) != CodeCacheStatus::kReady) std::abort();
  return info;
}

FrameRegisters Regs(uint64_t ip, uint64_t sp, std::optional<uint64_t> bp,
                    std::optional<uint64_t> r13) {
  FrameRegisters regs;
  regs.Set(16, ip);
  regs.Set(7, sp);
  if (bp) regs.Set(6, *bp);
  if (r13) regs.Set(13, *r13);
  return regs;
}

}  // namespace ember::hotspot::step_test
