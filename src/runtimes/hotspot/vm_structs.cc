// Reading the VM structure tables out of process memory, bounded, and resolving HotSpotLayout by
// which entries exist.
#include "runtimes/hotspot/vm_structs.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace ember::hotspot {
namespace {

class TableReader {
 public:
  explicit TableReader(MemoryReader& reader) : reader_(reader) {}

  absl::Status Read(uint64_t address, void* out, size_t size, absl::string_view what) {
    if (!reader_.Read(address, out, size)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("cannot read %d bytes of %s at 0x%x", size, what, address));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> ReadU64(uint64_t address, absl::string_view what) {
    uint64_t value = 0;
    if (absl::Status s = Read(address, &value, sizeof(value), what); !s.ok()) return s;
    return value;
  }

  // A NUL-terminated string of at most kMaxNameBytes (NUL included); "" for a null pointer.
  // Strings are shared by many entries (every field of a type names it), so each is read once.
  absl::StatusOr<std::string> ReadString(uint64_t address, absl::string_view what) {
    if (address == 0) return std::string();
    if (auto it = strings_.find(address); it != strings_.end()) return Charge(it->second, what);
    std::string out;
    char buffer[kMaxNameBytes];
    uint64_t at = address;
    while (out.size() < kMaxNameBytes) {
      // Never across a page end: the string may end right before an unmapped page.
      size_t chunk = std::min<uint64_t>(4096 - (at & 4095), kMaxNameBytes - out.size());
      chunk = std::min<size_t>(chunk, 64);
      if (!reader_.Read(at, buffer, chunk)) {
        return absl::FailedPreconditionError(
            absl::StrFormat("cannot read the %s string at 0x%x", what, address));
      }
      const void* nul = std::memchr(buffer, '\0', chunk);
      if (nul != nullptr) {
        out.append(buffer, static_cast<const char*>(nul) - buffer);
        strings_.emplace(address, out);
        return Charge(out, what);
      }
      out.append(buffer, chunk);
      at += chunk;
    }
    return absl::DataLossError(absl::StrFormat("the %s string at 0x%x has no NUL in %d bytes", what,
                                               address, kMaxNameBytes));
  }

 private:
  // Every string handed out is copied into a row, so the budget counts each one handed out.
  absl::StatusOr<std::string> Charge(const std::string& text, absl::string_view what) {
    string_bytes_ += text.size() + 1;
    if (string_bytes_ > kMaxStringBytes) {
      return absl::DataLossError(absl::StrCat("the tables' strings exceed ", kMaxStringBytes,
                                              " bytes in all (at a ", what, " string)"));
    }
    return text;
  }

  MemoryReader& reader_;
  absl::flat_hash_map<uint64_t, std::string> strings_;
  size_t string_bytes_ = 0;
};

// The layout of one table's entries: its stride and the offsets of the members read, each checked
// to leave room for its 8 bytes (a pointer, or a value read as 8 bytes) inside the stride.
struct EntryLayout {
  uint64_t stride = 0;
  std::vector<uint64_t> offsets;
};

absl::StatusOr<EntryLayout> ReadEntryLayout(TableReader& reader, const JvmProcess& jvm,
                                            absl::string_view table, uint64_t stride_symbol,
                                            std::initializer_list<uint64_t> offset_symbols) {
  EntryLayout layout;
  absl::StatusOr<uint64_t> stride =
      reader.ReadU64(jvm.ToProcess(stride_symbol), absl::StrCat(table, " stride"));
  if (!stride.ok()) return stride.status();
  if (*stride == 0) {
    return absl::UnavailableError(
        absl::StrCat(table, " entry stride is 0: the VM structure tables are not ready yet"));
  }
  // Every member read is 8 bytes, so a stride below 8 cannot hold one.
  if (*stride < 8 || *stride > kMaxEntryStride) {
    return absl::DataLossError(
        absl::StrCat(table, " entry stride ", *stride, " is outside [8, ", kMaxEntryStride, "]"));
  }
  layout.stride = *stride;
  for (uint64_t symbol : offset_symbols) {
    absl::StatusOr<uint64_t> offset =
        reader.ReadU64(jvm.ToProcess(symbol), absl::StrCat(table, " member offset"));
    if (!offset.ok()) return offset.status();
    if (*offset > layout.stride || layout.stride - *offset < 8) {
      return absl::DataLossError(absl::StrCat(table, " member offset ", *offset,
                                              " leaves no 8 bytes in its stride ", layout.stride));
    }
    layout.offsets.push_back(*offset);
  }
  return layout;
}

uint64_t Word(const std::vector<uint8_t>& row, uint64_t offset) {
  uint64_t value;
  std::memcpy(&value, row.data() + offset, sizeof(value));
  return value;
}

// Walks one table from the address its table symbol holds: calls `parse(row)` for each entry
// until the first whose name pointer (offsets[0]) is null.
template <typename Parse>
absl::Status ForEachEntry(TableReader& reader, const JvmProcess& jvm, absl::string_view table,
                          uint64_t table_symbol, const EntryLayout& layout, Parse parse) {
  absl::StatusOr<uint64_t> base =
      reader.ReadU64(jvm.ToProcess(table_symbol), absl::StrCat(table, " pointer"));
  if (!base.ok()) return base.status();
  if (*base == 0) {
    return absl::UnavailableError(
        absl::StrCat(table, " is null: the VM structure tables are not ready yet"));
  }
  std::vector<uint8_t> row(layout.stride);
  for (size_t i = 0; i < kMaxEntries; ++i) {
    const uint64_t address = *base + i * layout.stride;
    if (absl::Status s =
            reader.Read(address, row.data(), row.size(), absl::StrCat(table, " entry"));
        !s.ok()) {
      return s;
    }
    if (Word(row, layout.offsets[0]) == 0) return absl::OkStatus();
    if (absl::Status s = parse(row); !s.ok()) return s;
  }
  return absl::DataLossError(
      absl::StrCat(table, " has no terminating entry within ", kMaxEntries, " entries"));
}

}  // namespace

bool IsNotReady(const absl::Status& status) { return OutcomeOf(status) == JvmOutcome::kNotReady; }

namespace {

// Every error made here, tagged by its code (each code has one meaning in this file).
absl::Status Tagged(absl::Status status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return status;
    case absl::StatusCode::kUnavailable:
      return WithOutcome(std::move(status), JvmOutcome::kNotReady);
    case absl::StatusCode::kFailedPrecondition:
      return WithOutcome(std::move(status), JvmOutcome::kUnreadableProcess);
    default:
      return WithOutcome(std::move(status), JvmOutcome::kUnsupported);
  }
}

absl::StatusOr<VMTables> ReadTables(MemoryReader& memory, const JvmProcess& jvm);

}  // namespace

absl::StatusOr<VMTables> ReadVMTables(MemoryReader& memory, const JvmProcess& jvm) {
  absl::StatusOr<VMTables> tables = ReadTables(memory, jvm);
  if (!tables.ok()) return Tagged(tables.status());
  return tables;
}

namespace {

absl::StatusOr<VMTables> ReadTables(MemoryReader& memory, const JvmProcess& jvm) {
  const VMStructsSymbols& sym = jvm.libjvm->symbols;
  TableReader reader(memory);
  VMTables tables;

  absl::StatusOr<EntryLayout> structs =
      ReadEntryLayout(reader, jvm, "gHotSpotVMStructs", sym.struct_stride,
                      {sym.struct_type_name, sym.struct_field_name, sym.struct_type_string,
                       sym.struct_is_static, sym.struct_offset, sym.struct_address});
  if (!structs.ok()) return structs.status();
  absl::StatusOr<EntryLayout> types =
      ReadEntryLayout(reader, jvm, "gHotSpotVMTypes", sym.type_stride,
                      {sym.type_type_name, sym.type_superclass_name, sym.type_size});
  if (!types.ok()) return types.status();
  absl::StatusOr<EntryLayout> ints = ReadEntryLayout(reader, jvm, "gHotSpotVMIntConstants",
                                                     sym.int_stride, {sym.int_name, sym.int_value});
  if (!ints.ok()) return ints.status();
  absl::StatusOr<EntryLayout> longs = ReadEntryLayout(
      reader, jvm, "gHotSpotVMLongConstants", sym.long_stride, {sym.long_name, sym.long_value});
  if (!longs.ok()) return longs.status();

  absl::Status status = ForEachEntry(
      reader, jvm, "gHotSpotVMStructs", sym.structs, *structs,
      [&](const std::vector<uint8_t>& row) -> absl::Status {
        const std::vector<uint64_t>& o = structs->offsets;
        VMStructRow entry;
        for (auto [index, out] : {std::pair{0, &entry.type_name}, std::pair{1, &entry.field_name},
                                  std::pair{2, &entry.type_string}}) {
          absl::StatusOr<std::string> text = reader.ReadString(Word(row, o[index]), "VMStructs");
          if (!text.ok()) return text.status();
          *out = *std::move(text);
        }
        uint32_t is_static;
        std::memcpy(&is_static, row.data() + o[3], sizeof(is_static));
        entry.is_static = is_static != 0;
        entry.offset = Word(row, o[4]);
        entry.address = Word(row, o[5]);
        tables.structs.push_back(std::move(entry));
        return absl::OkStatus();
      });
  if (!status.ok()) return status;

  status = ForEachEntry(
      reader, jvm, "gHotSpotVMTypes", sym.types, *types,
      [&](const std::vector<uint8_t>& row) -> absl::Status {
        const std::vector<uint64_t>& o = types->offsets;
        VMTypeRow entry;
        absl::StatusOr<std::string> name = reader.ReadString(Word(row, o[0]), "VMTypes");
        if (!name.ok()) return name.status();
        absl::StatusOr<std::string> super = reader.ReadString(Word(row, o[1]), "VMTypes");
        if (!super.ok()) return super.status();
        entry.type_name = *std::move(name);
        entry.superclass_name = *std::move(super);
        entry.size = Word(row, o[2]);
        tables.types.push_back(std::move(entry));
        return absl::OkStatus();
      });
  if (!status.ok()) return status;

  status = ForEachEntry(reader, jvm, "gHotSpotVMIntConstants", sym.int_constants, *ints,
                        [&](const std::vector<uint8_t>& row) -> absl::Status {
                          absl::StatusOr<std::string> name =
                              reader.ReadString(Word(row, ints->offsets[0]), "VMIntConstants");
                          if (!name.ok()) return name.status();
                          int32_t value;
                          std::memcpy(&value, row.data() + ints->offsets[1], sizeof(value));
                          tables.int_constants.emplace_back(*std::move(name), value);
                          return absl::OkStatus();
                        });
  if (!status.ok()) return status;

  status = ForEachEntry(reader, jvm, "gHotSpotVMLongConstants", sym.long_constants, *longs,
                        [&](const std::vector<uint8_t>& row) -> absl::Status {
                          absl::StatusOr<std::string> name =
                              reader.ReadString(Word(row, longs->offsets[0]), "VMLongConstants");
                          if (!name.ok()) return name.status();
                          tables.long_constants.emplace_back(*std::move(name),
                                                             Word(row, longs->offsets[1]));
                          return absl::OkStatus();
                        });
  if (!status.ok()) return status;
  return tables;
}

// Looks entries up by name and keeps the first error, so the caller can ask for every field
// and report the first one missing.
class Resolver {
 public:
  Resolver(const VMTables& tables, uint64_t bias) : bias_(bias) {
    for (const VMStructRow& row : tables.structs) {
      structs_.try_emplace(absl::StrCat(row.type_name, "::", row.field_name), &row);
    }
    for (const VMTypeRow& row : tables.types) types_.try_emplace(row.type_name, row.size);
    for (const auto& [name, value] : tables.int_constants) ints_.try_emplace(name, value);
  }

  const absl::Status& status() const { return status_; }

  bool Has(absl::string_view type, absl::string_view field) const {
    return structs_.contains(absl::StrCat(type, "::", field));
  }
  bool HasInt(absl::string_view name) const { return ints_.contains(name); }

  // A non-static field; absent (and the error kept when `required`) when the tables lack it.
  Field Get(absl::string_view type, absl::string_view field, bool required = true) {
    const std::string name = absl::StrCat(type, "::", field);
    auto it = structs_.find(name);
    if (it == structs_.end()) {
      if (required) Missing(name);
      return Field{};
    }
    const VMStructRow& row = *it->second;
    if (row.is_static) {
      Malformed(absl::StrCat(name, " is static where a field was expected"));
      return Field{};
    }
    auto size = types_.find(type);
    if (size == types_.end()) {
      Missing(absl::StrCat("type ", type));
      return Field{};
    }
    const uint8_t width = Width(row.type_string);
    if (size->second == 0 || size->second > kMaxTypeSize || row.offset >= size->second ||
        row.offset + width > size->second) {
      Malformed(absl::StrCat(name, " at offset ", row.offset, " (", static_cast<int>(width),
                             " bytes) does not fit its type's size ", size->second));
      return Field{};
    }
    return Field{static_cast<uint32_t>(row.offset), width};
  }

  // The first of `candidates` (type, field) the tables hold; with `required`, the error names
  // the first candidate.
  Field First(std::initializer_list<std::pair<absl::string_view, absl::string_view>> candidates,
              bool required = true) {
    for (const auto& [type, field] : candidates) {
      if (Has(type, field)) return Get(type, field);
    }
    if (required) {
      Missing(absl::StrCat(candidates.begin()->first, "::", candidates.begin()->second));
    }
    return Field{};
  }

  // A static's ELF address.
  uint64_t Static(absl::string_view type, absl::string_view field) {
    const std::string name = absl::StrCat(type, "::", field);
    auto it = structs_.find(name);
    if (it == structs_.end()) {
      Missing(name);
      return 0;
    }
    const VMStructRow& row = *it->second;
    if (!row.is_static || row.address == 0 || row.address < bias_) {
      Malformed(absl::StrFormat("%s is no static of libjvm (address 0x%x)", name, row.address));
      return 0;
    }
    return row.address - bias_;
  }

  uint32_t TypeSize(absl::string_view type) {
    auto it = types_.find(type);
    if (it == types_.end()) {
      Missing(absl::StrCat("type ", type));
      return kAbsent;
    }
    if (it->second == 0 || it->second > kMaxTypeSize) {
      Malformed(absl::StrCat("type ", type, " has size ", it->second));
      return kAbsent;
    }
    return static_cast<uint32_t>(it->second);
  }

  std::optional<int32_t> Int(absl::string_view name, bool required = true) {
    auto it = ints_.find(name);
    if (it == ints_.end()) {
      if (required) Missing(name);
      return std::nullopt;
    }
    return it->second;
  }

  void Missing(absl::string_view name) {
    if (status_.ok()) {
      status_ = absl::UnimplementedError(
          absl::StrCat("the VM structure tables lack ", name, ", which the layout needs"));
    }
  }
  void Malformed(absl::string_view what) {
    if (status_.ok()) status_ = absl::DataLossError(what);
  }

  // Bytes a field of C++ type `type_string` takes: 8 for a pointer, else the size the types
  // table gives the type when it is 1, 2, 4 or 8; 0 (not a scalar: an embedded struct, an array)
  // otherwise.
  uint8_t Width(absl::string_view type_string) const {
    absl::string_view t = type_string;
    while (absl::ConsumePrefix(&t, "const ") || absl::ConsumePrefix(&t, "volatile ")) {
    }
    if (absl::EndsWith(t, "*")) return 8;
    auto it = types_.find(t);
    if (it == types_.end()) return 0;
    switch (it->second) {
      case 1:
      case 2:
      case 4:
      case 8:
        return static_cast<uint8_t>(it->second);
      default:
        return 0;
    }
  }

 private:
  uint64_t bias_;
  absl::flat_hash_map<std::string, const VMStructRow*> structs_;
  absl::flat_hash_map<std::string, uint64_t> types_;
  absl::flat_hash_map<std::string, int32_t> ints_;
  absl::Status status_;
};

absl::StatusOr<HotSpotLayout> Resolve(const VMTables& tables, uint64_t bias, MemoryReader& reader) {
  Resolver r(tables, bias);
  HotSpotLayout l;

  // Version: ints in libjvm's .data, read from the process.
  const char* const kVersion[] = {"_vm_major_version", "_vm_minor_version", "_vm_security_version",
                                  "_vm_build_number"};
  uint32_t* const version_out[] = {&l.major, &l.minor, &l.security, &l.build};
  for (size_t i = 0; i < 4; ++i) {
    const uint64_t address = r.Static("Abstract_VM_Version", kVersion[i]);
    if (!r.status().ok()) return r.status();
    int32_t value = 0;
    if (!reader.Read(address + bias, &value, sizeof(value))) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot read Abstract_VM_Version::", kVersion[i]));
    }
    *version_out[i] = static_cast<uint32_t>(std::max(value, 0));
  }

  l.statics.code_cache_heaps = r.Static("CodeCache", "_heaps");
  l.statics.code_cache_low_bound = r.Static("CodeCache", "_low_bound");
  l.statics.code_cache_high_bound = r.Static("CodeCache", "_high_bound");
  l.statics.interpreter_code = r.Static("AbstractInterpreter", "_code");
  l.statics.call_stub_return_address = r.Static("StubRoutines", "_call_stub_return_address");

  l.growable_array_data = r.Get("GrowableArray<int>", "_data");
  l.growable_array_len = r.First({{"GrowableArrayBase", "_len"}, {"GenericGrowableArray", "_len"}});

  l.code_heap_memory = r.Get("CodeHeap", "_memory");
  l.code_heap_segmap = r.Get("CodeHeap", "_segmap");
  l.code_heap_log2_segment_size = r.Get("CodeHeap", "_log2_segment_size");
  l.virtual_space_low_boundary = r.Get("VirtualSpace", "_low_boundary");
  l.virtual_space_high_boundary = r.Get("VirtualSpace", "_high_boundary");
  l.virtual_space_low = r.Get("VirtualSpace", "_low");
  l.virtual_space_high = r.Get("VirtualSpace", "_high");
  l.heap_block_size = r.TypeSize("HeapBlock");

  l.blob_name = r.Get("CodeBlob", "_name");
  l.blob_size = r.Get("CodeBlob", "_size");
  l.blob_frame_size = r.Get("CodeBlob", "_frame_size");
  l.blob_frame_complete_offset = r.Get("CodeBlob", "_frame_complete_offset");
  if (r.Has("CodeBlob", "_code_begin")) {
    l.blob_code_begin = r.Get("CodeBlob", "_code_begin");
    l.blob_code_end = r.Get("CodeBlob", "_code_end");
  } else {
    l.code_as_offsets = true;
    l.blob_code_begin = r.Get("CodeBlob", "_code_offset");
    l.blob_code_end = r.Get("CodeBlob", "_data_offset");
  }
  if (r.Has("CodeBlob", "_kind") && r.HasInt("CodeBlobKind::Nmethod")) {
    l.blob_kind = r.Get("CodeBlob", "_kind");
    l.kind_nmethod = r.Int("CodeBlobKind::Nmethod").value_or(-1);
    l.kind_vtable = r.Int("CodeBlobKind::Vtable").value_or(-1);
  }
  l.code_blob_size = r.TypeSize("CodeBlob");

  l.nmethod_method = r.First({{"nmethod", "_method"}, {"CompiledMethod", "_method"}});
  l.nmethod_compile_id = r.Get("nmethod", "_compile_id");
  l.nmethod_orig_pc_offset = r.Get("nmethod", "_orig_pc_offset");
  if (r.Has("CompiledMethod", "_deopt_handler_begin") || r.Has("nmethod", "_deopt_handler_begin")) {
    l.nmethod_deopt_handler =
        r.First({{"nmethod", "_deopt_handler_begin"}, {"CompiledMethod", "_deopt_handler_begin"}});
  } else {
    l.deopt_handler_as_offset = true;
    l.nmethod_deopt_handler =
        r.First({{"nmethod", "_deopt_handler_offset"}, {"nmethod", "_deopt_handler_entry_offset"}});
  }
  l.nmethod_size = r.TypeSize("nmethod");

  // Scopes: the pre-23 set or the 25 set, whichever this build has.
  if (r.Has("nmethod", "_immutable_data")) {
    l.nmethod_immutable_data = r.Get("nmethod", "_immutable_data");
    l.nmethod_immutable_data_size = r.Get("nmethod", "_immutable_data_size");
    l.nmethod_scopes_data_offset = r.Get("nmethod", "_scopes_data_offset");
    l.nmethod_scopes_pcs_offset = r.Get("nmethod", "_scopes_pcs_offset");
    l.blob_mutable_data = r.Get("CodeBlob", "_mutable_data");
    l.blob_mutable_data_size = r.Get("CodeBlob", "_mutable_data_size");
    l.blob_relocation_size = r.Get("CodeBlob", "_relocation_size");
  } else {
    l.nmethod_metadata_offset = r.Get("nmethod", "_metadata_offset");
    l.nmethod_scopes_data_begin =
        r.First({{"CompiledMethod", "_scopes_data_begin"}, {"nmethod", "_scopes_data_begin"}});
    l.nmethod_scopes_pcs_offset = r.Get("nmethod", "_scopes_pcs_offset");
    l.nmethod_dependencies_offset = r.Get("nmethod", "_dependencies_offset");
  }
  l.pc_desc_pc_offset = r.Get("PcDesc", "_pc_offset");
  l.pc_desc_scope_decode_offset = r.Get("PcDesc", "_scope_decode_offset");
  l.pc_desc_size = r.TypeSize("PcDesc");

  l.method_const_method = r.Get("Method", "_constMethod");
  l.const_method_constants = r.Get("ConstMethod", "_constants");
  l.const_method_code_size = r.Get("ConstMethod", "_code_size");
  l.const_method_name_index = r.Get("ConstMethod", "_name_index");
  l.const_method_signature_index = r.Get("ConstMethod", "_signature_index");
  l.const_method_flags = r.First({{"ConstMethod", "_flags._flags"}, {"ConstMethod", "_flags"}});
  l.const_method_size = r.TypeSize("ConstMethod");
  if (std::optional<int32_t> bit = r.Int("ConstMethodFlags::_misc_has_linenumber_table", false)) {
    l.has_linenumber_table_flag = static_cast<uint32_t>(*bit);
  } else if (std::optional<int32_t> old = r.Int("ConstMethod::_has_linenumber_table", false)) {
    l.has_linenumber_table_flag = static_cast<uint32_t>(*old);
  }
  l.constant_pool_pool_holder = r.Get("ConstantPool", "_pool_holder");
  l.constant_pool_size = r.TypeSize("ConstantPool");
  if (r.Has("ConstantPool", "_source_file_name_index")) {
    l.constant_pool_source_file_name_index = r.Get("ConstantPool", "_source_file_name_index");
  } else {
    l.instance_klass_source_file_name_index = r.Get("InstanceKlass", "_source_file_name_index");
  }
  l.klass_name = r.Get("Klass", "_name");
  if (r.Has("Symbol", "_length")) {
    l.symbol_length = r.Get("Symbol", "_length");
  } else {
    // JDK 11: the length is the upper u2 of _length_and_refcount.
    Field both = r.Get("Symbol", "_length_and_refcount");
    if (both.present()) l.symbol_length = Field{both.offset + 2, 2};
  }
  l.symbol_body = r.Get("Symbol", "_body");

  l.stub_queue_stub_buffer = r.Get("StubQueue", "_stub_buffer");
  l.stub_queue_buffer_limit = r.Get("StubQueue", "_buffer_limit");

  l.interpreter_frame_sender_sp_offset =
      r.Int("frame::interpreter_frame_sender_sp_offset").value_or(0);
  l.interpreter_frame_last_sp_offset = r.Int("frame::interpreter_frame_last_sp_offset").value_or(0);
  l.entry_frame_call_wrapper_offset =
      r.Int("frame::entry_frame_call_wrapper_offset", false).value_or(0);

  // UNSIGNED5 excludes byte 0 from JDK 20 on.
  l.unsigned5_excluded = l.major >= 20 ? 1 : 0;
  if (!r.status().ok()) return r.status();
  return l;
}

}  // namespace

absl::StatusOr<HotSpotLayout> ResolveLayout(const VMTables& tables, uint64_t bias,
                                            MemoryReader& reader) {
  absl::StatusOr<HotSpotLayout> layout = Resolve(tables, bias, reader);
  if (!layout.ok()) return Tagged(layout.status());
  return layout;
}

absl::StatusOr<HotSpotLayout> ReadHotSpotLayout(MemoryReader& reader, const JvmProcess& jvm) {
  absl::StatusOr<VMTables> tables = ReadVMTables(reader, jvm);
  if (!tables.ok()) return tables.status();
  return ResolveLayout(*tables, jvm.bias, reader);
}

absl::StatusOr<std::shared_ptr<const HotSpotLayout>> LayoutCache::Get(MemoryReader& reader,
                                                                      const JvmProcess& jvm) {
  const std::string& build_id = jvm.libjvm->build_id;
  if (!build_id.empty()) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->build_id != build_id) continue;
      std::shared_ptr<const HotSpotLayout> layout = it->layout;
      std::rotate(it, it + 1, entries_.end());
      return layout;
    }
  }
  absl::StatusOr<HotSpotLayout> layout = ReadHotSpotLayout(reader, jvm);
  if (!layout.ok()) return layout.status();
  auto shared = std::make_shared<const HotSpotLayout>(*std::move(layout));
  if (!build_id.empty() && capacity_ > 0) {
    if (entries_.size() >= capacity_) entries_.erase(entries_.begin());
    entries_.push_back(Entry{build_id, shared});
  }
  return shared;
}

}  // namespace ember::hotspot
