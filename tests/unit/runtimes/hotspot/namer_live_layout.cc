// Follows the exported table pointers and strides (the same symbols every reader of these tables
// uses), reads each entry's names, and keeps the entries the namer's test needs.
#include "namer_live_layout.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "runtimes/process_memory.h"
#include "support/nm_symbols.h"

namespace ember::hotspot::testing {
namespace {

constexpr int kMaxEntries = 1 << 17;

std::string ReadCString(MemoryReader& memory, uint64_t address) {
  std::string out;
  char chunk[64];
  while (address != 0 && out.size() < 512) {
    // Byte by byte at a page end, so a string that ends there reads.
    const size_t size = std::min<uint64_t>(sizeof(chunk), 4096 - (address & 4095));
    if (!memory.Read(address, chunk, size)) return out;
    for (size_t i = 0; i < size; ++i) {
      if (chunk[i] == 0) return out;
      out.push_back(chunk[i]);
    }
    address += size;
  }
  return out;
}

uint8_t WidthOf(const std::string& type) {
  if (type == "u1" || type == "bool" || type == "jbyte") return 1;
  if (type == "u2" || type == "jshort") return 2;
  if (type == "int" || type == "u4" || type == "jint" || type == "unsigned int") return 4;
  return 8;
}

}  // namespace

bool ReadLiveJvm(pid_t pid, LiveJvm* jvm, std::string* error) {
  // libjvm's path and load address: the mapping of its first page.
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line, path;
  uint64_t base = 0;
  while (std::getline(maps, line)) {
    if (line.find("/libjvm.so") == std::string::npos) continue;
    std::istringstream fields(line);
    std::string range, perms, offset, device, inode;
    fields >> range >> perms >> offset >> device >> inode >> path;
    if (std::stoull(offset, nullptr, 16) != 0) continue;
    base = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    break;
  }
  if (base == 0) {
    *error = "no libjvm.so mapping";
    return false;
  }
  std::map<std::string, uint64_t> symbols;
  for (const ember::testing::NmSymbol& symbol :
       ember::testing::NmSymbols(path, {.types = "DdBb", .dynamic = true})) {
    // Without the version nm appends ("@@SUNWprivate_1.1").
    const std::string name = symbol.name.substr(0, symbol.name.find('@'));
    if (name.starts_with("gHotSpotVM")) symbols[name] = base + symbol.address;
  }
  ProcessMemoryReader memory(pid);
  auto value = [&](const std::string& name) {
    uint64_t v = 0;
    auto it = symbols.find(name);
    if (it == symbols.end() || !memory.Read(it->second, &v, sizeof(v))) {
      *error += "unreadable " + name + "; ";
      return uint64_t{0};
    }
    return v;
  };
  struct StructEntry {
    uint64_t offset, address;
    uint8_t width;
  };
  std::map<std::string, StructEntry> fields;
  std::map<std::string, uint64_t> sizes;
  std::map<std::string, int32_t> ints;
  {
    const uint64_t table = value("gHotSpotVMStructs");
    const uint64_t stride = value("gHotSpotVMStructEntryArrayStride");
    const uint64_t type_name = value("gHotSpotVMStructEntryTypeNameOffset");
    const uint64_t field_name = value("gHotSpotVMStructEntryFieldNameOffset");
    const uint64_t type_string = value("gHotSpotVMStructEntryTypeStringOffset");
    const uint64_t offset = value("gHotSpotVMStructEntryOffsetOffset");
    const uint64_t address = value("gHotSpotVMStructEntryAddressOffset");
    if (!error->empty() || stride > 256 ||
        std::max({type_name, field_name, type_string, offset, address}) + 8 > stride) {
      *error += "struct entries do not fit their stride";
      return false;
    }
    std::vector<uint8_t> entry(stride);
    for (int i = 0; i < kMaxEntries; ++i) {
      if (!memory.Read(table + i * stride, entry.data(), stride)) break;
      uint64_t type_pointer, name_pointer, type_string_pointer, entry_offset, entry_address;
      std::memcpy(&type_pointer, &entry[type_name], 8);
      if (type_pointer == 0) break;
      std::memcpy(&name_pointer, &entry[field_name], 8);
      std::memcpy(&type_string_pointer, &entry[type_string], 8);
      std::memcpy(&entry_offset, &entry[offset], 8);
      std::memcpy(&entry_address, &entry[address], 8);
      fields[ReadCString(memory, type_pointer) + "::" + ReadCString(memory, name_pointer)] = {
          entry_offset, entry_address, WidthOf(ReadCString(memory, type_string_pointer))};
    }
  }
  {
    const uint64_t table = value("gHotSpotVMTypes");
    const uint64_t stride = value("gHotSpotVMTypeEntryArrayStride");
    const uint64_t type_name = value("gHotSpotVMTypeEntryTypeNameOffset");
    const uint64_t size = value("gHotSpotVMTypeEntrySizeOffset");
    if (!error->empty() || stride > 256 || std::max(type_name, size) + 8 > stride) {
      *error += "type entries do not fit their stride";
      return false;
    }
    std::vector<uint8_t> entry(stride);
    for (int i = 0; i < kMaxEntries; ++i) {
      if (!memory.Read(table + i * stride, entry.data(), stride)) break;
      uint64_t name_pointer, entry_size;
      std::memcpy(&name_pointer, &entry[type_name], 8);
      if (name_pointer == 0) break;
      std::memcpy(&entry_size, &entry[size], 8);
      sizes[ReadCString(memory, name_pointer)] = entry_size;
    }
  }
  {
    const uint64_t table = value("gHotSpotVMIntConstants");
    const uint64_t stride = value("gHotSpotVMIntConstantEntryArrayStride");
    const uint64_t name = value("gHotSpotVMIntConstantEntryNameOffset");
    const uint64_t entry_value = value("gHotSpotVMIntConstantEntryValueOffset");
    if (!error->empty() || stride > 256 || std::max(name, entry_value) + 8 > stride) {
      *error += "int constant entries do not fit their stride";
      return false;
    }
    std::vector<uint8_t> entry(stride);
    for (int i = 0; i < kMaxEntries; ++i) {
      if (!memory.Read(table + i * stride, entry.data(), stride)) break;
      uint64_t name_pointer;
      int32_t v;
      std::memcpy(&name_pointer, &entry[name], 8);
      if (name_pointer == 0) break;
      std::memcpy(&v, &entry[entry_value], 4);
      ints[ReadCString(memory, name_pointer)] = v;
    }
  }
  HotSpotLayout& layout = jvm->layout;
  auto field = [&](const std::string& name, Field* out) {
    auto it = fields.find(name);
    if (it == fields.end()) {
      *error += "no " + name + "; ";
      return;
    }
    *out = {static_cast<uint32_t>(it->second.offset), it->second.width};
  };
  field("Method::_constMethod", &layout.method_const_method);
  field("ConstMethod::_constants", &layout.const_method_constants);
  field("ConstMethod::_code_size", &layout.const_method_code_size);
  field("ConstMethod::_name_index", &layout.const_method_name_index);
  field("ConstMethod::_signature_index", &layout.const_method_signature_index);
  if (fields.contains("ConstMethod::_flags._flags")) {
    field("ConstMethod::_flags._flags", &layout.const_method_flags);
    layout.has_linenumber_table_flag = ints["ConstMethodFlags::_misc_has_linenumber_table"];
  } else {
    field("ConstMethod::_flags", &layout.const_method_flags);
    layout.has_linenumber_table_flag = ints["ConstMethod::_has_linenumber_table"];
  }
  field("ConstantPool::_pool_holder", &layout.constant_pool_pool_holder);
  field("ConstantPool::_source_file_name_index", &layout.constant_pool_source_file_name_index);
  field("Klass::_name", &layout.klass_name);
  field("Symbol::_length", &layout.symbol_length);
  field("Symbol::_body", &layout.symbol_body);
  // Compiled code: the nmethod's method and id, its PcDescs, and its scope tables in whichever
  // form this JDK has.
  if (fields.contains("nmethod::_method")) {
    field("nmethod::_method", &layout.nmethod_method);
  } else {
    field("CompiledMethod::_method", &layout.nmethod_method);
  }
  field("nmethod::_compile_id", &layout.nmethod_compile_id);
  field("nmethod::_scopes_pcs_offset", &layout.nmethod_scopes_pcs_offset);
  if (fields.contains("nmethod::_immutable_data")) {
    field("nmethod::_immutable_data", &layout.nmethod_immutable_data);
    field("nmethod::_immutable_data_size", &layout.nmethod_immutable_data_size);
    field("nmethod::_scopes_data_offset", &layout.nmethod_scopes_data_offset);
    field("CodeBlob::_mutable_data", &layout.blob_mutable_data);
    field("CodeBlob::_mutable_data_size", &layout.blob_mutable_data_size);
    field("CodeBlob::_relocation_size", &layout.blob_relocation_size);
    layout.code_as_offsets = true;
    field("CodeBlob::_code_offset", &layout.blob_code_begin);
    field("CodeBlob::_data_offset", &layout.blob_code_end);
  } else {
    field("CompiledMethod::_scopes_data_begin", &layout.nmethod_scopes_data_begin);
    field("nmethod::_metadata_offset", &layout.nmethod_metadata_offset);
    field("nmethod::_dependencies_offset", &layout.nmethod_dependencies_offset);
    field("CodeBlob::_code_begin", &layout.blob_code_begin);
    field("CodeBlob::_code_end", &layout.blob_code_end);
  }
  field("PcDesc::_pc_offset", &layout.pc_desc_pc_offset);
  field("PcDesc::_scope_decode_offset", &layout.pc_desc_scope_decode_offset);
  layout.pc_desc_size = static_cast<uint32_t>(sizes["PcDesc"]);
  field("InstanceKlass::_methods", &jvm->instance_klass_methods);
  field("Method::_code", &jvm->method_code);
  Field array_data;
  field("Array<Method*>::_data", &array_data);
  jvm->method_array_data = array_data.offset;
  layout.const_method_size = static_cast<uint32_t>(sizes["ConstMethod"]);
  layout.constant_pool_size = static_cast<uint32_t>(sizes["ConstantPool"]);
  layout.major = 0;
  if (auto it = fields.find("Abstract_VM_Version::_vm_major_version"); it != fields.end()) {
    memory.Read(it->second.address, &layout.major, sizeof(layout.major));
  }
  layout.unsigned5_excluded = layout.major >= 20 ? 1 : 0;
  // The interpreter's code: AbstractInterpreter::_code (a StubQueue*).
  Field stub_buffer, buffer_limit;
  field("StubQueue::_stub_buffer", &stub_buffer);
  field("StubQueue::_buffer_limit", &buffer_limit);
  auto code = fields.find("AbstractInterpreter::_code");
  if (code == fields.end()) *error += "no AbstractInterpreter::_code; ";
  if (!error->empty()) return false;
  uint64_t queue = 0;
  int32_t limit = 0;
  if (!memory.Read(code->second.address, &queue, 8) ||
      !memory.Read(queue + stub_buffer.offset, &jvm->interpreter_low, 8) ||
      !memory.Read(queue + buffer_limit.offset, &limit, 4)) {
    *error = "the interpreter's StubQueue does not read";
    return false;
  }
  jvm->interpreter_high = jvm->interpreter_low + static_cast<uint32_t>(limit);
  return true;
}

}  // namespace ember::hotspot::testing
