// What of a HotSpot JVM's (JDK 11 to 25, x86-64) own structures the frame walk and the method
// namer read: field offsets, type sizes, constants and where its statics lie, all as the JVM
// exports them in its VM structure tables (gHotSpotVMStructs, gHotSpotVMTypes,
// gHotSpotVMIntConstants, gHotSpotVMLongConstants; see vm_structs.h), never from tables per JDK
// version. Where JDKs differ, which form a build has is decided by which entries its tables
// hold. One layout per libjvm file (by build id); the statics are ELF addresses, to which each
// process adds its own load bias.
#pragma once

#include <cstdint>

namespace ember::hotspot {

// An offset, size or address the tables of this build do not hold.
inline constexpr uint32_t kAbsent = 0xffffffff;

// A field read from target memory: its byte offset in its struct and its width in bytes (1, 2, 4
// or 8, from the type string the table gives it).
struct Field {
  uint32_t offset = kAbsent;
  uint8_t width = 0;
  bool present() const { return offset != kAbsent; }
};

struct HotSpotLayout {
  // Abstract_VM_Version's statics, read from the process (0 while unknown).
  uint32_t major = 0;  // 17 for 17.0.15
  uint32_t minor = 0;
  uint32_t security = 0;
  uint32_t build = 0;

  // ELF addresses (add the process's libjvm load bias) of the statics read per process.
  struct Statics {
    uint64_t code_cache_heaps = 0;          // CodeCache::_heaps (GrowableArray<CodeHeap*>*)
    uint64_t code_cache_low_bound = 0;      // CodeCache::_low_bound (address)
    uint64_t code_cache_high_bound = 0;     // CodeCache::_high_bound (address)
    uint64_t interpreter_code = 0;          // AbstractInterpreter::_code (StubQueue*)
    uint64_t call_stub_return_address = 0;  // StubRoutines::_call_stub_return_address (address)
  } statics;

  // GrowableArray<CodeHeap*>: _data (GrowableArray<int>._data), _len (GrowableArrayBase._len,
  // or GenericGrowableArray._len before JDK 16).
  Field growable_array_data;
  Field growable_array_len;

  // CodeHeap: _memory and _segmap (VirtualSpace, embedded), _log2_segment_size (int).
  Field code_heap_memory;
  Field code_heap_segmap;
  Field code_heap_log2_segment_size;
  // VirtualSpace: the reserved range [_low_boundary, _high_boundary) and the committed [_low,
  // _high).
  Field virtual_space_low_boundary;
  Field virtual_space_high_boundary;
  Field virtual_space_low;
  Field virtual_space_high;
  // sizeof(HeapBlock): the header before each blob in a code heap (16 in 17, 8 in 25).
  uint32_t heap_block_size = kAbsent;

  // CodeBlob.
  Field blob_name;                   // const char*
  Field blob_size;                   // int
  Field blob_frame_size;             // int, in words
  Field blob_frame_complete_offset;  // int (int16_t in 25)
  // Where the code lies: pointers before JDK 23 (_code_begin, _code_end), int offsets from the
  // blob's start from 23 (_code_offset, _data_offset: the code ends where the data starts).
  bool code_as_offsets = false;
  Field blob_code_begin;  // _code_begin or _code_offset
  Field blob_code_end;    // _code_end or _data_offset
  // _kind (CodeBlobKind, JDK 23+) and its values; absent before, where the name tells the kind.
  Field blob_kind;
  int32_t kind_nmethod = -1;          // CodeBlobKind::Nmethod
  int32_t kind_vtable = -1;           // CodeBlobKind::Vtable
  uint32_t code_blob_size = kAbsent;  // sizeof(CodeBlob)

  // nmethod (and CompiledMethod, its base before JDK 23).
  Field nmethod_method;          // Method* (CompiledMethod._method before 23)
  Field nmethod_compile_id;      // int
  Field nmethod_orig_pc_offset;  // int: where a deoptimized frame keeps its original pc
  // The deopt handler: a pointer (CompiledMethod._deopt_handler_begin) before 25, an int offset
  // from the blob's start (nmethod._deopt_handler_offset) from 25.
  bool deopt_handler_as_offset = false;
  Field nmethod_deopt_handler;
  uint32_t nmethod_size = kAbsent;  // sizeof(nmethod)

  // Scope descriptors of an nmethod (inlining), before JDK 23: metadata at blob +
  // _metadata_offset up to _scopes_data_begin (pointer), scopes data from there up to blob +
  // _scopes_pcs_offset, PcDescs from there up to blob + _dependencies_offset.
  Field nmethod_metadata_offset;
  Field nmethod_scopes_data_begin;
  Field nmethod_scopes_pcs_offset;
  Field nmethod_dependencies_offset;
  // From JDK 25: PcDescs at _immutable_data + _scopes_pcs_offset, scopes data at _immutable_data
  // + _scopes_data_offset, both within _immutable_data_size; metadata at CodeBlob._mutable_data +
  // _relocation_size, up to _mutable_data_size.
  Field nmethod_immutable_data;
  Field nmethod_immutable_data_size;
  Field nmethod_scopes_data_offset;
  Field blob_mutable_data;
  Field blob_mutable_data_size;
  Field blob_relocation_size;
  // PcDesc.
  Field pc_desc_pc_offset;            // int
  Field pc_desc_scope_decode_offset;  // int
  uint32_t pc_desc_size = kAbsent;    // sizeof(PcDesc)

  // Method, ConstMethod (the bytecodes follow it, then the compressed line number table).
  Field method_const_method;  // ConstMethod*
  Field const_method_constants;
  Field const_method_code_size;
  Field const_method_name_index;
  Field const_method_signature_index;
  Field const_method_flags;  // _flags (u2, before 21) or _flags._flags (u4)
  uint32_t const_method_size = kAbsent;
  uint32_t has_linenumber_table_flag = 0;  // the bit of const_method_flags; 0 when unknown
  // ConstantPool: slots of 8 bytes follow it; a Symbol* slot has its low bit as a tag.
  Field constant_pool_pool_holder;  // InstanceKlass*
  Field constant_pool_source_file_name_index;
  uint32_t constant_pool_size = kAbsent;
  Field instance_klass_source_file_name_index;  // before JDK 15, instead of the pool's
  Field klass_name;                             // Symbol*
  // Symbol: a u2 length (the upper half of _length_and_refcount in JDK 11), then the modified
  // UTF-8 bytes at _body.
  Field symbol_length;
  Field symbol_body;

  // The interpreter's code: StubQueue._stub_buffer (address) and _buffer_limit (int, bytes).
  Field stub_queue_stub_buffer;
  Field stub_queue_buffer_limit;

  // frame:: constants (words from the frame pointer), checked against the slots the walk uses.
  int32_t interpreter_frame_sender_sp_offset = 0;  // -1 on x86-64
  int32_t interpreter_frame_last_sp_offset = 0;    // -2 on x86-64
  int32_t entry_frame_call_wrapper_offset = 0;     // -6 on x86-64

  // UNSIGNED5's excluded low byte values: 1 from JDK 20 (byte 0 never appears), 0 before.
  uint8_t unsigned5_excluded = 0;
};

}  // namespace ember::hotspot
