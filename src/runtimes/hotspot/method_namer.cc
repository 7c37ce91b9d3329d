// MethodNamer: Method* and nmethod naming over a MemoryReader, with generation-evicted caches.
#include "runtimes/hotspot/method_namer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "runtimes/hotspot/line_table.h"

namespace ember::hotspot {
namespace {

// Above any x86-64 user address: a pointer read from the target is refused past it before an
// offset is added to it, so no sum wraps.
constexpr uint64_t kMaxUserAddress = (uint64_t{1} << 56) - 1;
// Reads of the line table stop at page ends, so the last piece never runs into an unmapped page
// the table does not reach.
constexpr uint64_t kPageSize = 4096;

// A field of the struct at `base`, zero-extended; kUnsupported for a field the layout lacks.
NameStatus ReadField(MemoryReader& memory, uint64_t base, const Field& field, uint64_t* out) {
  if (!field.present()) return NameStatus::kUnsupported;
  if (field.width != 1 && field.width != 2 && field.width != 4 && field.width != 8) {
    return NameStatus::kUnsupported;
  }
  if (base == 0 || base > kMaxUserAddress) return NameStatus::kImplausible;
  uint64_t value = 0;  // little-endian: the low bytes take the field
  if (!memory.Read(base + field.offset, &value, field.width)) return NameStatus::kReadFailed;
  *out = value;
  return NameStatus::kOk;
}

// The same for a signed int field (offsets and sizes that HotSpot keeps as int).
NameStatus ReadSignedField(MemoryReader& memory, uint64_t base, const Field& field, int64_t* out) {
  uint64_t value = 0;
  NameStatus status = ReadField(memory, base, field, &value);
  if (status != NameStatus::kOk) return status;
  const int shift = 64 - 8 * field.width;
  *out = static_cast<int64_t>(value << shift) >> shift;
  return NameStatus::kOk;
}

bool PlausiblePointer(uint64_t address) { return address != 0 && address <= kMaxUserAddress; }

// Drops a modified UTF-8 character cut at the end of `bytes`, and a high surrogate whose low half
// was cut off.
void TrimToCharacter(std::string& bytes) {
  auto byte = [&](size_t from_end) { return static_cast<uint8_t>(bytes[bytes.size() - from_end]); };
  size_t continuation = 0;
  while (continuation < bytes.size() && continuation < 3 &&
         (byte(continuation + 1) & 0xC0) == 0x80) {
    ++continuation;
  }
  if (continuation < bytes.size()) {
    const uint8_t lead = byte(continuation + 1);
    const size_t needed = lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
    if (needed != continuation) bytes.resize(bytes.size() - continuation - 1);
  }
  if (bytes.size() >= 3 && byte(3) == 0xED && (byte(2) & 0xF0) == 0xA0)
    bytes.resize(bytes.size() - 3);
}

}  // namespace

size_t MethodNamer::NmethodKeyHash::operator()(const NmethodKey& key) const {
  return absl::HashOf(key.nmethod, key.compile_id);
}

std::string JavaClassName(std::string_view internal_name) {
  std::string name(internal_name);
  std::replace(name.begin(), name.end(), '/', '.');
  // JEP 371 hidden classes (lambdas, method handles) end in "+0x" and their address.
  const size_t plus = name.rfind("+0x");
  if (plus != std::string::npos && plus + 3 < name.size() &&
      std::all_of(name.begin() + plus + 3, name.end(),
                  [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; })) {
    name.replace(plus, std::string::npos, "+<hidden>");
  }
  return name;
}

std::optional<std::string> ModifiedUtf8ToUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  auto byte = [&](size_t i) { return static_cast<uint8_t>(bytes[i]); };
  auto continuation = [&](size_t i) { return i < bytes.size() && (byte(i) & 0xC0) == 0x80; };
  for (size_t i = 0; i < bytes.size();) {
    const uint8_t b = byte(i);
    if (b == 0) return std::nullopt;
    if (b < 0x80) {
      out.push_back(static_cast<char>(b));
      ++i;
    } else if ((b & 0xE0) == 0xC0) {
      if (!continuation(i + 1)) return std::nullopt;
      if (b == 0xC0 && byte(i + 1) == 0x80) {
        out.push_back('?');
      } else if (b < 0xC2) {
        return std::nullopt;  // overlong
      } else {
        out.append(bytes.substr(i, 2));
      }
      i += 2;
    } else if ((b & 0xF0) == 0xE0) {
      if (!continuation(i + 1) || !continuation(i + 2)) return std::nullopt;
      const uint32_t cp =
          ((b & 0x0Fu) << 12) | ((byte(i + 1) & 0x3Fu) << 6) | (byte(i + 2) & 0x3Fu);
      if (cp < 0x800) return std::nullopt;  // overlong
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        // A high surrogate must be followed by a low one, each in three bytes.
        if (i + 5 >= bytes.size() + 0 || byte(i + 3) != 0xED || !continuation(i + 4) ||
            !continuation(i + 5)) {
          return std::nullopt;
        }
        const uint32_t low =
            ((byte(i + 3) & 0x0Fu) << 12) | ((byte(i + 4) & 0x3Fu) << 6) | (byte(i + 5) & 0x3Fu);
        if (low < 0xDC00 || low > 0xDFFF) return std::nullopt;
        const uint32_t joined = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        out.push_back(static_cast<char>(0xF0 | (joined >> 18)));
        out.push_back(static_cast<char>(0x80 | ((joined >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((joined >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (joined & 0x3F)));
        i += 6;
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        return std::nullopt;  // a lone low surrogate
      } else {
        out.append(bytes.substr(i, 3));
        i += 3;
      }
    } else {
      // Four-byte forms are not modified UTF-8 (supplementary characters are surrogate pairs).
      return std::nullopt;
    }
  }
  return out;
}

NameStatus MethodNamer::ReadSymbol(MemoryReader& memory, uint64_t symbol, std::string* out) {
  symbol &= ~uint64_t{1};  // a pool slot's tag bit
  if (!PlausiblePointer(symbol)) return NameStatus::kImplausible;
  uint64_t length = 0;
  NameStatus status = ReadField(memory, symbol, layout_.symbol_length, &length);
  if (status != NameStatus::kOk) return status;
  length &= 0xFFFF;  // a u2 (JDK 11's length is the upper half of a u4: the layout points at it)
  auto it = symbols_.find(symbol);
  // Symbols are freed with their classes and their memory reused: a cached one is used as is
  // while its length holds within a generation, and its bytes are compared once per generation.
  const bool cached = it != symbols_.end() && it->second.length == length;
  if (cached && it->second.checked == generation_) {
    it->second.generation = generation_;
    *out = it->second.text;
    return NameStatus::kOk;
  }
  if (!layout_.symbol_body.present()) return NameStatus::kUnsupported;
  // Names are cut to kMaxNameBytes in frames anyway: a longer Symbol is read only in part, cut
  // back to whole characters.
  std::string raw(std::min<uint64_t>(length, kMaxSymbolBytes), '\0');
  if (!raw.empty() && !memory.Read(symbol + layout_.symbol_body.offset, raw.data(), raw.size())) {
    return NameStatus::kReadFailed;
  }
  if (raw.size() < length) TrimToCharacter(raw);
  if (cached && it->second.raw == raw) {
    it->second.generation = generation_;
    it->second.checked = generation_;
    *out = it->second.text;
    return NameStatus::kOk;
  }
  std::optional<std::string> text = ModifiedUtf8ToUtf8(raw);
  if (!text) return NameStatus::kImplausible;
  *out = *text;
  SymbolEntry entry{.raw = std::move(raw),
                    .text = std::move(*text),
                    .length = static_cast<uint16_t>(length),
                    .generation = generation_,
                    .checked = generation_};
  if (it != symbols_.end()) {
    it->second = std::move(entry);
  } else if (symbols_.size() < kMaxCachedSymbols) {
    symbols_.emplace(symbol, std::move(entry));
  }
  return NameStatus::kOk;
}

NameStatus MethodNamer::ReadPoolSymbol(MemoryReader& memory, uint64_t pool, uint64_t index,
                                       std::string* out) {
  if (layout_.constant_pool_size == kAbsent) return NameStatus::kUnsupported;
  // Index 0 is never a pool entry; a pool has at most 65535.
  if (index == 0 || index > 0xFFFF) return NameStatus::kImplausible;
  uint64_t slot = 0;
  if (!memory.Read(pool + layout_.constant_pool_size + 8 * index, &slot, sizeof(slot))) {
    return NameStatus::kReadFailed;
  }
  return ReadSymbol(memory, slot, out);
}

NameStatus MethodNamer::ReadLineTable(MemoryReader& memory, uint64_t start, MethodInfo* info) {
  // The table's length is not stored: read page-bounded pieces until it decodes to its end.
  std::vector<uint8_t>& table = info->line_table;
  uint64_t address = start;
  while (table.size() < kMaxLineTableBytes) {
    const uint64_t page_end = (address / kPageSize + 1) * kPageSize;
    const uint64_t piece =
        std::min<uint64_t>(page_end - address, kMaxLineTableBytes - table.size());
    const size_t old_size = table.size();
    table.resize(old_size + piece);
    if (!memory.Read(address, table.data() + old_size, piece)) {
      table.clear();
      return NameStatus::kReadFailed;
    }
    address += piece;
    // bci -1 never matches an entry: the decode runs to the terminator or the end of the bytes.
    LineLookup lookup = LineForBci(table, -1, layout_.unsigned5_excluded);
    if (!lookup.truncated) {
      // Pieces run to a page end, far past most tables: keep only the table's own bytes.
      if (lookup.consumed > 0 && lookup.consumed < table.size()) table.resize(lookup.consumed);
      table.shrink_to_fit();
      return NameStatus::kOk;
    }
  }
  table.clear();
  return NameStatus::kImplausible;
}

NameStatus MethodNamer::ReadMethod(MemoryReader& memory, uint64_t method, MethodInfo* info) {
  info->method = method;
  uint64_t const_method = 0;
  NameStatus status = ReadField(memory, method, layout_.method_const_method, &const_method);
  if (status != NameStatus::kOk) return status;
  if (!PlausiblePointer(const_method)) return NameStatus::kImplausible;
  info->const_method = const_method;
  uint64_t pool = 0, code_size = 0, name_index = 0, signature_index = 0, flags = 0;
  for (auto [field, out] : {std::pair{&layout_.const_method_constants, &pool},
                            std::pair{&layout_.const_method_code_size, &code_size},
                            std::pair{&layout_.const_method_name_index, &name_index},
                            std::pair{&layout_.const_method_signature_index, &signature_index}}) {
    status = ReadField(memory, const_method, *field, out);
    if (status != NameStatus::kOk) return status;
  }
  if (!PlausiblePointer(pool) || code_size > 0xFFFF) return NameStatus::kImplausible;
  info->code_size = static_cast<uint32_t>(code_size);
  uint64_t holder = 0, class_symbol = 0;
  status = ReadField(memory, pool, layout_.constant_pool_pool_holder, &holder);
  if (status != NameStatus::kOk) return status;
  status = ReadField(memory, holder, layout_.klass_name, &class_symbol);
  if (status != NameStatus::kOk) return status;
  std::string class_name;
  status = ReadSymbol(memory, class_symbol, &class_name);
  if (status != NameStatus::kOk) return status;
  info->class_name = JavaClassName(class_name);
  status = ReadPoolSymbol(memory, pool, name_index, &info->method_name);
  if (status != NameStatus::kOk) return status;
  status = ReadPoolSymbol(memory, pool, signature_index, &info->signature);
  if (status != NameStatus::kOk) return status;
  info->function = absl::StrCat(info->class_name, ".", info->method_name);

  // The source file and the lines are optional: a method is named without them when they are
  // missing or do not read (a class compiled without them, or a layout without the index).
  uint64_t source_index = 0;
  status =
      layout_.constant_pool_source_file_name_index.present()
          ? ReadField(memory, pool, layout_.constant_pool_source_file_name_index, &source_index)
          : ReadField(memory, holder, layout_.instance_klass_source_file_name_index, &source_index);
  if (status == NameStatus::kOk && source_index != 0 &&
      ReadPoolSymbol(memory, pool, source_index, &info->source_file) != NameStatus::kOk) {
    info->source_file.clear();
    ++stats_.source_files_failed;
  }

  // The line table, when the method has one, follows its bytecodes.
  if (layout_.const_method_size != kAbsent && layout_.has_linenumber_table_flag != 0 &&
      ReadField(memory, const_method, layout_.const_method_flags, &flags) == NameStatus::kOk &&
      (flags & layout_.has_linenumber_table_flag) != 0) {
    if (ReadLineTable(memory, const_method + layout_.const_method_size + code_size, info) !=
        NameStatus::kOk) {
      ++stats_.line_tables_failed;
    }
  }
  return NameStatus::kOk;
}

void MethodNamer::CountMethodFailure(NameStatus status) {
  if (status == NameStatus::kReadFailed) {
    ++stats_.methods_read_failed;
  } else {
    ++stats_.methods_implausible;
  }
}

const MethodInfo* MethodNamer::NameMethod(MemoryReader& memory, uint64_t method, NameStatus* status,
                                          std::optional<uint32_t> const_method_cookie) {
  NameStatus ignored;
  if (status == nullptr) status = &ignored;
  *status = NameStatus::kOk;
  if (!PlausiblePointer(method)) {
    *status = NameStatus::kImplausible;
    ++stats_.methods_implausible;
    return nullptr;
  }
  auto sampled = [&](uint64_t const_method) {
    return !const_method_cookie || ConstMethodCookie(const_method) == *const_method_cookie;
  };
  auto stale = [&] {
    *status = NameStatus::kStale;
    ++stats_.methods_stale;
    return nullptr;
  };
  auto it = methods_.find(method);
  if (it != methods_.end()) {
    MethodEntry& entry = it->second;
    const bool seen = sampled(entry.info->const_method);
    if (seen && entry.checked == generation_) {
      entry.generation = generation_;
      return entry.info.get();
    }
    uint64_t const_method = 0;
    // Unreadable now (the process is going): keep what it was.
    const bool unchanged =
        ReadField(memory, method, layout_.method_const_method, &const_method) != NameStatus::kOk ||
        const_method == entry.info->const_method;
    if (unchanged && seen) {
      entry.checked = generation_;
      entry.generation = generation_;
      return entry.info.get();
    }
    // The sample saw another method than the one cached, which is still there.
    if (unchanged) return stale();
    retired_.push_back(std::move(entry.info));
    methods_.erase(it);
    ++stats_.methods_renamed;
  }
  auto info = std::make_unique<MethodInfo>();
  *status = ReadMethod(memory, method, info.get());
  if (*status != NameStatus::kOk) {
    CountMethodFailure(*status);
    return nullptr;
  }
  ++stats_.methods_named;
  const MethodInfo* out = info.get();
  if (methods_.size() < kMaxCachedMethods) {
    methods_.emplace(
        method,
        MethodEntry{.info = std::move(info), .generation = generation_, .checked = generation_});
  } else {
    ++stats_.not_cached;
    retired_.push_back(std::move(info));
  }
  // Named as it is now; but the sample saw an earlier method at this address.
  if (!sampled(out->const_method)) return stale();
  return out;
}

std::optional<int32_t> MethodNamer::BciFromBcp(const MethodInfo& method, uint64_t bcp) const {
  if (layout_.const_method_size == kAbsent) return std::nullopt;
  const uint64_t code = method.const_method + layout_.const_method_size;
  if (bcp < code || bcp - code >= method.code_size) return std::nullopt;
  return static_cast<int32_t>(bcp - code);
}

uint32_t MethodNamer::LineOf(const MethodInfo& method, int32_t bci) const {
  // HotSpot answers only for a bci inside the code (line_number_from_bci).
  if (bci < 0 || static_cast<uint32_t>(bci) >= method.code_size || method.line_table.empty()) {
    return 0;
  }
  return LineForBci(method.line_table, bci, layout_.unsigned5_excluded).line.value_or(0);
}

NameStatus MethodNamer::NameInterpreted(MemoryReader& memory, uint64_t method, uint64_t bcp,
                                        JavaFrame* out,
                                        std::optional<uint32_t> const_method_cookie) {
  NameStatus status;
  const MethodInfo* info = NameMethod(memory, method, &status, const_method_cookie);
  *out = {};
  if (info == nullptr) return status;
  out->method = info;
  if (std::optional<int32_t> bci = BciFromBcp(*info, bcp)) {
    out->bci = *bci;
    out->line = LineOf(*info, *bci);
  }
  return NameStatus::kOk;
}

NameStatus MethodNamer::ReadScopeTables(MemoryReader& memory, uint64_t nmethod,
                                        ScopeTables* tables) {
  NameStatus status = ReadField(memory, nmethod, layout_.nmethod_method, &tables->method);
  if (status != NameStatus::kOk) return status;
  uint64_t metadata_address = 0, metadata_size = 0;
  uint64_t pcs_address = 0, pcs_size = 0, data_address = 0, data_size = 0;
  if (layout_.nmethod_immutable_data.present()) {
    // JDK 25+: metadata after the relocations in the mutable data; PcDescs, then the scopes
    // data, in the immutable data.
    uint64_t mutable_data = 0, immutable_data = 0;
    int64_t mutable_size = 0, relocation_size = 0, immutable_size = 0, pcs_offset = 0,
            data_offset = 0;
    for (auto [field, out] : {std::pair{&layout_.blob_mutable_data, &mutable_data},
                              std::pair{&layout_.nmethod_immutable_data, &immutable_data}}) {
      status = ReadField(memory, nmethod, *field, out);
      if (status != NameStatus::kOk) return status;
    }
    for (auto [field, out] : {std::pair{&layout_.blob_mutable_data_size, &mutable_size},
                              std::pair{&layout_.blob_relocation_size, &relocation_size},
                              std::pair{&layout_.nmethod_immutable_data_size, &immutable_size},
                              std::pair{&layout_.nmethod_scopes_pcs_offset, &pcs_offset},
                              std::pair{&layout_.nmethod_scopes_data_offset, &data_offset}}) {
      status = ReadSignedField(memory, nmethod, *field, out);
      if (status != NameStatus::kOk) return status;
    }
    if (!PlausiblePointer(mutable_data) || !PlausiblePointer(immutable_data) ||
        relocation_size < 0 || mutable_size < relocation_size || pcs_offset < 0 ||
        data_offset < pcs_offset || immutable_size < data_offset ||
        static_cast<uint64_t>(mutable_size - relocation_size + immutable_size) >
            kMaxScopeTableBytes) {
      return NameStatus::kImplausible;
    }
    metadata_address = mutable_data + relocation_size;
    metadata_size = mutable_size - relocation_size;
    pcs_address = immutable_data + pcs_offset;
    pcs_size = data_offset - pcs_offset;
    data_address = immutable_data + data_offset;
    data_size = immutable_size - data_offset;
  } else {
    // Before JDK 23: metadata, scopes data and PcDescs follow each other in the blob.
    uint64_t data_begin = 0;
    int64_t metadata_offset = 0, pcs_offset = 0, dependencies_offset = 0;
    status = ReadField(memory, nmethod, layout_.nmethod_scopes_data_begin, &data_begin);
    if (status != NameStatus::kOk) return status;
    for (auto [field, out] :
         {std::pair{&layout_.nmethod_metadata_offset, &metadata_offset},
          std::pair{&layout_.nmethod_scopes_pcs_offset, &pcs_offset},
          std::pair{&layout_.nmethod_dependencies_offset, &dependencies_offset}}) {
      status = ReadSignedField(memory, nmethod, *field, out);
      if (status != NameStatus::kOk) return status;
    }
    if (metadata_offset < 0 || pcs_offset < metadata_offset || dependencies_offset < pcs_offset ||
        static_cast<uint64_t>(dependencies_offset - metadata_offset) > kMaxScopeTableBytes ||
        data_begin < nmethod + metadata_offset || data_begin > nmethod + pcs_offset) {
      return NameStatus::kImplausible;
    }
    metadata_address = nmethod + metadata_offset;
    metadata_size = data_begin - metadata_address;
    data_address = data_begin;
    data_size = nmethod + pcs_offset - data_begin;
    pcs_address = nmethod + pcs_offset;
    pcs_size = dependencies_offset - pcs_offset;
  }
  ReadCodeRange(memory, nmethod, tables);
  tables->metadata.resize(metadata_size / sizeof(uint64_t));
  tables->scopes_data.resize(data_size);
  tables->pcs.resize(pcs_size);
  if ((metadata_size >= sizeof(uint64_t) &&
       !memory.Read(metadata_address, tables->metadata.data(),
                    tables->metadata.size() * sizeof(uint64_t))) ||
      (data_size > 0 && !memory.Read(data_address, tables->scopes_data.data(), data_size)) ||
      (pcs_size > 0 && !memory.Read(pcs_address, tables->pcs.data(), pcs_size))) {
    return NameStatus::kReadFailed;
  }
  return NameStatus::kOk;
}

void MethodNamer::ReadCodeRange(MemoryReader& memory, uint64_t nmethod, ScopeTables* tables) {
  uint64_t begin = 0, end = 0;
  if (ReadField(memory, nmethod, layout_.blob_code_begin, &begin) != NameStatus::kOk ||
      ReadField(memory, nmethod, layout_.blob_code_end, &end) != NameStatus::kOk) {
    return;
  }
  if (layout_.code_as_offsets) {
    const int64_t begin_offset = static_cast<int32_t>(begin),
                  end_offset = static_cast<int32_t>(end);
    if (begin_offset <= 0 || end_offset < begin_offset) return;
    begin = nmethod + static_cast<uint64_t>(begin_offset);
    end = nmethod + static_cast<uint64_t>(end_offset);
  }
  if (begin <= nmethod || end <= begin || end - begin > kMaxScopeTableBytes) return;
  tables->code_begin = begin;
  tables->code_end = end;
}

std::optional<PcDescEntry> MethodNamer::LeafPcDesc(MemoryReader& memory, ScopeTables* tables,
                                                   const PcDescLayout& layout, int32_t pc_offset) {
  if (std::optional<PcDescEntry> exact =
          FindPcDesc(tables->pcs, layout, pc_offset, PcMatch::kExact)) {
    return exact;
  }
  if (!tables->code_read && tables->code_begin != 0) {
    tables->code_read = true;
    tables->code.resize(tables->code_end - tables->code_begin);
    if (!memory.Read(tables->code_begin, tables->code.data(), tables->code.size())) {
      tables->code.clear();
    }
  }
  if (std::optional<PcDescEntry> reached =
          FollowToPcDesc(tables->code, tables->pcs, layout, pc_offset)) {
    ++stats_.leaf_paths_followed;
    return reached;
  }
  ++stats_.leaf_paths_ended;
  return FindPcDesc(tables->pcs, layout, pc_offset, PcMatch::kAtOrAfter);
}

void MethodNamer::CountNmethodFailure(NameStatus status) {
  if (status == NameStatus::kReadFailed) {
    ++stats_.nmethods_read_failed;
  } else if (status == NameStatus::kStale) {
    ++stats_.nmethods_stale;
  } else {
    ++stats_.nmethods_implausible;
  }
}

NameStatus MethodNamer::NameCompiled(MemoryReader& memory, uint64_t nmethod, int32_t compile_id,
                                     int32_t pc_offset, PcMatch match,
                                     std::vector<JavaFrame>* out) {
  out->clear();
  if (!PlausiblePointer(nmethod)) {
    ++stats_.nmethods_implausible;
    return NameStatus::kImplausible;
  }
  const NmethodKey key{nmethod, compile_id};
  auto it = nmethods_.find(key);
  ScopeTables uncached;
  ScopeTables* tables = nullptr;
  if (it != nmethods_.end()) {
    tables = &it->second;
  } else {
    // Compile ids are never reused in a run: one that matches is the nmethod the sample saw.
    int64_t actual_id = 0;
    NameStatus status = ReadSignedField(memory, nmethod, layout_.nmethod_compile_id, &actual_id);
    if (status == NameStatus::kOk && actual_id != compile_id) status = NameStatus::kStale;
    if (status == NameStatus::kOk) status = ReadScopeTables(memory, nmethod, &uncached);
    if (status != NameStatus::kOk) {
      CountNmethodFailure(status);
      return status;
    }
    ++stats_.nmethods_decoded;
    const size_t bytes = ScopeTableBytes(uncached);
    if (nmethods_.size() < kMaxCachedNmethods &&
        cached_scope_bytes_ + bytes <= kMaxCachedScopeTableBytes) {
      cached_scope_bytes_ += bytes;
      tables = &nmethods_.emplace(key, std::move(uncached)).first->second;
    } else {
      ++stats_.not_cached;
      tables = &uncached;
    }
  }
  tables->generation = generation_;

  PcDescLayout pc_layout;
  if (layout_.pc_desc_size == kAbsent || !layout_.pc_desc_pc_offset.present() ||
      !layout_.pc_desc_scope_decode_offset.present()) {
    return NameStatus::kUnsupported;
  }
  pc_layout.stride = layout_.pc_desc_size;
  pc_layout.pc_offset = layout_.pc_desc_pc_offset.offset;
  pc_layout.scope_decode_offset = layout_.pc_desc_scope_decode_offset.offset;
  std::optional<PcDescEntry> desc = match == PcMatch::kAtOrAfter
                                        ? LeafPcDesc(memory, tables, pc_layout, pc_offset)
                                        : FindPcDesc(tables->pcs, pc_layout, pc_offset, match);
  ScopeChain chain;
  if (desc)
    chain =
        DecodeScopes(tables->scopes_data, desc->scope_decode_offset, layout_.unsigned5_excluded);
  if (desc && chain.status == ScopeStatus::kOk) {
    for (const ScopeEntry& scope : chain.scopes) {
      if (scope.method_index == 0 || scope.method_index > tables->metadata.size()) {
        ++stats_.scopes_failed;
        return NameStatus::kImplausible;
      }
      NameStatus status;
      const MethodInfo* info =
          NameMethod(memory, tables->metadata[scope.method_index - 1], &status);
      if (info == nullptr) return status;
      out->push_back({.method = info, .bci = scope.bci, .line = LineOf(*info, scope.bci)});
    }
    if (!out->empty()) return NameStatus::kOk;
  } else {
    ++stats_.scopes_failed;
  }
  // No scopes at this pc (or they did not decode): the nmethod's own method, line unknown. It is
  // the outermost frame whatever was inlined, so the frame is named, not left to the resolver.
  NameStatus status;
  const MethodInfo* info = NameMethod(memory, tables->method, &status);
  if (info == nullptr) return status;
  out->push_back({.method = info});
  return NameStatus::kOk;
}

NameStatus MethodNamer::NameNativeWrapper(MemoryReader& memory, uint64_t nmethod,
                                          int32_t compile_id, std::vector<JavaFrame>* out) {
  out->clear();
  if (!PlausiblePointer(nmethod)) {
    ++stats_.nmethods_implausible;
    return NameStatus::kImplausible;
  }
  int64_t actual_id = 0;
  uint64_t method = 0;
  NameStatus status = ReadSignedField(memory, nmethod, layout_.nmethod_compile_id, &actual_id);
  if (status == NameStatus::kOk && actual_id != compile_id) status = NameStatus::kStale;
  if (status == NameStatus::kOk)
    status = ReadField(memory, nmethod, layout_.nmethod_method, &method);
  if (status != NameStatus::kOk) {
    CountNmethodFailure(status);
    return status;
  }
  const MethodInfo* info = NameMethod(memory, method, &status);
  if (info == nullptr) return status;
  out->push_back({.method = info});
  return NameStatus::kOk;
}

void MethodNamer::NextGeneration() {
  ++generation_;
  retired_.clear();
  std::erase_if(methods_,
                [&](const auto& item) { return item.second.generation + 2 <= generation_; });
  std::erase_if(symbols_,
                [&](const auto& item) { return item.second.generation + 2 <= generation_; });
  std::erase_if(nmethods_, [&](const auto& item) {
    if (item.second.generation + 2 > generation_) return false;
    cached_scope_bytes_ -= ScopeTableBytes(item.second);
    return true;
  });
}

size_t MethodNamer::ScopeTableBytes(const ScopeTables& tables) {
  return tables.metadata.size() * sizeof(uint64_t) + tables.scopes_data.size() + tables.pcs.size();
}

void FillFrame(const JavaFrame& java, Frame* frame) {
  frame->kind = FrameKind::kJvm;
  if (java.method != nullptr) {
    frame->function = java.method->function;
    frame->source_file = java.method->source_file;
  } else {
    frame->function = "[jvm]";
  }
  frame->line = java.line;
  CapFrameNames(*frame);
}

namespace {
// A hash map node's own overhead beside its value: the next pointer and the cached hash.
constexpr size_t kHashNodeBytes = 2 * sizeof(void*);

size_t InfoBytes(const MethodInfo& info) {
  return sizeof(MethodInfo) + info.class_name.capacity() + info.method_name.capacity() +
         info.signature.capacity() + info.source_file.capacity() + info.function.capacity() +
         info.line_table.capacity();
}
}  // namespace

size_t MethodNamer::HeldBytes() const {
  size_t bytes = (methods_.bucket_count() + symbols_.bucket_count() + nmethods_.bucket_count()) *
                 sizeof(void*);
  for (const auto& [address, entry] : methods_) {
    bytes += kHashNodeBytes + sizeof(address) + sizeof(entry);
    if (entry.info != nullptr) bytes += InfoBytes(*entry.info);
  }
  for (const auto& [address, entry] : symbols_) {
    bytes += kHashNodeBytes + sizeof(address) + sizeof(entry) + entry.raw.capacity() +
             entry.text.capacity();
  }
  for (const auto& [key, tables] : nmethods_) {
    bytes += kHashNodeBytes + sizeof(key) + sizeof(tables) +
             tables.metadata.capacity() * sizeof(uint64_t) + tables.scopes_data.capacity() +
             tables.pcs.capacity();
  }
  for (const std::unique_ptr<MethodInfo>& info : retired_) bytes += InfoBytes(*info);
  return bytes;
}

}  // namespace ember::hotspot
