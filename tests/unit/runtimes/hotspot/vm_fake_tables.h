// A fake JVM's VM structure tables in a fake memory image: a consistent set shaped like JDK 17's
// (the entries HotSpotLayout needs, at offsets of its own), which a test then breaks one value at
// a time.
#pragma once

#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtimes/hotspot/jvm_detect.h"
#include "runtimes/process_memory.h"

namespace ember::hotspot::fake {

// Memory as disjoint regions; a read succeeds only inside one region. Counts reads.
class FakeMemory : public MemoryReader {
 public:
  bool Read(uint64_t address, void* out, size_t size) override {
    ++reads_;
    auto it = regions_.upper_bound(address);
    if (it == regions_.begin()) return false;
    --it;
    const std::vector<uint8_t>& bytes = it->second;
    if (address - it->first > bytes.size() || size > bytes.size() - (address - it->first)) {
      return false;
    }
    std::memcpy(out, bytes.data() + (address - it->first), size);
    return true;
  }
  void Map(uint64_t base, size_t size) { regions_[base].assign(size, 0); }
  void Unmap(uint64_t base) { regions_.erase(base); }
  void Write(uint64_t address, const void* data, size_t size) {
    auto it = std::prev(regions_.upper_bound(address));
    std::memcpy(it->second.data() + (address - it->first), data, size);
  }
  void WriteU64(uint64_t address, uint64_t value) { Write(address, &value, 8); }
  uint64_t ReadU64(uint64_t address) {
    uint64_t value = 0;
    Read(address, &value, 8);
    return value;
  }
  size_t reads() const { return reads_; }

 private:
  std::map<uint64_t, std::vector<uint8_t>> regions_;
  size_t reads_ = 0;
};

struct StructEntry {
  std::string type, field, type_string;
  bool is_static = false;
  uint64_t offset = 0;
  uint64_t address = 0;  // process address, for statics
};

class FakeTables {
 public:
  static constexpr uint64_t kBias = 0x7f0000000000;
  static constexpr uint64_t kSymbolsElf = 0x1000;  // libjvm's .data/.bss, as ELF addresses
  static constexpr uint64_t kStaticsElf = 0x2000;
  static constexpr uint64_t kTables = 0x10000000;  // the tables (process addresses)
  static constexpr uint64_t kStrings = 0x20000000;
  static constexpr uint64_t kStructStride = 48;
  static constexpr uint64_t kTypeStride = 40;

  FakeTables() {
    auto add = [&](const char* type, const char* field, const char* type_string, uint64_t offset) {
      structs.push_back({type, field, type_string, false, offset, 0});
    };
    uint64_t next_static = kBias + kStaticsElf;
    auto add_static = [&](const char* type, const char* field, const char* type_string) {
      structs.push_back({type, field, type_string, true, 0, next_static});
      next_static += 8;
    };
    add_static("Abstract_VM_Version", "_vm_major_version", "int");
    add_static("Abstract_VM_Version", "_vm_minor_version", "int");
    add_static("Abstract_VM_Version", "_vm_security_version", "int");
    add_static("Abstract_VM_Version", "_vm_build_number", "int");
    add_static("CodeCache", "_heaps", "GrowableArray<CodeHeap*>*");
    add_static("CodeCache", "_low_bound", "address");
    add_static("CodeCache", "_high_bound", "address");
    add_static("AbstractInterpreter", "_code", "StubQueue*");
    add_static("StubRoutines", "_call_stub_return_address", "address");
    add("GrowableArrayBase", "_len", "int", 0);
    add("GrowableArray<int>", "_data", "int*", 8);
    add("CodeHeap", "_memory", "VirtualSpace", 8);
    add("CodeHeap", "_segmap", "VirtualSpace", 80);
    add("CodeHeap", "_log2_segment_size", "int", 168);
    add("VirtualSpace", "_low_boundary", "char*", 0);
    add("VirtualSpace", "_high_boundary", "char*", 8);
    add("VirtualSpace", "_low", "char*", 16);
    add("VirtualSpace", "_high", "char*", 24);
    add("CodeBlob", "_name", "const char*", 8);
    add("CodeBlob", "_size", "int", 20);
    add("CodeBlob", "_frame_complete_offset", "int", 28);
    add("CodeBlob", "_frame_size", "int", 36);
    add("CodeBlob", "_code_begin", "address", 56);
    add("CodeBlob", "_code_end", "address", 64);
    add("CompiledMethod", "_method", "Method*", 120);
    add("CompiledMethod", "_scopes_data_begin", "address", 136);
    add("CompiledMethod", "_deopt_handler_begin", "address", 144);
    add("nmethod", "_orig_pc_offset", "int", 220);
    add("nmethod", "_metadata_offset", "int", 240);
    add("nmethod", "_scopes_pcs_offset", "int", 244);
    add("nmethod", "_dependencies_offset", "int", 248);
    add("nmethod", "_compile_id", "int", 300);
    add("PcDesc", "_pc_offset", "int", 0);
    add("PcDesc", "_scope_decode_offset", "int", 4);
    add("Method", "_constMethod", "ConstMethod*", 8);
    add("ConstMethod", "_constants", "ConstantPool*", 8);
    add("ConstMethod", "_flags", "u2", 36);
    add("ConstMethod", "_code_size", "u2", 38);
    add("ConstMethod", "_name_index", "u2", 40);
    add("ConstMethod", "_signature_index", "u2", 42);
    add("ConstantPool", "_pool_holder", "InstanceKlass*", 24);
    add("ConstantPool", "_source_file_name_index", "u2", 66);
    add("Klass", "_name", "Symbol*", 16);
    add("Symbol", "_length", "u2", 4);
    add("Symbol", "_body", "u1", 6);
    add("StubQueue", "_stub_buffer", "address", 8);
    add("StubQueue", "_buffer_limit", "int", 16);
    types = {{"int", 4},
             {"u1", 1},
             {"u2", 2},
             {"address", 8},
             {"char*", 8},
             {"GrowableArrayBase", 16},
             {"GrowableArray<int>", 24},
             {"CodeHeap", 208},
             {"VirtualSpace", 72},
             {"HeapBlock", 16},
             {"CodeBlob", 112},
             {"CompiledMethod", 200},
             {"nmethod", 352},
             {"PcDesc", 16},
             {"Method", 88},
             {"ConstMethod", 48},
             {"ConstantPool", 72},
             {"Klass", 200},
             {"Symbol", 8},
             {"StubQueue", 40}};
    ints = {{"frame::interpreter_frame_sender_sp_offset", -1},
            {"frame::interpreter_frame_last_sp_offset", -2},
            {"frame::entry_frame_call_wrapper_offset", -6},
            {"ConstMethod::_has_linenumber_table", 1}};
    longs = {{"markWord::hash_mask", 0x7fffffff}};
  }

  // ELF addresses of the table symbols (each 8 bytes, one after the other).
  VMStructsSymbols Symbols() const {
    VMStructsSymbols s;
    uint64_t* members[] = {&s.structs,           &s.types,
                           &s.int_constants,     &s.long_constants,
                           &s.struct_stride,     &s.struct_type_name,
                           &s.struct_field_name, &s.struct_type_string,
                           &s.struct_is_static,  &s.struct_offset,
                           &s.struct_address,    &s.type_stride,
                           &s.type_type_name,    &s.type_superclass_name,
                           &s.type_size,         &s.int_stride,
                           &s.int_name,          &s.int_value,
                           &s.long_stride,       &s.long_name,
                           &s.long_value};
    uint64_t at = kSymbolsElf;
    for (uint64_t* member : members) {
      *member = at;
      at += 8;
    }
    return s;
  }

  JvmProcess Process(const std::string& build_id = "fakebuild") const {
    auto info = std::make_shared<LibjvmInfo>();
    info->path = "/fake/libjvm.so";
    info->build_id = build_id;
    info->symbols = Symbols();
    return JvmProcess{std::move(info), kBias};
  }

  uint64_t Sym(uint64_t VMStructsSymbols::*member) const { return kBias + Symbols().*member; }

  // Writes everything into `memory` (mapping its regions). Returns nothing: tests then break
  // values through the addresses below.
  void Build(FakeMemory& memory) {
    memory.Map(kBias + kSymbolsElf, 0x1000);
    memory.Map(kBias + kStaticsElf, 0x1000);
    memory.Map(kTables, 0x100000);
    memory.Map(kStrings, 0x100000);
    const VMStructsSymbols s = Symbols();
    auto sym = [&](uint64_t member, uint64_t value) { memory.WriteU64(kBias + member, value); };
    uint64_t next_string = kStrings;
    auto string = [&](const std::string& text) -> uint64_t {
      if (text.empty()) return 0;
      const uint64_t at = next_string;
      memory.Write(at, text.c_str(), text.size() + 1);
      next_string += text.size() + 1;
      return at;
    };
    sym(s.struct_stride, kStructStride);
    sym(s.struct_type_name, 0);
    sym(s.struct_field_name, 8);
    sym(s.struct_type_string, 16);
    sym(s.struct_is_static, 24);
    sym(s.struct_offset, 32);
    sym(s.struct_address, 40);
    sym(s.type_stride, kTypeStride);
    sym(s.type_type_name, 0);
    sym(s.type_superclass_name, 8);
    sym(s.type_size, 32);
    sym(s.int_stride, 16);
    sym(s.int_name, 0);
    sym(s.int_value, 8);
    sym(s.long_stride, 16);
    sym(s.long_name, 0);
    sym(s.long_value, 8);

    uint64_t at = kTables;
    structs_at = at;
    sym(s.structs, at);
    for (const StructEntry& e : structs) {
      memory.WriteU64(at, string(e.type));
      memory.WriteU64(at + 8, string(e.field));
      memory.WriteU64(at + 16, string(e.type_string));
      const uint32_t is_static = e.is_static ? 1 : 0;
      memory.Write(at + 24, &is_static, 4);
      memory.WriteU64(at + 32, e.offset);
      memory.WriteU64(at + 40, e.address);
      at += kStructStride;
    }
    at += kStructStride;  // the terminator (zeros)
    types_at = at;
    sym(s.types, at);
    for (const auto& [name, size] : types) {
      memory.WriteU64(at, string(name));
      memory.WriteU64(at + 32, size);
      at += kTypeStride;
    }
    at += kTypeStride;
    ints_at = at;
    sym(s.int_constants, at);
    for (const auto& [name, value] : ints) {
      memory.WriteU64(at, string(name));
      memory.Write(at + 8, &value, 4);
      at += 16;
    }
    at += 16;
    longs_at = at;
    sym(s.long_constants, at);
    for (const auto& [name, value] : longs) {
      memory.WriteU64(at, string(name));
      memory.WriteU64(at + 8, value);
      at += 16;
    }
    at += 16;
    tables_end = at;
    const int32_t version[] = {major, 0, 15, 6};
    for (int i = 0; i < 4; ++i) memory.Write(kBias + kStaticsElf + 8 * i, &version[i], 4);
  }

  std::vector<StructEntry> structs;
  std::vector<std::pair<std::string, uint64_t>> types;
  std::vector<std::pair<std::string, int32_t>> ints;
  std::vector<std::pair<std::string, uint64_t>> longs;
  int32_t major = 17;
  uint64_t structs_at = 0, types_at = 0, ints_at = 0, longs_at = 0, tables_end = 0;
};

}  // namespace ember::hotspot::fake
