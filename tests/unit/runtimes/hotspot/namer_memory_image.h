// A synthetic HotSpot JVM memory image for the namer's tests: a MemoryReader over regions laid
// out by hand, and writers (from the JDK's own definitions) of UNSIGNED5, line number tables,
// scope descriptors and PcDescs, with Method/ConstMethod/ConstantPool/Klass/Symbol and nmethod
// builders over a HotSpotLayout of JDK 17's or 25's type sizes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtimes/hotspot/hotspot_layout.h"
#include "runtimes/process_memory.h"

namespace ember::hotspot::testing {

// UNSIGNED5 as utilities/unsigned5.hpp writes it, with `excluded` (X) low byte values unused.
void WriteUnsigned5(uint32_t value, uint8_t excluded, std::vector<uint8_t>* out);
// The signed form: zigzag, then UNSIGNED5.
void WriteSigned5(int32_t value, uint8_t excluded, std::vector<uint8_t>* out);

// CompressedLineNumberWriteStream: (bci, line) pairs in order, then the terminating zero.
std::vector<uint8_t> EncodeLineTable(const std::vector<std::pair<int32_t, int32_t>>& pairs,
                                     uint8_t excluded);

// A DebugInformationRecorder-like scopes stream: offset 0 is a pad byte (serialized_null).
class ScopesWriter {
 public:
  explicit ScopesWriter(uint8_t excluded) : excluded_(excluded) { bytes_.push_back(0xAB); }
  // One scope whose caller's scope is at `sender` (0: none); returns its decode offset.
  int32_t Add(int32_t sender, uint32_t method_index, int32_t bci);
  // A scope written with raw fields (hostile tests).
  int32_t AddRaw(uint32_t sender, uint32_t method_index, uint32_t bci_plus_one);
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  uint8_t excluded_;
  std::vector<uint8_t> bytes_;
};

// PcDescs of 16 bytes (pc_offset @0, scope_decode_offset @4), with HotSpot's sentinels (-1
// first, INT_MAX last) around `descs`.
std::vector<uint8_t> EncodePcDescs(const std::vector<std::pair<int32_t, int32_t>>& descs);

// Memory made of separate regions; a read must lie inside one region.
class FakeMemory : public MemoryReader {
 public:
  bool Read(uint64_t address, void* out, size_t size) override;
  // A zeroed region of `size` bytes at `address`.
  void Map(uint64_t address, size_t size);
  void Unmap(uint64_t address);
  void Write(uint64_t address, const void* data, size_t size);
  template <typename T>
  void Put(uint64_t address, T value) {
    Write(address, &value, sizeof(value));
  }
  uint64_t reads() const { return reads_; }
  size_t largest_read() const { return largest_read_; }

 private:
  std::map<uint64_t, std::vector<uint8_t>> regions_;
  uint64_t reads_ = 0;
  size_t largest_read_ = 0;
};

// Which JDK's sizes and forms the layout has.
enum class Jdk { k17, k25 };

// A HotSpotLayout with JDK 17's (or 25's) type sizes from the dumps of this machine's JVMs,
// UNSIGNED5's X of that JDK, and field offsets of the image's own choosing.
HotSpotLayout NamerLayout(Jdk jdk);

struct JavaClass {
  uint64_t klass = 0;
  uint64_t pool = 0;
  uint16_t next_slot = 1;
};

struct MethodSpec {
  std::string name;
  std::string signature;
  uint16_t code_size = 16;
  // Line table pairs (bci, line); empty: the method has no line table.
  std::vector<std::pair<int32_t, int32_t>> lines = {};
};

// Objects laid out in a FakeMemory as the JVM would hold them.
class JvmImage {
 public:
  explicit JvmImage(Jdk jdk);
  const HotSpotLayout& layout() const { return layout_; }
  FakeMemory& memory() { return memory_; }

  // A fresh region of `size` bytes (zeroed) at the start of whole pages, as the JVM's memory is
  // mapped, with an unmapped page after it.
  uint64_t Alloc(size_t size);
  // A Symbol holding `bytes` as they are (modified UTF-8 is the caller's).
  uint64_t AddSymbol(std::string_view bytes);
  // A class with its constant pool (256 slots) named `internal_name`; `source_file` empty: none.
  JavaClass AddClass(std::string_view internal_name, std::string_view source_file);
  // A pool slot holding `symbol` (tagged as the JVM tags resolved Symbol* slots).
  uint16_t AddPoolSymbol(JavaClass& java_class, uint64_t symbol);
  // A Method with its ConstMethod (bytecodes, then the line table); returns the Method*.
  uint64_t AddMethod(JavaClass& java_class, const MethodSpec& spec);
  uint64_t ConstMethodOf(uint64_t method);
  uint64_t CodeStartOf(uint64_t method);  // the first bytecode

  // An nmethod of `method` with `compile_id`, its metadata (Method*s, index 1 first), scopes data
  // and PcDescs in the form of the image's JDK; returns the nmethod's address. `code` (at most
  // 256 bytes), when given, is its code, right after its header; otherwise the nmethod says
  // nothing of where its code lies.
  uint64_t AddNmethod(uint64_t method, int32_t compile_id, const std::vector<uint64_t>& metadata,
                      const std::vector<uint8_t>& scopes_data, const std::vector<uint8_t>& pcs,
                      const std::vector<uint8_t>& code = {});

 private:
  uint64_t AddNmethodTables(uint64_t method, int32_t compile_id,
                            const std::vector<uint64_t>& metadata,
                            const std::vector<uint8_t>& scopes_data,
                            const std::vector<uint8_t>& pcs);
  Jdk jdk_;
  HotSpotLayout layout_;
  FakeMemory memory_;
  uint64_t next_ = 0x7f0000000000;
};

}  // namespace ember::hotspot::testing
