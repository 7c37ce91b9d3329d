// Internal: Go's own symbol table (.gopclntab, the runtime's pclntab), which every Go binary keeps
// even when stripped: function names, file:line of a pc and the inline tree. Go 1.16 and later.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/profile.h"

typedef struct Elf Elf;

namespace ember::internal {

// The bytes of a binary as they lie at its ELF virtual addresses: what its PT_LOAD segments take
// from the file (not the zero-filled tail of a segment). Lookups read only through Read(), so a
// corrupt table can name any address and nothing is read out of bounds.
struct GoImage {
  struct Segment {
    uint64_t vaddr = 0;
    std::span<const uint8_t> bytes;
    bool writable = false;
  };
  std::vector<Segment> segments;
  // From the section headers, when they are there.
  std::optional<uint64_t> pclntab_address;  // .gopclntab
  uint64_t pclntab_size = 0;
  // The dynamic relocations (Elf64_Rela, from PT_DYNAMIC's DT_RELA) and the machine's relative
  // relocation type: a position-independent binary linked by the system linker leaves the
  // addresses the runtime's module data holds at zero in the file and gives them here instead.
  std::span<const uint8_t> relocations;
  uint32_t relative_type = 0;
  // Whether the binary says it is Go (a "Go" build-id note): only then are segments scanned for
  // the table when no section names it.
  bool go_note = false;

  // The `size` bytes at `vaddr` when one segment holds them all; empty otherwise.
  std::span<const uint8_t> Read(uint64_t vaddr, uint64_t size) const;
  // From `vaddr` to the end of the segment that holds it; empty when none does.
  std::span<const uint8_t> ReadToEnd(uint64_t vaddr) const;
};

// The image of an ELF file read through libelf's mapping of it: its segments, sections and notes.
// Reads the mapping: call it where a SIGBUS is caught.
GoImage GoImageOfElf(Elf* elf);

// What the table says of one pc.
struct GoSymbol {
  std::string_view function;  // the out-of-line function
  std::string_view file;      // empty when unknown
  uint32_t line = 0;          // 0 when unknown; in inlined code, the outermost call's line
  // Functions inlined at the pc, innermost first; the first one's line is the pc's own, each
  // later one's where it calls the one before it (as DWARF inline frames are reported).
  std::vector<InlineFrame> inlined;
  // The function is where a thread or goroutine starts (runtime.goexit, runtime.mstart,
  // runtime.rt0_go): no Go code calls it.
  bool thread_start = false;
};

class GoPclntab {
 public:
  // Finds the table (the .gopclntab section, else for a Go binary a scan of its read-only
  // segments for the header) and checks what its header names lies inside it. The spans of
  // `image` must outlive the table. Errors: no table, a Go 1.2 to 1.15 one, corrupt.
  static absl::StatusOr<std::unique_ptr<GoPclntab>> Open(GoImage image);
  // Parses a table at `table_address` whose bytes are `table` (to the end of what holds it).
  static absl::StatusOr<std::unique_ptr<GoPclntab>> Parse(GoImage image, uint64_t table_address,
                                                          std::span<const uint8_t> table);

  // Names the Go function containing `pc` (an ELF virtual address); false when no Go function
  // does or its entry is corrupt. `symbol`'s views point into the image.
  bool Lookup(uint64_t pc, GoSymbol* symbol) const;

  // How far the stack pointer at `pc` is below where it was at the function's entry (the bytes
  // the function has pushed or reserved, its return address excluded); nullopt outside Go code
  // or when the table does not say.
  std::optional<int32_t> SpDelta(uint64_t pc) const;

  // Whether the function containing `pc` saves its caller's frame pointer by a push (amd64
  // PUSHQ BP) that is its first stack change: from Go 1.21 the compiler's prologue, where the
  // frame pointer lies right below the return address whenever the delta is 8 or more. Older
  // prologues store it only after reserving the frame, and assembly may keep none: false.
  bool PushesFramePointer(uint64_t pc) const;

  int version() const { return version_; }  // 116 (Go 1.16-1.17), 118 (1.18-1.19), 120 (1.20+)
  uint32_t function_count() const { return nfunc_; }
  // Whether inlined functions can be told: for Go 1.18 and later the inline trees are found
  // through the runtime's module data (in a position-independent binary, through the relocations
  // that fill it in), taken only when it has the layout this reads.
  bool has_inline_tree() const { return version_ == 116 || gofunc_.has_value(); }
  uint64_t text_start() const { return text_start_; }
  // The addresses its functions cover, [first entry, end of the last).
  std::pair<uint64_t, uint64_t> pc_range() const { return {FunctabPc(0), FunctabPc(nfunc_)}; }
  size_t EstimatedBytes() const { return sizeof(*this) + image_.segments.capacity() * 32; }

 private:
  GoPclntab() = default;
  absl::Status ParseHeader();
  void FindModuleData();
  // Whether the module data at `address` is of the layout this reads (then taken).
  bool TakeModuleData(uint64_t address);
  // The pointer-sized word at `address` as the loader leaves it (before adding the load bias):
  // the file's, else a relative relocation's addend when the file's is zero.
  std::optional<uint64_t> WordAt(uint64_t address) const;

  struct Func {
    uint64_t entry = 0;
    uint64_t end = 0;               // the next function's entry
    std::span<const uint8_t> data;  // the _func record to the end of the table
  };
  // Bytes of a _func record before its pcdata array: the entry, eight (from Go 1.20 nine) 32-bit
  // fields, funcID, flag, a pad byte and nfuncdata.
  uint64_t RecordSize() const {
    return version_ == 116 ? ptr_size_ + 36 : version_ == 118 ? 40 : 44;
  }
  uint64_t FunctabPc(uint32_t i) const;
  std::optional<Func> FindFunc(uint64_t pc) const;
  std::optional<uint32_t> Field(const Func& func, int index) const;
  // The value of the pc-value table at `offset` at `pc`, as the runtime decodes it; nullopt when
  // there is no table or it ends before `pc`.
  std::optional<int32_t> PcValue(uint32_t offset, uint64_t entry, uint64_t pc) const;
  std::optional<int32_t> PcData(const Func& func, uint32_t index, uint64_t pc) const;
  std::string_view FuncName(int64_t name_offset) const;
  // Whether a name begins at `name_offset` of the name table (not inside one).
  bool IsNameStart(int64_t name_offset) const;
  std::string_view FileName(const Func& func, int32_t file_index) const;
  // The inline tree entry `index` of `func`: its name offset and parent pc; false when unreadable
  // or its function id and padding are not those of an entry.
  bool InlineEntry(const Func& func, int32_t index, int32_t* name_offset, int32_t* parent_pc) const;

  GoImage image_;
  std::span<const uint8_t> table_;
  uint64_t table_address_ = 0;
  int version_ = 0;
  uint32_t quantum_ = 1;
  uint32_t ptr_size_ = 8;
  uint32_t nfunc_ = 0;
  uint64_t text_start_ = 0;
  std::span<const uint8_t> funcnames_, cutab_, filetab_, pctab_, functab_, funcdata_;
  std::optional<uint64_t> gofunc_;           // moduledata.gofunc (Go 1.18+)
  std::optional<uint64_t> moduledata_text_;  // moduledata.text
};

}  // namespace ember::internal
