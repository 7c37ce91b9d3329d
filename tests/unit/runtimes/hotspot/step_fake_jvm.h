// A synthetic HotSpot code cache in a sparse memory image, with a layout modelled on JDK 17
// (code pointers, HeapBlock 16, int frame_complete_offset, kind from the name) or JDK 25 (code
// offsets, HeapBlock 8, int16 frame_complete_offset, _kind): one heap with a segment map, the
// interpreter, the call stub, a vtable chunk, a runtime stub, a large nmethod (a segment map walk
// of several hops) and a JNI wrapper; and a hand-built stack.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtimes/hotspot/code_cache.h"
#include "runtimes/hotspot/hotspot_layout.h"
#include "runtimes/process_memory.h"
#include "unwind/frame_registers.h"

namespace ember::hotspot::step_test {

// Regions of bytes at addresses; a read must fall inside one region.
class FakeMemory : public MemoryReader {
 public:
  bool Read(uint64_t address, void* out, size_t size) override;
  void Map(uint64_t address, size_t size, uint8_t fill = 0);
  void Unmap(uint64_t address);
  template <typename T>
  void Put(uint64_t address, T value) {
    PutBytes(address, &value, sizeof(value));
  }
  void PutBytes(uint64_t address, const void* bytes, size_t size);
  void PutString(uint64_t address, const std::string& text);
  int reads = 0;

 private:
  std::map<uint64_t, std::vector<uint8_t>> regions_;
};

enum class Jdk { k17, k25 };

struct FakeBlob {
  uint64_t address = 0;  // the CodeBlob (after its HeapBlock)
  uint64_t code_begin = 0;
  uint64_t code_end = 0;
};

class FakeJvm {
 public:
  static constexpr uint64_t kBias = 0x7f1000000000;
  // ELF addresses of the statics and of the names (in libjvm's .rodata).
  static constexpr uint64_t kHeapsStatic = 0x1000, kLowStatic = 0x1008, kHighStatic = 0x1010,
                            kInterpreterStatic = 0x1018, kCallStubStatic = 0x1020;
  static constexpr uint64_t kNames = 0x2000;
  static constexpr uint64_t kArray = 0x7e2000000000, kArrayData = 0x7e2000001000,
                            kHeap = 0x7e2000002000, kStubQueue = 0x7e2000003000;
  static constexpr uint64_t kHeapLow = 0x7e0000000000, kHeapBytes = 1 << 20;
  static constexpr uint64_t kSegmap = 0x7e1000000000;
  static constexpr uint32_t kLog2Segment = 7;
  // Segments of each blob.
  static constexpr uint64_t kInterpreterSeg = 0, kCallStubSeg = 16, kVtableSeg = 24,
                            kRuntimeStubSeg = 26, kNmethodSeg = 30, kNmethodSegs = 600,
                            kWrapperSeg = 630, kEndSeg = 634;
  static constexpr int32_t kCompileId = 77;
  static constexpr uint32_t kNmethodFrameWords = 6, kFrameComplete = 0x20, kOrigPcOffset = 16,
                            kDeoptHandler = 0x1000, kRuntimeStubFrameWords = 4;
  static constexpr uint64_t kCallStubReturn = 0x40;  // from the call stub's code begin
  static constexpr uint64_t kStack = 0x7ffd00000000, kStackBytes = 0x4000;

  explicit FakeJvm(Jdk jdk);

  HotSpotLayout layout;
  FakeMemory memory;
  FakeBlob interpreter, call_stub, vtable, runtime_stub, nmethod, wrapper;
  uint64_t call_stub_return = 0;
  Jdk jdk;

  // Fills segments [first, first + count) as one used block, the JDK's sawtooth.
  void MarkUsed(uint64_t first, uint64_t count);
  // Writes a blob's header at the given segment; returns where it and its code lie.
  FakeBlob PutBlob(uint64_t segment, uint64_t segments, const std::string& name, int kind,
                   uint32_t frame_words, int32_t frame_complete);
  // A field of the blob at `blob`, by the layout's offset and width.
  void SetField(uint64_t blob, const Field& field, int64_t value);

  // The stack: words written at addresses in [kStack, kStack + kStackBytes).
  std::vector<uint8_t> stack_bytes = std::vector<uint8_t>(kStackBytes);
  void PutStack(uint64_t address, uint64_t value);
  StackMemory Stack() const { return {kStack, stack_bytes}; }

  CodeCacheInfo ReadInfo();

 private:
  uint64_t next_name_ = 0;
};

FrameRegisters Regs(uint64_t ip, uint64_t sp, std::optional<uint64_t> bp = std::nullopt,
                    std::optional<uint64_t> r13 = std::nullopt);

}  // namespace ember::hotspot::step_test
