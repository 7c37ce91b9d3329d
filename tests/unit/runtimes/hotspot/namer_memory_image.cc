// The synthetic JVM image: writers follow the JDK's definitions (utilities/unsigned5.hpp,
// oops/method.cpp CompressedLineNumberWriteStream, code/debugInfoRec.cpp).
#include "namer_memory_image.h"

#include <climits>
#include <cstring>
#include <stdexcept>

namespace ember::hotspot::testing {
namespace {

constexpr uint64_t kPage = 4096;

}  // namespace

void WriteUnsigned5(uint32_t value, uint8_t excluded, std::vector<uint8_t>* out) {
  const uint32_t x = excluded;
  const uint32_t low = 256 - 64 - x;
  uint32_t sum = value;
  for (int i = 0;; ++i) {
    if (sum < low || i == 4) {
      out->push_back(static_cast<uint8_t>(x + sum));
      return;
    }
    sum -= low;
    out->push_back(static_cast<uint8_t>(x + low + (sum % 64)));
    sum >>= 6;
  }
}

void WriteSigned5(int32_t value, uint8_t excluded, std::vector<uint8_t>* out) {
  const uint32_t v = static_cast<uint32_t>(value);
  WriteUnsigned5((v << 1) ^ static_cast<uint32_t>(value >> 31), excluded, out);
}

std::vector<uint8_t> EncodeLineTable(const std::vector<std::pair<int32_t, int32_t>>& pairs,
                                     uint8_t excluded) {
  std::vector<uint8_t> out;
  int32_t last_bci = 0;
  int32_t last_line = 0;
  for (auto [bci, line] : pairs) {
    const int32_t bci_delta = bci - last_bci;
    const int32_t line_delta = line - last_line;
    last_bci = bci;
    last_line = line;
    if (bci_delta == 0 && line_delta == 0) continue;
    if ((bci_delta & ~0x1F) == 0 && (line_delta & ~0x7) == 0) {
      const uint8_t value = static_cast<uint8_t>((bci_delta << 3) | line_delta);
      if (value != 0xFF) {
        out.push_back(value);
        continue;
      }
    }
    out.push_back(0xFF);
    WriteSigned5(bci_delta, excluded, &out);
    WriteSigned5(line_delta, excluded, &out);
  }
  out.push_back(0);
  return out;
}

int32_t ScopesWriter::Add(int32_t sender, uint32_t method_index, int32_t bci) {
  return AddRaw(static_cast<uint32_t>(sender), method_index, static_cast<uint32_t>(bci + 1));
}

int32_t ScopesWriter::AddRaw(uint32_t sender, uint32_t method_index, uint32_t bci_plus_one) {
  const int32_t offset = static_cast<int32_t>(bytes_.size());
  WriteUnsigned5(sender, excluded_, &bytes_);
  WriteUnsigned5(method_index, excluded_, &bytes_);
  WriteUnsigned5(bci_plus_one, excluded_, &bytes_);
  // Locals, expressions and monitors offsets: none.
  for (int i = 0; i < 3; ++i) WriteUnsigned5(0, excluded_, &bytes_);
  return offset;
}

std::vector<uint8_t> EncodePcDescs(const std::vector<std::pair<int32_t, int32_t>>& descs) {
  std::vector<std::pair<int32_t, int32_t>> all;
  all.emplace_back(-1, 0);
  all.insert(all.end(), descs.begin(), descs.end());
  all.emplace_back(INT_MAX, 0);
  std::vector<uint8_t> out(all.size() * 16, 0);
  for (size_t i = 0; i < all.size(); ++i) {
    std::memcpy(&out[i * 16], &all[i].first, 4);
    std::memcpy(&out[i * 16 + 4], &all[i].second, 4);
  }
  return out;
}

bool FakeMemory::Read(uint64_t address, void* out, size_t size) {
  ++reads_;
  largest_read_ = std::max(largest_read_, size);
  auto it = regions_.upper_bound(address);
  if (it == regions_.begin()) return false;
  --it;
  const uint64_t start = it->first;
  const std::vector<uint8_t>& bytes = it->second;
  if (address - start > bytes.size() || size > bytes.size() - (address - start)) return false;
  std::memcpy(out, bytes.data() + (address - start), size);
  return true;
}

void FakeMemory::Map(uint64_t address, size_t size) { regions_[address].assign(size, 0); }

void FakeMemory::Unmap(uint64_t address) { regions_.erase(address); }

void FakeMemory::Write(uint64_t address, const void* data, size_t size) {
  if (size == 0) return;  // an empty table's data may be null, which memcpy must not be given
  auto it = regions_.upper_bound(address);
  if (it == regions_.begin()) throw std::out_of_range("write outside the image");
  --it;
  std::vector<uint8_t>& bytes = it->second;
  if (address - it->first > bytes.size() || size > bytes.size() - (address - it->first)) {
    throw std::out_of_range("write outside the image");
  }
  std::memcpy(bytes.data() + (address - it->first), data, size);
}

HotSpotLayout NamerLayout(Jdk jdk) {
  HotSpotLayout layout;
  const bool v25 = jdk == Jdk::k25;
  layout.major = v25 ? 25 : 17;
  layout.unsigned5_excluded = v25 ? 1 : 0;
  // Type sizes: /work dumps of Debian's 17.0.15 and Temurin's 25.0.3 (17.types.txt, 25.types.txt).
  layout.const_method_size = v25 ? 56 : 48;
  layout.constant_pool_size = 72;
  layout.pc_desc_size = 16;
  layout.nmethod_size = v25 ? 224 : 352;
  // Offsets: the image's own.
  layout.method_const_method = {8, 8};
  layout.const_method_constants = {8, 8};
  layout.const_method_flags = v25 ? Field{28, 4} : Field{28, 2};
  layout.const_method_code_size = {32, 2};
  layout.const_method_name_index = {34, 2};
  layout.const_method_signature_index = {36, 2};
  layout.has_linenumber_table_flag = 1;
  layout.constant_pool_pool_holder = {24, 8};
  layout.constant_pool_source_file_name_index = {66, 2};
  layout.klass_name = {16, 8};
  layout.symbol_length = {4, 2};
  layout.symbol_body = {6, 1};
  layout.pc_desc_pc_offset = {0, 4};
  layout.pc_desc_scope_decode_offset = {4, 4};
  layout.nmethod_method = {v25 ? 64u : 104u, 8};
  layout.nmethod_compile_id = {v25 ? 180u : 300u, 4};
  if (v25) {
    layout.blob_mutable_data = {40, 8};
    layout.blob_mutable_data_size = {48, 4};
    layout.blob_relocation_size = {52, 4};
    layout.nmethod_immutable_data = {160, 8};
    layout.nmethod_immutable_data_size = {168, 4};
    layout.nmethod_scopes_pcs_offset = {172, 4};
    layout.nmethod_scopes_data_offset = {176, 4};
    layout.code_as_offsets = true;
    layout.blob_code_begin = {24, 4};  // _code_offset
    layout.blob_code_end = {28, 4};    // _data_offset
  } else {
    layout.blob_code_begin = {56, 8};
    layout.blob_code_end = {64, 8};
    layout.nmethod_scopes_data_begin = {120, 8};
    layout.nmethod_metadata_offset = {200, 4};
    layout.nmethod_scopes_pcs_offset = {204, 4};
    layout.nmethod_dependencies_offset = {208, 4};
  }
  return layout;
}

JvmImage::JvmImage(Jdk jdk) : jdk_(jdk), layout_(NamerLayout(jdk)) {}

uint64_t JvmImage::Alloc(size_t size) {
  const uint64_t address = next_;
  const uint64_t mapped = (size + kPage - 1) / kPage * kPage;
  memory_.Map(address, mapped);
  next_ += mapped + kPage;
  return address;
}

uint64_t JvmImage::AddSymbol(std::string_view bytes) {
  const uint64_t symbol = Alloc(layout_.symbol_body.offset + bytes.size());
  memory_.Put<uint32_t>(symbol, 1);  // hash and refcount
  memory_.Put<uint16_t>(symbol + layout_.symbol_length.offset, static_cast<uint16_t>(bytes.size()));
  memory_.Write(symbol + layout_.symbol_body.offset, bytes.data(), bytes.size());
  return symbol;
}

JavaClass JvmImage::AddClass(std::string_view internal_name, std::string_view source_file) {
  JavaClass java_class;
  java_class.klass = Alloc(208);
  java_class.pool = Alloc(layout_.constant_pool_size + 8 * 256);
  memory_.Put<uint64_t>(java_class.klass + layout_.klass_name.offset, AddSymbol(internal_name));
  memory_.Put<uint64_t>(java_class.pool + layout_.constant_pool_pool_holder.offset,
                        java_class.klass);
  if (!source_file.empty()) {
    const uint16_t slot = AddPoolSymbol(java_class, AddSymbol(source_file));
    memory_.Put<uint16_t>(java_class.pool + layout_.constant_pool_source_file_name_index.offset,
                          slot);
  }
  return java_class;
}

uint16_t JvmImage::AddPoolSymbol(JavaClass& java_class, uint64_t symbol) {
  const uint16_t slot = java_class.next_slot++;
  memory_.Put<uint64_t>(java_class.pool + layout_.constant_pool_size + 8 * slot, symbol | 1);
  return slot;
}

uint64_t JvmImage::AddMethod(JavaClass& java_class, const MethodSpec& spec) {
  const std::vector<uint8_t> table = spec.lines.empty()
                                         ? std::vector<uint8_t>{}
                                         : EncodeLineTable(spec.lines, layout_.unsigned5_excluded);
  const uint64_t const_method = Alloc(layout_.const_method_size + spec.code_size + table.size());
  const uint64_t method = Alloc(88);
  memory_.Put<uint64_t>(method + layout_.method_const_method.offset, const_method);
  memory_.Put<uint64_t>(const_method + layout_.const_method_constants.offset, java_class.pool);
  memory_.Put<uint16_t>(const_method + layout_.const_method_code_size.offset, spec.code_size);
  memory_.Put<uint16_t>(const_method + layout_.const_method_name_index.offset,
                        AddPoolSymbol(java_class, AddSymbol(spec.name)));
  memory_.Put<uint16_t>(const_method + layout_.const_method_signature_index.offset,
                        AddPoolSymbol(java_class, AddSymbol(spec.signature)));
  if (!table.empty()) {
    // Another flag bit set too, as the JVM's flags word carries several.
    const uint32_t flags = layout_.has_linenumber_table_flag | 0x40;
    memory_.Write(const_method + layout_.const_method_flags.offset, &flags,
                  layout_.const_method_flags.width);
    memory_.Write(const_method + layout_.const_method_size + spec.code_size, table.data(),
                  table.size());
  }
  // Bytecodes: nop, never read by the namer.
  return method;
}

uint64_t JvmImage::ConstMethodOf(uint64_t method) {
  uint64_t const_method = 0;
  memory_.Read(method + layout_.method_const_method.offset, &const_method, 8);
  return const_method;
}

uint64_t JvmImage::CodeStartOf(uint64_t method) {
  return ConstMethodOf(method) + layout_.const_method_size;
}

uint64_t JvmImage::AddNmethod(uint64_t method, int32_t compile_id,
                              const std::vector<uint64_t>& metadata,
                              const std::vector<uint8_t>& scopes_data,
                              const std::vector<uint8_t>& pcs, const std::vector<uint8_t>& code) {
  const uint64_t nmethod = AddNmethodTables(method, compile_id, metadata, scopes_data, pcs);
  if (!code.empty() && code.size() <= 256) {
    const uint64_t begin = layout_.nmethod_size;
    const uint64_t end = begin + code.size();
    memory_.Write(nmethod + begin, code.data(), code.size());
    if (layout_.code_as_offsets) {
      memory_.Put<int32_t>(nmethod + layout_.blob_code_begin.offset, static_cast<int32_t>(begin));
      memory_.Put<int32_t>(nmethod + layout_.blob_code_end.offset, static_cast<int32_t>(end));
    } else {
      memory_.Put<uint64_t>(nmethod + layout_.blob_code_begin.offset, nmethod + begin);
      memory_.Put<uint64_t>(nmethod + layout_.blob_code_end.offset, nmethod + end);
    }
  }
  return nmethod;
}

uint64_t JvmImage::AddNmethodTables(uint64_t method, int32_t compile_id,
                                    const std::vector<uint64_t>& metadata,
                                    const std::vector<uint8_t>& scopes_data,
                                    const std::vector<uint8_t>& pcs) {
  const size_t metadata_bytes = metadata.size() * 8;
  if (jdk_ == Jdk::k17) {
    // Header, code (256 bytes), metadata, scopes data, PcDescs, dependencies (16).
    const int32_t metadata_offset = static_cast<int32_t>(layout_.nmethod_size + 256);
    const int32_t data_offset = metadata_offset + static_cast<int32_t>(metadata_bytes);
    const int32_t pcs_offset = data_offset + static_cast<int32_t>(scopes_data.size());
    const int32_t dependencies_offset = pcs_offset + static_cast<int32_t>(pcs.size());
    const uint64_t nmethod = Alloc(dependencies_offset + 16);
    memory_.Put<uint64_t>(nmethod + layout_.nmethod_method.offset, method);
    memory_.Put<int32_t>(nmethod + layout_.nmethod_compile_id.offset, compile_id);
    memory_.Put<int32_t>(nmethod + layout_.nmethod_metadata_offset.offset, metadata_offset);
    memory_.Put<uint64_t>(nmethod + layout_.nmethod_scopes_data_begin.offset,
                          nmethod + data_offset);
    memory_.Put<int32_t>(nmethod + layout_.nmethod_scopes_pcs_offset.offset, pcs_offset);
    memory_.Put<int32_t>(nmethod + layout_.nmethod_dependencies_offset.offset, dependencies_offset);
    memory_.Write(nmethod + metadata_offset, metadata.data(), metadata_bytes);
    memory_.Write(nmethod + data_offset, scopes_data.data(), scopes_data.size());
    memory_.Write(nmethod + pcs_offset, pcs.data(), pcs.size());
    return nmethod;
  }
  // JDK 25: relocations (24 bytes) then metadata in the mutable data; PcDescs, then scopes data
  // (then 8 bytes standing for speculations) in the immutable data.
  const uint64_t nmethod = Alloc(layout_.nmethod_size + 256);
  const int32_t relocation_size = 24;
  const uint64_t mutable_data = Alloc(relocation_size + metadata_bytes);
  const int32_t data_offset = static_cast<int32_t>(pcs.size());
  const int32_t immutable_size = data_offset + static_cast<int32_t>(scopes_data.size()) + 8;
  const uint64_t immutable_data = Alloc(immutable_size);
  memory_.Put<uint64_t>(nmethod + layout_.nmethod_method.offset, method);
  memory_.Put<int32_t>(nmethod + layout_.nmethod_compile_id.offset, compile_id);
  memory_.Put<uint64_t>(nmethod + layout_.blob_mutable_data.offset, mutable_data);
  memory_.Put<int32_t>(nmethod + layout_.blob_mutable_data_size.offset,
                       relocation_size + static_cast<int32_t>(metadata_bytes));
  memory_.Put<int32_t>(nmethod + layout_.blob_relocation_size.offset, relocation_size);
  memory_.Put<uint64_t>(nmethod + layout_.nmethod_immutable_data.offset, immutable_data);
  memory_.Put<int32_t>(nmethod + layout_.nmethod_immutable_data_size.offset, immutable_size);
  memory_.Put<int32_t>(nmethod + layout_.nmethod_scopes_pcs_offset.offset, 0);
  memory_.Put<int32_t>(nmethod + layout_.nmethod_scopes_data_offset.offset, data_offset);
  memory_.Write(mutable_data + relocation_size, metadata.data(), metadata_bytes);
  memory_.Write(immutable_data, pcs.data(), pcs.size());
  memory_.Write(immutable_data + data_offset, scopes_data.data(), scopes_data.size());
  return nmethod;
}

}  // namespace ember::hotspot::testing
