// BuildUnwindTable: .eh_frame_hdr names every FDE, libdw evaluates each FDE's rows, and the rows
// the BPF walk can apply become ember_unwind_row.
#include "unwind/unwind_table.h"

#include <dwarf.h>
#include <elf.h>
#include <elfutils/libdw.h>
#include <gelf.h>
#include <libelf.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ember {
namespace {

constexpr int kRbp = 6;
constexpr int kRsp = 7;
constexpr int kReturnAddress = 16;

constexpr int TrackedIndex(int reg) {
  for (int i = 0; i < CfiRow::kTrackedCount; ++i) {
    if (CfiRow::kTracked[i] == reg) return i;
  }
  return -1;
}
static_assert(TrackedIndex(kRbp) >= 0 && TrackedIndex(kRsp) >= 0 &&
              TrackedIndex(kReturnAddress) >= 0);

// The encodings GCC and LLVM's linkers write (and the only ones libgcc's and libunwind's fast
// paths read): the FDE search table as 32-bit offsets from the header's own address.
constexpr uint8_t kEhFramePtrEncoding = DW_EH_PE_pcrel | DW_EH_PE_sdata4;
constexpr uint8_t kFdeCountEncoding = DW_EH_PE_udata4;
constexpr uint8_t kTableEncoding = DW_EH_PE_datarel | DW_EH_PE_sdata4;
constexpr size_t kHeaderBytes = 12;  // 4 bytes of version and encodings, eh_frame_ptr, fde_count
constexpr size_t kEntryBytes = 8;    // initial_location, fde_address

// The bytes of .eh_frame_hdr and the ELF address they are loaded at.
struct SectionBytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
  uint64_t address = 0;
};

uint32_t LoadU32(const uint8_t* bytes) {
  uint32_t value;
  std::memcpy(&value, bytes, sizeof(value));  // x86-64 files only: host and file byte order agree
  return value;
}

// The section by name; a file stripped of its section headers still has the PT_GNU_EH_FRAME
// segment, which is what the runtime's unwinder reads too.
absl::StatusOr<SectionBytes> FindEhFrameHdr(Elf* elf) {
  size_t sections = 0;
  if (elf_getshdrnum(elf, &sections) != 0) {
    return absl::DataLossError(absl::StrCat("unreadable section headers: ", elf_errmsg(-1)));
  }
  if (sections > 0) {
    size_t names = 0;
    if (elf_getshdrstrndx(elf, &names) != 0) {
      return absl::DataLossError(absl::StrCat("no section name table: ", elf_errmsg(-1)));
    }
    for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
      GElf_Shdr shdr;
      if (gelf_getshdr(scn, &shdr) == nullptr) continue;
      const char* name = elf_strptr(elf, names, shdr.sh_name);
      if (name == nullptr || std::strcmp(name, ".eh_frame_hdr") != 0) continue;
      Elf_Data* data = shdr.sh_type == SHT_NOBITS ? nullptr : elf_rawdata(scn, nullptr);
      if (data == nullptr || data->d_buf == nullptr) {
        return absl::DataLossError(absl::StrCat(".eh_frame_hdr is unreadable: ", elf_errmsg(-1)));
      }
      return SectionBytes{.data = static_cast<const uint8_t*>(data->d_buf),
                          .size = data->d_size,
                          .address = shdr.sh_addr};
    }
    return absl::NotFoundError("no .eh_frame_hdr section (linked without --eh-frame-hdr?)");
  }

  size_t segments = 0;
  if (elf_getphdrnum(elf, &segments) != 0) {
    return absl::DataLossError(absl::StrCat("unreadable program headers: ", elf_errmsg(-1)));
  }
  for (size_t i = 0; i < segments; ++i) {
    GElf_Phdr phdr;
    if (gelf_getphdr(elf, static_cast<int>(i), &phdr) == nullptr ||
        phdr.p_type != PT_GNU_EH_FRAME) {
      continue;
    }
    size_t file_size = 0;
    const char* file = elf_rawfile(elf, &file_size);
    if (file == nullptr || phdr.p_offset > file_size || phdr.p_filesz > file_size - phdr.p_offset) {
      return absl::DataLossError("the PT_GNU_EH_FRAME segment lies outside the file");
    }
    return SectionBytes{.data = reinterpret_cast<const uint8_t*>(file) + phdr.p_offset,
                        .size = phdr.p_filesz,
                        .address = phdr.p_vaddr};
  }
  return absl::NotFoundError("no section headers and no PT_GNU_EH_FRAME segment");
}

// The initial locations (ELF addresses) of the FDEs in .eh_frame_hdr's search table, ascending
// and without duplicates.
absl::StatusOr<std::vector<uint64_t>> FdeStarts(const SectionBytes& hdr, size_t* fde_count) {
  if (hdr.size < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat(".eh_frame_hdr has ", hdr.size, " bytes, too few"));
  }
  if (hdr.data[0] != 1) {
    return absl::UnimplementedError(
        absl::StrCat(".eh_frame_hdr version ", hdr.data[0], " (only 1 is known)"));
  }
  if (hdr.data[1] != kEhFramePtrEncoding || hdr.data[2] != kFdeCountEncoding ||
      hdr.data[3] != kTableEncoding) {
    return absl::UnimplementedError(absl::StrCat(
        ".eh_frame_hdr encodings 0x", absl::Hex(hdr.data[1]), "/0x", absl::Hex(hdr.data[2]), "/0x",
        absl::Hex(hdr.data[3]), ", expected 0x1b/0x03/0x3b"));
  }
  const uint32_t count = LoadU32(hdr.data + 8);
  if (count > (hdr.size - kHeaderBytes) / kEntryBytes) {
    return absl::DataLossError(absl::StrCat(".eh_frame_hdr claims ", count, " FDEs, more than its ",
                                            hdr.size, " bytes hold"));
  }
  *fde_count = count;
  std::vector<uint64_t> starts(count);
  for (uint32_t i = 0; i < count; ++i) {
    const auto offset = static_cast<int32_t>(LoadU32(hdr.data + kHeaderBytes + i * kEntryBytes));
    starts[i] = hdr.address + static_cast<int64_t>(offset);  // wraps like the runtime's reader
  }
  // The linker writes the table sorted; a file that breaks that must not break the table's order.
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  return starts;
}

bool SameRule(const ember_unwind_row& a, const ember_unwind_row& b) {
  return a.kind == b.kind && a.cfa_offset == b.cfa_offset && a.bp_offset == b.bp_offset &&
         a.bp_rule == b.bp_rule;
}

// A row whose kind says all: every other field zero, so that equal rows merge.
ember_unwind_row KindOnly(uint64_t pc, ember_unwind_row_kind kind) {
  ember_unwind_row row{};
  row.pc = pc;
  row.kind = kind;
  return row;
}

struct CfiEnd {
  void operator()(Dwarf_CFI* cfi) const { dwarf_cfi_end(cfi); }
};

}  // namespace

ember_unwind_row UnwindRowOf(const CfiRow& row, uint64_t pc) {
  const ember_unwind_row none = KindOnly(pc, EMBER_UNWIND_ROW_NONE);
  if (!row.compact) return none;  // includes signal frames: the walk cannot tell them apart

  const CfiRule& return_address = row.rules[TrackedIndex(kReturnAddress)];
  if (return_address.kind == CfiRule::Kind::kUndefined) {
    return KindOnly(pc, EMBER_UNWIND_ROW_OUTERMOST);
  }
  // The walk reads the return address at CFA - 8 and takes the CFA as the caller's rsp.
  if (return_address.kind != CfiRule::Kind::kSavedAt || return_address.offset != -8) return none;
  const CfiRule& sp = row.rules[TrackedIndex(kRsp)];
  if (sp.kind != CfiRule::Kind::kCfaPlus || sp.offset != 0) return none;

  ember_unwind_row out{};
  out.pc = pc;
  out.cfa_offset = row.cfa_offset;
  switch (row.cfa_register) {
    case kRsp:
      out.kind = EMBER_UNWIND_ROW_CFA_SP;
      break;
    case kRbp:
      out.kind = EMBER_UNWIND_ROW_CFA_BP;
      break;
    default:
      return none;
  }
  const CfiRule& bp = row.rules[TrackedIndex(kRbp)];
  switch (bp.kind) {
    case CfiRule::Kind::kSame:
      out.bp_rule = EMBER_UNWIND_BP_SAME;
      break;
    case CfiRule::Kind::kSavedAt:
      if (bp.offset < std::numeric_limits<int16_t>::min() ||
          bp.offset > std::numeric_limits<int16_t>::max()) {
        return none;
      }
      out.bp_rule = EMBER_UNWIND_BP_SAVED;
      out.bp_offset = static_cast<int16_t>(bp.offset);
      break;
    case CfiRule::Kind::kUndefined:
      out.bp_rule = EMBER_UNWIND_BP_UNDEFINED;
      break;
    case CfiRule::Kind::kCfaPlus:
      return none;
  }
  return out;
}

absl::StatusOr<std::vector<ember_unwind_row>> BuildUnwindTable(const ElfImage& image,
                                                               UnwindTableStats* stats) {
  auto error = [&image](const absl::Status& status) {
    return absl::Status(status.code(), absl::StrCat(image.path(), ": ", status.message()));
  };
  Elf* elf = image.elf();
  GElf_Ehdr ehdr;
  if (gelf_getehdr(elf, &ehdr) == nullptr) {
    return error(absl::DataLossError(absl::StrCat("no ELF header: ", elf_errmsg(-1))));
  }
  // The rows name x86-64 registers by their DWARF numbers.
  if (ehdr.e_machine != EM_X86_64) {
    return error(
        absl::UnimplementedError(absl::StrCat("machine ", ehdr.e_machine, ", not x86-64")));
  }
  absl::StatusOr<SectionBytes> hdr = FindEhFrameHdr(elf);
  if (!hdr.ok()) return error(hdr.status());
  size_t fde_count = 0;
  absl::StatusOr<std::vector<uint64_t>> starts = FdeStarts(*hdr, &fde_count);
  if (!starts.ok()) return error(starts.status());

  std::unique_ptr<Dwarf_CFI, CfiEnd> cfi(dwarf_getcfi_elf(elf));
  if (cfi == nullptr) {
    return error(absl::DataLossError(absl::StrCat("no usable .eh_frame: ", dwarf_errmsg(-1))));
  }

  std::vector<ember_unwind_row> rows;
  // False when the table is full. Rows arrive with strictly ascending pcs.
  auto emit = [&rows](const ember_unwind_row& row) {
    if (!rows.empty() && SameRule(rows.back(), row)) return true;
    if (rows.size() >= EMBER_MAX_UNWIND_ROWS_PER_FILE) return false;
    rows.push_back(row);
    return true;
  };
  auto too_many = [&error] {
    return error(absl::ResourceExhaustedError(
        absl::StrCat("more than ", EMBER_MAX_UNWIND_ROWS_PER_FILE, " unwind rows")));
  };

  for (size_t i = 0; i < starts->size(); ++i) {
    // An FDE's rows stop where the next FDE starts, even if its range overlaps it: libdw's lookup
    // (by the same table) picks the later FDE there.
    const uint64_t next =
        i + 1 < starts->size() ? (*starts)[i + 1] : std::numeric_limits<uint64_t>::max();
    uint64_t pc = (*starts)[i];
    while (pc < next) {
      Dwarf_Frame* frame = nullptr;
      if (dwarf_cfi_addrframe(cfi.get(), pc, &frame) != 0) break;  // past the FDE's end
      Dwarf_Addr start = 0;
      Dwarf_Addr end = 0;
      bool signal_frame = false;
      const bool has_range = dwarf_frame_info(frame, &start, &end, &signal_frame) >= 0;
      const ember_unwind_row row = UnwindRowOf(CompactRowOf(frame, RowRegisters::kWalk), pc);
      std::free(frame);
      if (!has_range || end <= pc) break;  // no progress: leave the rest to the NONE row below
      if (!emit(row)) return too_many();
      pc = end;
    }
    if (pc < next && !emit(KindOnly(pc, EMBER_UNWIND_ROW_NONE))) return too_many();
  }

  if (stats != nullptr) {
    stats->fdes = fde_count;
    stats->rows_none = static_cast<size_t>(std::count_if(
        rows.begin(), rows.end(),
        [](const ember_unwind_row& row) { return row.kind == EMBER_UNWIND_ROW_NONE; }));
  }
  return rows;
}

UnwindBuckets BucketsOf(const std::vector<ember_unwind_row>& rows) {
  UnwindBuckets buckets;
  if (rows.empty()) return buckets;
  buckets.base = rows.front().pc;
  const uint64_t span = rows.back().pc - buckets.base;
  // Small buckets make short searches; the shift grows until there are no more buckets than rows.
  buckets.shift = 4;
  while (buckets.shift < 63 && (span >> buckets.shift) + 1 > rows.size()) ++buckets.shift;
  const size_t count = static_cast<size_t>(span >> buckets.shift) + 1;
  buckets.first_rows.resize(count);
  size_t row = 0;
  for (size_t b = 0; b < count; ++b) {
    const uint64_t start = buckets.base + (uint64_t{b} << buckets.shift);
    while (row + 1 < rows.size() && rows[row + 1].pc <= start) ++row;
    buckets.first_rows[b] = static_cast<uint32_t>(row);
  }
  return buckets;
}

}  // namespace ember
