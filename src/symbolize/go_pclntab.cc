// GoPclntab: Go's pclntab read in place, every read bounded by the bytes it was given. The layout
// is the one Go's runtime (runtime/symtab.go, internal/abi/symtab.go) and debug/gosym describe.
#include "symbolize/go_pclntab.h"

#include <elf.h>
#include <gelf.h>
#include <libelf.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "elf/load_segments.h"

namespace ember::internal {
namespace {

// Header magics (little-endian).
constexpr uint32_t kMagic12 = 0xfffffffb;   // Go 1.2 to 1.15
constexpr uint32_t kMagic116 = 0xfffffffa;  // Go 1.16, 1.17
constexpr uint32_t kMagic118 = 0xfffffff0;  // Go 1.18, 1.19
constexpr uint32_t kMagic120 = 0xfffffff1;  // Go 1.20 and later

constexpr uint32_t kPcdataInlTreeIndex = 2;
constexpr uint32_t kFuncdataInlTree = 3;
constexpr uint8_t kFuncFlagTopFrame = 1;
// Inlining nests a few levels; a cycle in a corrupt tree must end.
constexpr int kMaxInlineDepth = 64;
// Inline tree indexes are small; a corrupt one must not make Read() overflow.
constexpr int32_t kMaxInlineIndex = 1 << 24;
// Function ids (internal/abi.FuncID) are below 32 in every Go release read here.
constexpr uint8_t kMaxFuncId = 31;

bool Fits(uint64_t offset, uint64_t size, uint64_t total) {
  return offset <= total && size <= total - offset;
}

uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::optional<uint32_t> Read32(std::span<const uint8_t> bytes, uint64_t offset) {
  if (!Fits(offset, 4, bytes.size())) return std::nullopt;
  return Load32(bytes.data() + offset);
}

std::optional<uint64_t> ReadWord(std::span<const uint8_t> bytes, uint64_t offset,
                                 uint32_t ptr_size) {
  if (!Fits(offset, ptr_size, bytes.size())) return std::nullopt;
  return ptr_size == 8 ? Load64(bytes.data() + offset) : Load32(bytes.data() + offset);
}

std::span<const uint8_t> Tail(std::span<const uint8_t> bytes, uint64_t offset) {
  return offset <= bytes.size() ? bytes.subspan(offset) : std::span<const uint8_t>();
}

// A NUL-terminated string at `offset`; empty when it is not terminated inside `bytes`.
std::string_view CString(std::span<const uint8_t> bytes, uint64_t offset) {
  if (offset >= bytes.size()) return {};
  const char* start = reinterpret_cast<const char*>(bytes.data() + offset);
  const void* nul = std::memchr(start, 0, bytes.size() - offset);
  if (nul == nullptr) return {};
  return std::string_view(start, static_cast<const char*>(nul) - start);
}

// Base-128 varint as the pc-value tables write it; advances `pos`.
std::optional<uint32_t> ReadVarint(std::span<const uint8_t> bytes, size_t* pos) {
  uint32_t value = 0;
  for (uint32_t shift = 0; shift < 35; shift += 7) {
    if (*pos >= bytes.size()) return std::nullopt;
    const uint8_t b = bytes[(*pos)++];
    value |= static_cast<uint32_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return value;
  }
  return std::nullopt;
}

// The runtime's own view of these as where a stack begins, for tables without the TOPFRAME flag
// (Go 1.16 and 1.17 lack it).
bool IsThreadStartName(std::string_view name) {
  return name == "runtime.goexit" || name == "runtime.mstart" || name == "runtime.rt0_go";
}

// Through the program headers, as the loader finds them, so a binary without section headers has
// them too.
void FindRelocations(Elf* elf, GoImage* image) {
  GElf_Ehdr ehdr;
  if (gelf_getehdr(elf, &ehdr) == nullptr || ehdr.e_ident[EI_CLASS] != ELFCLASS64) return;
  if (ehdr.e_machine == EM_X86_64) {
    image->relative_type = R_X86_64_RELATIVE;
  } else if (ehdr.e_machine == EM_AARCH64) {
    image->relative_type = R_AARCH64_RELATIVE;
  } else {
    return;
  }
  size_t phnum = 0;
  if (elf_getphdrnum(elf, &phnum) != 0) return;
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr phdr;
    if (gelf_getphdr(elf, static_cast<int>(i), &phdr) == nullptr || phdr.p_type != PT_DYNAMIC) {
      continue;
    }
    const std::span<const uint8_t> dynamic = image->Read(phdr.p_vaddr, phdr.p_filesz);
    uint64_t rela = 0, rela_size = 0;
    for (size_t at = 0; at + sizeof(Elf64_Dyn) <= dynamic.size(); at += sizeof(Elf64_Dyn)) {
      Elf64_Dyn dyn;
      std::memcpy(&dyn, dynamic.data() + at, sizeof(dyn));
      if (dyn.d_tag == DT_NULL) break;
      if (dyn.d_tag == DT_RELA) rela = dyn.d_un.d_ptr;
      if (dyn.d_tag == DT_RELASZ) rela_size = dyn.d_un.d_val;
    }
    if (rela != 0) image->relocations = image->Read(rela, rela_size);
    return;
  }
}

}  // namespace

std::span<const uint8_t> GoImage::Read(uint64_t vaddr, uint64_t size) const {
  for (const Segment& segment : segments) {
    if (vaddr >= segment.vaddr && Fits(vaddr - segment.vaddr, size, segment.bytes.size())) {
      return segment.bytes.subspan(vaddr - segment.vaddr, size);
    }
  }
  return {};
}

std::span<const uint8_t> GoImage::ReadToEnd(uint64_t vaddr) const {
  for (const Segment& segment : segments) {
    if (vaddr >= segment.vaddr && vaddr - segment.vaddr < segment.bytes.size()) {
      return segment.bytes.subspan(vaddr - segment.vaddr);
    }
  }
  return {};
}

GoImage GoImageOfElf(Elf* elf) {
  GoImage image;
  size_t file_size = 0;
  const char* raw = elf_rawfile(elf, &file_size);
  if (raw == nullptr) return image;
  const auto* file = reinterpret_cast<const uint8_t*>(raw);
  if (absl::StatusOr<std::vector<LoadSegment>> loads = ReadLoadSegments(elf); loads.ok()) {
    for (const LoadSegment& load : *loads) {
      if (!Fits(load.offset, load.file_size, file_size)) continue;
      image.segments.push_back({.vaddr = load.vaddr,
                                .bytes = {file + load.offset, load.file_size},
                                .writable = load.writable});
    }
  }
  size_t phnum = 0;
  if (elf_getphdrnum(elf, &phnum) == 0) {
    for (size_t i = 0; i < phnum; ++i) {
      GElf_Phdr phdr;
      if (gelf_getphdr(elf, static_cast<int>(i), &phdr) == nullptr) continue;
      if (phdr.p_type == PT_NOTE && Fits(phdr.p_offset, phdr.p_filesz, file_size)) {
        // Go's linker writes its build id as a note of owner "Go", type 4.
        Elf_Data* data = elf_getdata_rawchunk(elf, phdr.p_offset, phdr.p_filesz,
                                              phdr.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);
        if (data == nullptr || data->d_buf == nullptr) continue;
        GElf_Nhdr nhdr;
        size_t name_offset = 0, desc_offset = 0, offset = 0;
        while (offset < data->d_size) {
          size_t next = gelf_getnote(data, offset, &nhdr, &name_offset, &desc_offset);
          if (next == 0) break;
          // Go writes the name "Go\0\0" with its padding counted in the name's size.
          if (nhdr.n_type == 4 && (nhdr.n_namesz == 3 || nhdr.n_namesz == 4) &&
              std::memcmp(static_cast<const char*>(data->d_buf) + name_offset, "Go", 3) == 0) {
            image.go_note = true;
          }
          offset = next;
        }
      }
    }
  }
  FindRelocations(elf, &image);
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return image;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr) continue;
    const char* name = elf_strptr(elf, shstrndx, shdr.sh_name);
    if (name == nullptr) continue;
    // Position-independent builds keep it in relocated data: .data.rel.ro.gopclntab.
    if ((std::strcmp(name, ".gopclntab") == 0 ||
         std::strcmp(name, ".data.rel.ro.gopclntab") == 0) &&
        shdr.sh_type != SHT_NOBITS) {
      image.pclntab_address = shdr.sh_addr;
      image.pclntab_size = shdr.sh_size;
    } else if (std::strcmp(name, ".note.go.buildid") == 0) {
      image.go_note = true;
    }
  }
  return image;
}

absl::StatusOr<std::unique_ptr<GoPclntab>> GoPclntab::Open(GoImage image) {
  if (image.pclntab_address.has_value()) {
    std::span<const uint8_t> table = image.Read(*image.pclntab_address, image.pclntab_size);
    if (table.empty()) {
      return absl::DataLossError(".gopclntab lies outside the file's loaded segments");
    }
    const uint64_t address = *image.pclntab_address;
    return Parse(std::move(image), address, table);
  }
  if (!image.go_note) return absl::NotFoundError("not a Go binary (no .gopclntab, no Go note)");
  // No section naming it: the table is in a read-only segment (or, in a position-independent
  // binary, in the relocated data the loader makes read-only, which its program header calls
  // writable), its header aligned to a word. Read-only segments first.
  absl::Status last = absl::NotFoundError("no Go symbol table in the loaded segments");
  std::vector<const GoImage::Segment*> order;
  for (const GoImage::Segment& segment : image.segments) {
    if (!segment.writable) order.push_back(&segment);
  }
  for (const GoImage::Segment& segment : image.segments) {
    if (segment.writable) order.push_back(&segment);
  }
  for (const GoImage::Segment* segment_ptr : order) {
    const GoImage::Segment& segment = *segment_ptr;
    const std::span<const uint8_t> bytes = segment.bytes;
    for (size_t offset = 0; offset + 16 <= bytes.size(); offset += 4) {
      const uint32_t magic = Load32(bytes.data() + offset);
      if ((magic != kMagic116 && magic != kMagic118 && magic != kMagic120) ||
          bytes[offset + 4] != 0 || bytes[offset + 5] != 0) {
        continue;
      }
      absl::StatusOr<std::unique_ptr<GoPclntab>> table =
          Parse(image, segment.vaddr + offset, bytes.subspan(offset));
      if (table.ok()) return table;
      last = table.status();
    }
  }
  return last;
}

absl::StatusOr<std::unique_ptr<GoPclntab>> GoPclntab::Parse(GoImage image, uint64_t table_address,
                                                            std::span<const uint8_t> table) {
  std::unique_ptr<GoPclntab> pclntab(new GoPclntab());
  pclntab->image_ = std::move(image);
  pclntab->table_ = table;
  pclntab->table_address_ = table_address;
  if (absl::Status status = pclntab->ParseHeader(); !status.ok()) return status;
  return pclntab;
}

absl::Status GoPclntab::ParseHeader() {
  auto corrupt = [](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("corrupt Go symbol table: ", what));
  };
  if (table_.size() < 16) return corrupt("shorter than its header");
  const uint32_t magic = Load32(table_.data());
  switch (magic) {
    case kMagic116:
      version_ = 116;
      break;
    case kMagic118:
      version_ = 118;
      break;
    case kMagic120:
      version_ = 120;
      break;
    case kMagic12:
      return absl::UnimplementedError(
          "Go symbol table of Go 1.2 to 1.15: only Go 1.16 and later are read");
    default:
      if (__builtin_bswap32(magic) == kMagic116 || __builtin_bswap32(magic) == kMagic118 ||
          __builtin_bswap32(magic) == kMagic120) {
        return absl::UnimplementedError("big-endian Go symbol table");
      }
      return corrupt(absl::StrFormat("unknown magic 0x%08x", magic));
  }
  quantum_ = table_[6];
  ptr_size_ = table_[7];
  if (table_[4] != 0 || table_[5] != 0 || (quantum_ != 1 && quantum_ != 2 && quantum_ != 4) ||
      (ptr_size_ != 4 && ptr_size_ != 8)) {
    return corrupt("bad header fields");
  }
  // Header words after the first 8 bytes: nfunc, nfiles, [textStart,] then the offsets of the
  // function name, compile unit, file, pc-value and function tables.
  const int first_offset = version_ == 116 ? 2 : 3;
  auto word = [&](int i) { return ReadWord(table_, 8 + uint64_t(i) * ptr_size_, ptr_size_); };
  std::optional<uint64_t> nfunc = word(0);
  std::optional<uint64_t> offsets[5];
  for (int i = 0; i < 5; ++i) {
    offsets[i] = word(first_offset + i);
    if (!offsets[i].has_value() || *offsets[i] > table_.size()) {
      return corrupt("a table offset lies outside it");
    }
  }
  if (!nfunc.has_value() || *nfunc == 0 || *nfunc > (uint64_t{1} << 24)) {
    return corrupt("bad function count");
  }
  nfunc_ = static_cast<uint32_t>(*nfunc);
  funcnames_ = Tail(table_, *offsets[0]);
  cutab_ = Tail(table_, *offsets[1]);
  filetab_ = Tail(table_, *offsets[2]);
  pctab_ = Tail(table_, *offsets[3]);
  funcdata_ = Tail(table_, *offsets[4]);
  const uint64_t field = version_ == 116 ? ptr_size_ : 4;
  const uint64_t functab_size = (uint64_t{nfunc_} * 2 + 1) * field;
  if (functab_size > funcdata_.size()) return corrupt("function table past its end");
  functab_ = funcdata_.subspan(0, functab_size);

  FindModuleData();
  if (version_ != 116) {
    // As linked (what ELF addresses are); a position-independent binary may leave it to a
    // relocation. The system linker relocates only the module data's (the one the runtime
    // reads); the .text section is no substitute, as it begins with C code in a cgo binary.
    text_start_ = WordAt(table_address_ + 8 + 2 * uint64_t{ptr_size_}).value_or(0);
    if (text_start_ == 0 && moduledata_text_.has_value()) text_start_ = *moduledata_text_;
    if (text_start_ == 0) return corrupt("no text start in its header or module data");
  }
  // Entries must ascend and name records inside the table: checked once, so lookups can binary
  // search.
  uint64_t previous = 0;
  for (uint32_t i = 0; i <= nfunc_; ++i) {
    const uint64_t pc = FunctabPc(i);
    if (pc < previous) return corrupt("function table out of order");
    previous = pc;
    if (i == nfunc_) break;
    std::optional<uint64_t> func_offset = ReadWord(functab_, (uint64_t{i} * 2 + 1) * field, field);
    if (!func_offset.has_value() || !Fits(*func_offset, RecordSize(), funcdata_.size())) {
      return corrupt("a function record lies outside the table");
    }
  }
  return absl::OkStatus();
}

std::optional<uint64_t> GoPclntab::WordAt(uint64_t address) const {
  std::optional<uint64_t> word = ReadWord(image_.Read(address, ptr_size_), 0, ptr_size_);
  if (!word.has_value() || *word != 0 || image_.relative_type == 0) return word;
  const std::span<const uint8_t> relocations = image_.relocations;
  for (size_t at = 0; at + sizeof(Elf64_Rela) <= relocations.size(); at += sizeof(Elf64_Rela)) {
    Elf64_Rela rela;
    std::memcpy(&rela, relocations.data() + at, sizeof(rela));
    if (rela.r_offset == address && ELF64_R_TYPE(rela.r_info) == image_.relative_type) {
      return static_cast<uint64_t>(rela.r_addend);
    }
  }
  return word;
}

void GoPclntab::FindModuleData() {
  // runtime.firstmoduledata, in a writable segment, begins with the address of the table's header
  // and then the slice of the function name table (address, length, capacity).
  const uint64_t names_address = table_address_ + (funcnames_.data() - table_.data());
  for (const GoImage::Segment& segment : image_.segments) {
    if (!segment.writable) continue;
    const std::span<const uint8_t> bytes = segment.bytes;
    for (size_t offset = 0; offset + 2 * ptr_size_ <= bytes.size(); offset += ptr_size_) {
      if (ReadWord(bytes, offset, ptr_size_) == table_address_ &&
          ReadWord(bytes, offset + ptr_size_, ptr_size_) == names_address &&
          TakeModuleData(segment.vaddr + offset)) {
        return;
      }
    }
  }
  // Zero in the file: the relocation that points its first word at the table.
  const std::span<const uint8_t> relocations = image_.relocations;
  for (size_t at = 0; at + sizeof(Elf64_Rela) <= relocations.size(); at += sizeof(Elf64_Rela)) {
    Elf64_Rela rela;
    std::memcpy(&rela, relocations.data() + at, sizeof(rela));
    if (ELF64_R_TYPE(rela.r_info) == image_.relative_type &&
        static_cast<uint64_t>(rela.r_addend) == table_address_ &&
        WordAt(rela.r_offset + ptr_size_) == names_address && TakeModuleData(rela.r_offset)) {
      return;
    }
  }
}

bool GoPclntab::TakeModuleData(uint64_t address) {
  // Words of moduledata: pcHeader, six slices (3 words each), findfunctab, minpc, maxpc, then
  // text. gofunc follows text, etext, five pairs of section bounds (Go 1.20 adds the coverage
  // counters' pair), end, gcdata, gcbss, types, etypes and rodata.
  auto at = [&](int word) { return WordAt(address + uint64_t(word) * ptr_size_); };
  // The word numbers are those of the layouts this reads; minpc and maxpc, which must span
  // exactly what the function table does, tell a layout that moved them (or a match that is no
  // module data) from one that did not.
  std::optional<uint64_t> minpc = at(20), maxpc = at(21), text = at(22), etext = at(23);
  const uint64_t span = FunctabPc(nfunc_) - FunctabPc(0);
  if (!minpc.has_value() || !maxpc.has_value() || !text.has_value() || !etext.has_value() ||
      *maxpc < *minpc || *maxpc - *minpc != span || *text > *minpc || *etext < *maxpc ||
      (version_ == 116 && *minpc != FunctabPc(0))) {
    return false;
  }
  moduledata_text_ = text;
  if (version_ != 116) {
    // gofunc is read-only data (the go:func.* symbols) of this binary, after the start of its
    // read-only data (the word before it), and the words before that bound the type data.
    const int gofunc_word = version_ == 118 ? 38 : 40;
    std::optional<uint64_t> gofunc = at(gofunc_word), rodata = at(gofunc_word - 1),
                            types = at(gofunc_word - 3), etypes = at(gofunc_word - 2);
    if (gofunc.has_value() && *gofunc != 0 && rodata.has_value() && *rodata <= *gofunc &&
        types.has_value() && etypes.has_value() && *types <= *etypes) {
      for (const GoImage::Segment& data : image_.segments) {
        if (!data.writable && *gofunc >= data.vaddr && *gofunc - data.vaddr < data.bytes.size()) {
          gofunc_ = gofunc;
        }
      }
    }
  }
  return true;
}

uint64_t GoPclntab::FunctabPc(uint32_t i) const {
  if (version_ == 116) {
    return ReadWord(functab_, uint64_t{i} * 2 * ptr_size_, ptr_size_).value_or(0);
  }
  return text_start_ + Read32(functab_, uint64_t{i} * 8).value_or(0);
}

std::optional<GoPclntab::Func> GoPclntab::FindFunc(uint64_t pc) const {
  if (pc < FunctabPc(0) || pc >= FunctabPc(nfunc_)) return std::nullopt;
  // The last entry whose pc is <= pc.
  uint32_t low = 0, high = nfunc_;
  while (high - low > 1) {
    const uint32_t mid = low + (high - low) / 2;
    if (FunctabPc(mid) <= pc) {
      low = mid;
    } else {
      high = mid;
    }
  }
  const uint64_t field = version_ == 116 ? ptr_size_ : 4;
  std::optional<uint64_t> func_offset = ReadWord(functab_, (uint64_t{low} * 2 + 1) * field, field);
  if (!func_offset.has_value()) return std::nullopt;
  Func func{
      .entry = FunctabPc(low), .end = FunctabPc(low + 1), .data = Tail(funcdata_, *func_offset)};
  if (func.data.size() < RecordSize()) return std::nullopt;
  return func;
}

// Fields of _func after the entry: 1 nameOff, 2 args, 3 deferreturn, 4 pcsp, 5 pcfile, 6 pcln,
// 7 npcdata, 8 cuOffset (and 9 startLine from Go 1.20).
std::optional<uint32_t> GoPclntab::Field(const Func& func, int index) const {
  const uint64_t entry_size = version_ == 116 ? ptr_size_ : 4;
  return Read32(func.data, entry_size + uint64_t(index - 1) * 4);
}

std::optional<int32_t> GoPclntab::PcValue(uint32_t offset, uint64_t entry, uint64_t pc) const {
  if (offset == 0 || offset >= pctab_.size()) return std::nullopt;
  const std::span<const uint8_t> table = pctab_.subspan(offset);
  size_t pos = 0;
  int32_t value = -1;
  uint64_t at = entry;
  for (bool first = true;; first = false) {
    std::optional<uint32_t> uvdelta = ReadVarint(table, &pos);
    if (!uvdelta.has_value() || (*uvdelta == 0 && !first)) return std::nullopt;
    const int32_t vdelta = (*uvdelta & 1) != 0 ? static_cast<int32_t>(~(*uvdelta >> 1))
                                               : static_cast<int32_t>(*uvdelta >> 1);
    std::optional<uint32_t> pcdelta = ReadVarint(table, &pos);
    if (!pcdelta.has_value()) return std::nullopt;
    at += uint64_t{*pcdelta} * quantum_;
    value = static_cast<int32_t>(static_cast<uint32_t>(value) + static_cast<uint32_t>(vdelta));
    if (pc < at) return value;
  }
}

std::optional<int32_t> GoPclntab::PcData(const Func& func, uint32_t index, uint64_t pc) const {
  std::optional<uint32_t> npcdata = Field(func, 7);
  if (!npcdata.has_value() || index >= *npcdata) return std::nullopt;
  std::optional<uint32_t> offset = Read32(func.data, RecordSize() + uint64_t{index} * 4);
  if (!offset.has_value()) return std::nullopt;
  return PcValue(*offset, func.entry, pc);
}

std::string_view GoPclntab::FuncName(int64_t name_offset) const {
  if (name_offset < 0) return {};
  return CString(funcnames_, static_cast<uint64_t>(name_offset));
}

bool GoPclntab::IsNameStart(int64_t name_offset) const {
  return name_offset == 0 ||
         (name_offset > 0 && static_cast<uint64_t>(name_offset) < funcnames_.size() &&
          funcnames_[name_offset - 1] == 0);
}

std::string_view GoPclntab::FileName(const Func& func, int32_t file_index) const {
  if (file_index < 0) return {};
  std::optional<uint32_t> cu_offset = Field(func, 8);
  if (!cu_offset.has_value()) return {};
  std::optional<uint32_t> file_offset =
      Read32(cutab_, (uint64_t{*cu_offset} + static_cast<uint64_t>(file_index)) * 4);
  if (!file_offset.has_value() || *file_offset == ~uint32_t{0}) return {};
  return CString(filetab_, *file_offset);
}

bool GoPclntab::InlineEntry(const Func& func, int32_t index, int32_t* name_offset,
                            int32_t* parent_pc) const {
  if (index < 0 || index >= kMaxInlineIndex) return false;
  std::optional<uint32_t> npcdata = Field(func, 7);
  if (!npcdata.has_value()) return false;
  const uint64_t header = RecordSize();
  const uint8_t nfuncdata = func.data[header - 1];
  if (kFuncdataInlTree >= nfuncdata) return false;
  uint64_t funcdata_at = header + uint64_t{*npcdata} * 4;
  uint64_t tree = 0;
  if (version_ == 116) {
    // Absolute addresses, aligned to a pointer in memory.
    const uint64_t address = table_address_ + (func.data.data() - table_.data()) + funcdata_at;
    if (ptr_size_ == 8 && (address & 4) != 0) funcdata_at += 4;
    std::optional<uint64_t> pointer =
        ReadWord(func.data, funcdata_at + uint64_t{kFuncdataInlTree} * ptr_size_, ptr_size_);
    if (!pointer.has_value() || *pointer == 0) return false;
    tree = *pointer;
  } else {
    std::optional<uint32_t> offset =
        Read32(func.data, funcdata_at + uint64_t{kFuncdataInlTree} * 4);
    if (!offset.has_value() || *offset == ~uint32_t{0} || !gofunc_.has_value()) return false;
    tree = *gofunc_ + *offset;
  }
  // Before Go 1.20 an entry is {parent int16, funcID, pad, file, line, nameOff, parentPc}; from
  // 1.20 {funcID, pad[3], nameOff, parentPc, startLine}.
  const uint64_t entry_size = version_ == 120 ? 16 : 20;
  std::span<const uint8_t> entry =
      image_.Read(tree + static_cast<uint64_t>(index) * entry_size, entry_size);
  if (entry.empty()) return false;
  const uint8_t func_id = version_ == 120 ? entry[0] : entry[2];
  const bool padded =
      version_ == 120 ? entry[1] == 0 && entry[2] == 0 && entry[3] == 0 : entry[3] == 0;
  if (func_id > kMaxFuncId || !padded) return false;
  const uint64_t name_at = version_ == 120 ? 4 : 12;
  *name_offset = static_cast<int32_t>(Load32(entry.data() + name_at));
  *parent_pc = static_cast<int32_t>(Load32(entry.data() + name_at + 4));
  return true;
}

std::optional<int32_t> GoPclntab::SpDelta(uint64_t pc) const {
  std::optional<Func> func = FindFunc(pc);
  if (!func.has_value()) return std::nullopt;
  std::optional<uint32_t> pcsp = Field(*func, 4);
  if (!pcsp.has_value()) return std::nullopt;
  std::optional<int32_t> delta = PcValue(*pcsp, func->entry, pc);
  if (!delta.has_value() || *delta < 0) return std::nullopt;
  return delta;
}

bool GoPclntab::PushesFramePointer(uint64_t pc) const {
  std::optional<Func> func = FindFunc(pc);
  if (!func.has_value() || ptr_size_ != 8) return false;
  std::optional<uint32_t> pcsp = Field(*func, 4);
  if (!pcsp.has_value() || *pcsp == 0 || *pcsp >= pctab_.size()) return false;
  // The first two rows of the delta table: 0 from the entry, then 8 from just after a push.
  const std::span<const uint8_t> table = pctab_.subspan(*pcsp);
  size_t pos = 0;
  std::optional<uint32_t> first_value = ReadVarint(table, &pos);
  std::optional<uint32_t> first_length = ReadVarint(table, &pos);
  std::optional<uint32_t> second_value = ReadVarint(table, &pos);
  // Zig-zag: +1 from -1 (the initial value) is 2, +8 is 16.
  if (first_value != 2u || !first_length.has_value() || *first_length == 0 || second_value != 16u) {
    return false;
  }
  const uint64_t after_push = func->entry + uint64_t{*first_length} * quantum_;
  const std::span<const uint8_t> push = image_.Read(after_push - 1, 1);
  return !push.empty() && push[0] == 0x55;  // push %rbp
}

bool GoPclntab::Lookup(uint64_t pc, GoSymbol* symbol) const {
  std::optional<Func> func = FindFunc(pc);
  if (!func.has_value()) return false;
  std::optional<uint32_t> name_offset = Field(*func, 1);
  if (!name_offset.has_value()) return false;
  const std::string_view name = FuncName(static_cast<int32_t>(*name_offset));
  if (name.empty()) return false;
  const uint32_t pcfile = Field(*func, 5).value_or(0);
  const uint32_t pcln = Field(*func, 6).value_or(0);
  auto position = [&](uint64_t at, std::string_view* file, uint32_t* line) {
    std::optional<int32_t> file_index = PcValue(pcfile, func->entry, at);
    std::optional<int32_t> line_value = PcValue(pcln, func->entry, at);
    *file = file_index.has_value() ? FileName(*func, *file_index) : std::string_view();
    *line = line_value.has_value() && *line_value > 0 ? static_cast<uint32_t>(*line_value) : 0;
  };
  symbol->inlined.clear();
  std::string_view file;
  uint32_t line = 0;
  position(pc, &file, &line);
  // The compiler adds an inlined call's parent to the tree before it, so each step goes to a
  // smaller index; a step that does not, or an entry whose name is not the start of one in the
  // name table or whose call lies outside the function, is a corrupt tree: the function is then
  // named with no inlined frames and no line, rather than with frames the tree cannot vouch for.
  std::optional<int32_t> index = PcData(*func, kPcdataInlTreeIndex, pc);
  for (int depth = 0; index.has_value() && *index >= 0; ++depth) {
    int32_t inlined_name = 0, parent_pc = 0;
    const std::string_view inlined =
        InlineEntry(*func, *index, &inlined_name, &parent_pc) && IsNameStart(inlined_name)
            ? FuncName(inlined_name)
            : std::string_view();
    const uint64_t call_pc = func->entry + static_cast<uint64_t>(static_cast<int64_t>(parent_pc));
    const std::optional<int32_t> parent =
        inlined.empty() ? std::nullopt : PcData(*func, kPcdataInlTreeIndex, call_pc);
    if (inlined.empty() || parent_pc < 0 || call_pc >= func->end || depth >= kMaxInlineDepth ||
        (parent.has_value() && *parent >= *index)) {
      symbol->inlined.clear();
      file = {};
      line = 0;
      break;
    }
    symbol->inlined.push_back(InlineFrame{
        .function = std::string(inlined), .source_file = std::string(file), .line = line});
    position(call_pc, &file, &line);
    index = parent;
  }
  symbol->function = name;
  symbol->file = file;
  symbol->line = line;
  const uint64_t flag_at = version_ == 116 ? ptr_size_ + 33 : version_ == 118 ? 37 : 41;
  symbol->thread_start = (version_ != 116 && (func->data[flag_at] & kFuncFlagTopFrame) != 0) ||
                         IsThreadStartName(name);
  return true;
}

}  // namespace ember::internal
