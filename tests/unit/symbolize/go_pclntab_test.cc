// Tests of Go symbolization from .gopclntab on programs built by CMake with two Go toolchains
// (tests/fixtures/go): Debian's Go 1.19 and the newer Go, each plain, stripped (-s -w), and
// stripped with its section headers removed. Names are checked against nm on the plain build,
// lines against markers in the source.
#include "symbolize/go_pclntab.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <libelf.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "elf/elf_file.h"
#include "support/nm_symbols.h"
#include "symbolize/elf_module.h"

namespace ember {
namespace {

using ::testing::HasSubstr;

const std::string kFixtureDir = EMBER_GO_FIXTURE_DIR;
const std::string kSource = EMBER_GO_FIXTURE_SOURCE;  // tests/fixtures/go/gosym/main.go

using ::ember::testing::NmSymbol;

// Sized text symbols of `path`, as nm sees them (Go names need no demangling).
std::vector<NmSymbol> NmFunctions(const std::string& path) {
  return ::ember::testing::NmSizedSymbols(path, "Tt", /*demangle=*/false);
}

const NmSymbol& Named(const std::vector<NmSymbol>& symbols, const std::string& name) {
  for (const NmSymbol& symbol : symbols) {
    if (symbol.name == name) return symbol;
  }
  ADD_FAILURE() << "no symbol " << name;
  static const NmSymbol kNone;
  return kNone;
}

// The line of the source carrying "// line: <marker>".
uint32_t MarkedLine(const std::string& marker) {
  std::ifstream in(kSource);
  uint32_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (absl::EndsWith(line, "// line: " + marker)) return number;
  }
  ADD_FAILURE() << "no line marked " << marker;
  return 0;
}

// A copy of `path` with its section headers gone (e_shoff, e_shnum, e_shstrndx zeroed), as
// sstrip-like tools leave a binary: only the program headers say where anything is.
std::string WithoutSectionHeaders(const std::string& path, const std::string& name) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_GT(bytes.size(), 64u);
  std::memset(bytes.data() + 0x28, 0, 8);  // e_shoff
  std::memset(bytes.data() + 0x3c, 0, 4);  // e_shnum, e_shstrndx
  const std::string out = absl::StrCat(EMBER_TEST_BINARY_DIR, "/", name, "_no_sections");
  std::ofstream(out, std::ios::binary | std::ios::trunc) << bytes;
  return out;
}

struct Toolchain {
  std::string name;  // fixture suffix
  int table_version;
};

void PrintTo(const Toolchain& toolchain, std::ostream* out) { *out << toolchain.name; }

class GoPclntabTest : public ::testing::TestWithParam<Toolchain> {
 protected:
  std::string Program(const std::string& variant = "") const {
    return absl::StrCat(kFixtureDir, "/gosym_", GetParam().name, variant);
  }
  static std::unique_ptr<ElfModule> Open(const std::string& path) {
    absl::StatusOr<std::unique_ptr<ElfModule>> module = ElfModule::Open(path, path);
    EXPECT_TRUE(module.ok()) << module.status();
    return module.ok() ? std::move(*module) : nullptr;
  }
};

TEST_P(GoPclntabTest, ReadsTheTableOfEachBuild) {
  for (const std::string& path :
       {Program(), Program("_stripped"),
        WithoutSectionHeaders(Program("_stripped"), "gosym_" + GetParam().name)}) {
    SCOPED_TRACE(path);
    absl::StatusOr<std::unique_ptr<internal::ElfFile>> file = internal::ElfFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    absl::StatusOr<std::unique_ptr<internal::GoPclntab>> table =
        internal::GoPclntab::Open(internal::GoImageOfElf((*file)->elf()));
    ASSERT_TRUE(table.ok()) << table.status();
    EXPECT_EQ((*table)->version(), GetParam().table_version);
    EXPECT_GT((*table)->function_count(), 500u);
    EXPECT_TRUE((*table)->has_inline_tree());
  }
}

// Every function of the plain build is named as nm names it, with the same file, line and
// inlined functions in the stripped build and in the one without section headers.
TEST_P(GoPclntabTest, StrippedBuildsAreNamedAsThePlainOne) {
  const std::vector<NmSymbol> symbols = NmFunctions(Program());
  ASSERT_GT(symbols.size(), 500u);
  std::unique_ptr<ElfModule> plain = Open(Program());
  std::unique_ptr<ElfModule> stripped = Open(Program("_stripped"));
  std::unique_ptr<ElfModule> no_sections =
      Open(WithoutSectionHeaders(Program("_stripped"), "gosym_" + GetParam().name));
  ASSERT_TRUE(plain && stripped && no_sections);
  size_t named = 0, with_line = 0, with_inlined = 0, compared = 0;
  for (const NmSymbol& symbol : symbols) {
    for (uint64_t offset : {uint64_t{0}, symbol.size / 2, symbol.size - 1}) {
      const ElfAddress address{symbol.address + offset};
      std::optional<SourceSymbol> a = plain->Symbolize(address);
      std::optional<SourceSymbol> b = stripped->Symbolize(address);
      std::optional<SourceSymbol> c = no_sections->Symbolize(address);
      ASSERT_TRUE(a.has_value()) << symbol.name;
      ASSERT_TRUE(b.has_value() && c.has_value()) << symbol.name;
      ++compared;
      EXPECT_EQ(a->kind, FrameKind::kGo) << symbol.name;
      // Assembly functions' symbols carry their ABI (runtime.goexit.abi0); Go's table does not.
      std::string expected = symbol.name;
      if (absl::EndsWith(expected, ".abi0")) expected.resize(expected.size() - 5);
      if (a->function == expected) ++named;
      if (a->line > 0 && !a->source_file.empty()) ++with_line;
      if (!a->inlined.empty()) ++with_inlined;
      for (const std::optional<SourceSymbol>* other : {&b, &c}) {
        EXPECT_EQ((*other)->function, a->function) << symbol.name << "+" << offset;
        EXPECT_EQ((*other)->source_file, a->source_file) << symbol.name << "+" << offset;
        EXPECT_EQ((*other)->line, a->line) << symbol.name << "+" << offset;
        EXPECT_EQ((*other)->inlined, a->inlined) << symbol.name << "+" << offset;
        EXPECT_EQ((*other)->kind, FrameKind::kGo);
      }
    }
  }
  // A few linker-made symbols (type hashes, trampolines) are named otherwise by Go's table.
  EXPECT_GE(named * 100, compared * 99) << named << " of " << compared;
  EXPECT_GE(with_line * 100, compared * 95) << with_line << " of " << compared;
  EXPECT_GT(with_inlined, 20u);
}

// A position-independent build keeps the table in relocated data (.data.rel.ro.gopclntab), and
// the module data's pointers as the loader is to relocate them.
TEST_P(GoPclntabTest, PositionIndependentBuildsAreNamed) {
  const std::vector<NmSymbol> symbols = NmFunctions(Program("_pie"));
  ASSERT_GT(symbols.size(), 500u);
  std::unique_ptr<ElfModule> pie = Open(Program("_pie"));
  ASSERT_NE(pie, nullptr);
  size_t named = 0, with_inlined = 0;
  for (const NmSymbol& symbol : symbols) {
    std::optional<SourceSymbol> found =
        pie->Symbolize(ElfAddress{symbol.address + symbol.size / 2});
    ASSERT_TRUE(found.has_value()) << symbol.name;
    EXPECT_EQ(found->kind, FrameKind::kGo) << symbol.name;
    std::string expected = symbol.name;
    if (absl::EndsWith(expected, ".abi0")) expected.resize(expected.size() - 5);
    if (found->function == expected) ++named;
    if (!found->inlined.empty()) ++with_inlined;
  }
  EXPECT_GE(named * 100, symbols.size() * 99) << named << " of " << symbols.size();
  EXPECT_GT(with_inlined, 20u);
}

// A cgo position-independent build, linked by the system linker: .text begins with C code, and
// the table's text start is zero in the file, and with LLD the module data too: relocations give
// them. Every function the table names is the one nm names at that address.
TEST_P(GoPclntabTest, CgoPositionIndependentBuildsAreNamed) {
  for (const char* linker : {"bfd", "lld"}) {
    const std::string path = absl::StrCat(kFixtureDir, "/cgo_", GetParam().name, "_pie_", linker);
    SCOPED_TRACE(path);
    const std::vector<NmSymbol> symbols = NmFunctions(path);
    ASSERT_GT(symbols.size(), 500u);
    absl::StatusOr<std::unique_ptr<internal::ElfFile>> file = internal::ElfFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    absl::StatusOr<std::unique_ptr<internal::GoPclntab>> go =
        internal::GoPclntab::Open(internal::GoImageOfElf((*file)->elf()));
    ASSERT_TRUE(go.ok()) << go.status();
    EXPECT_TRUE((*go)->has_inline_tree());
    size_t named = 0, wrong = 0, with_inlined = 0;
    for (const NmSymbol& symbol : symbols) {
      internal::GoSymbol found;
      if (!(*go)->Lookup(symbol.address + symbol.size / 2, &found)) continue;
      std::string expected = symbol.name;
      if (absl::EndsWith(expected, ".abi0")) expected.resize(expected.size() - 5);
      ++(found.function == expected ? named : wrong);
      if (!found.inlined.empty()) ++with_inlined;
    }
    EXPECT_GT(named, 500u);
    EXPECT_LE(wrong * 100, named) << wrong << " misnamed of " << named + wrong;
    EXPECT_GT(with_inlined, 20u);
    internal::GoSymbol outer;
    ASSERT_TRUE((*go)->Lookup(Named(symbols, "main.outer").address, &outer));
    EXPECT_EQ(outer.function, "main.outer");
  }
}

TEST_P(GoPclntabTest, LinesAndInlinedFunctions) {
  const std::vector<NmSymbol> symbols = NmFunctions(Program());
  const NmSymbol& hot_leaf = Named(symbols, "main.hotLeaf");
  const NmSymbol& outer = Named(symbols, "main.outer");
  for (const std::string& path : {Program(), Program("_stripped")}) {
    SCOPED_TRACE(path);
    std::unique_ptr<ElfModule> module = Open(path);
    ASSERT_NE(module, nullptr);
    bool body_seen = false;
    for (uint64_t a = hot_leaf.address; a < hot_leaf.address + hot_leaf.size; ++a) {
      std::optional<SourceSymbol> symbol = module->Symbolize(ElfAddress{a});
      ASSERT_TRUE(symbol.has_value());
      EXPECT_EQ(symbol->function, "main.hotLeaf");
      EXPECT_TRUE(absl::EndsWith(symbol->source_file, "/tests/fixtures/go/gosym/main.go"))
          << symbol->source_file;
      EXPECT_TRUE(symbol->inlined.empty());
      body_seen |= symbol->line == MarkedLine("hotLeaf body");
    }
    EXPECT_TRUE(body_seen);
    // The call of hotLeaf in outer is inlinedMid's code: inlinedMid at its line, inlined into
    // outer at the line that calls it.
    bool inlined_seen = false;
    for (uint64_t a = outer.address; a < outer.address + outer.size; ++a) {
      std::optional<SourceSymbol> symbol = module->Symbolize(ElfAddress{a});
      ASSERT_TRUE(symbol.has_value());
      EXPECT_EQ(symbol->function, "main.outer");
      if (symbol->inlined.empty()) continue;
      inlined_seen = true;
      ASSERT_EQ(symbol->inlined.size(), 1u);
      EXPECT_EQ(symbol->inlined[0].function, "main.inlinedMid");
      EXPECT_EQ(symbol->inlined[0].line, MarkedLine("inlinedMid calls hotLeaf"));
      EXPECT_EQ(symbol->inlined[0].source_file, symbol->source_file);
      EXPECT_EQ(symbol->line, MarkedLine("outer calls inlinedMid"));
    }
    EXPECT_TRUE(inlined_seen);
  }
}

TEST_P(GoPclntabTest, GoroutinesAndThreadsStartAtThreadStartFunctions) {
  const std::vector<NmSymbol> symbols = NmFunctions(Program());
  std::unique_ptr<ElfModule> module = Open(Program("_stripped"));
  ASSERT_NE(module, nullptr);
  for (const char* name : {"runtime.goexit.abi0", "runtime.mstart.abi0", "runtime.rt0_go.abi0"}) {
    std::optional<SourceSymbol> symbol =
        module->Symbolize(ElfAddress{Named(symbols, name).address});
    ASSERT_TRUE(symbol.has_value()) << name;
    EXPECT_TRUE(symbol->thread_start) << name;
  }
  for (const char* name : {"main.main", "runtime.main", "main.hotLeaf"}) {
    std::optional<SourceSymbol> symbol =
        module->Symbolize(ElfAddress{Named(symbols, name).address});
    ASSERT_TRUE(symbol.has_value()) << name;
    EXPECT_FALSE(symbol->thread_start) << name;
  }
}

// The table of the plain build, cut short and with bytes changed: a clear error or lookups that
// stay inside it (ASan checks the latter in the sanitizer tier), never a crash.
TEST_P(GoPclntabTest, CorruptTablesFailCleanly) {
  absl::StatusOr<std::unique_ptr<internal::ElfFile>> file = internal::ElfFile::Open(Program());
  ASSERT_TRUE(file.ok());
  internal::GoImage image = internal::GoImageOfElf((*file)->elf());
  ASSERT_TRUE(image.pclntab_address.has_value());
  std::span<const uint8_t> table = image.Read(*image.pclntab_address, image.pclntab_size);
  ASSERT_FALSE(table.empty());
  const uint64_t address = *image.pclntab_address;
  const std::vector<NmSymbol> symbols = NmFunctions(Program());

  for (size_t size : {size_t{0}, size_t{8}, size_t{40}, size_t{100}, table.size() / 10}) {
    absl::StatusOr<std::unique_ptr<internal::GoPclntab>> cut =
        internal::GoPclntab::Parse(image, address, table.first(size));
    EXPECT_FALSE(cut.ok()) << size;
    if (!cut.ok()) {
      EXPECT_THAT(cut.status().message(), HasSubstr("Go symbol table"));
    }
  }
  std::vector<uint8_t> copy(table.begin(), table.end());
  const uint32_t go12 = 0xfffffffb;
  std::memcpy(copy.data(), &go12, 4);
  absl::StatusOr<std::unique_ptr<internal::GoPclntab>> old =
      internal::GoPclntab::Parse(image, address, copy);
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), absl::StatusCode::kUnimplemented);

  std::mt19937 random(7);
  size_t parsed = 0;
  for (int round = 0; round < 200; ++round) {
    std::vector<uint8_t> bytes(table.begin(), table.end());
    for (int flips = 0; flips < 16; ++flips) {
      // Most flips where the header and the tables it points to begin.
      const size_t at =
          random() % (round % 2 == 0 ? std::min<size_t>(bytes.size(), 256) : bytes.size());
      bytes[at] = static_cast<uint8_t>(random());
    }
    absl::StatusOr<std::unique_ptr<internal::GoPclntab>> corrupt =
        internal::GoPclntab::Parse(image, address, bytes);
    if (!corrupt.ok()) continue;
    ++parsed;
    internal::GoSymbol symbol;
    for (size_t i = 0; i < symbols.size(); i += 7) {
      (*corrupt)->Lookup(symbols[i].address + symbols[i].size / 2, &symbol);
      (*corrupt)->SpDelta(symbols[i].address + symbols[i].size / 2);
    }
  }
  EXPECT_GT(parsed, 0u) << "every change was refused: lookups on corrupt tables untested";
}

// main.outer's inline tree with its entries for main.inlinedMid changed: the name offset inside
// a name or past the table, the call's pc outside the function. outer is still named, with no
// inlined frame and no line (a tree that cannot be trusted places none).
TEST_P(GoPclntabTest, CorruptInlineTreesStopTheInlineWalk) {
  absl::StatusOr<std::unique_ptr<internal::ElfFile>> file = internal::ElfFile::Open(Program());
  ASSERT_TRUE(file.ok());
  const internal::GoImage image = internal::GoImageOfElf((*file)->elf());
  ASSERT_TRUE(image.pclntab_address.has_value());
  std::span<const uint8_t> table = image.Read(*image.pclntab_address, image.pclntab_size);
  ASSERT_GT(table.size(), 64u);
  // Header: magic, pad, quantum, ptrsize, nfunc, nfiles, textStart, funcnametab offset...
  uint64_t names_offset = 0;
  std::memcpy(&names_offset, table.data() + 8 + 3 * 8, 8);
  ASSERT_LT(names_offset, table.size());
  const std::string_view names(reinterpret_cast<const char*>(table.data() + names_offset),
                               table.size() - names_offset);
  const size_t found = names.find(std::string_view("\0main.inlinedMid\0", 17));
  ASSERT_NE(found, std::string_view::npos);
  const uint32_t mid_name = static_cast<uint32_t>(found + 1);
  const std::vector<NmSymbol> symbols = NmFunctions(Program());
  const NmSymbol& outer = Named(symbols, "main.outer");

  enum class Change { kInsideAName, kPastTheNames, kCallOutside };
  for (Change change : {Change::kInsideAName, Change::kPastTheNames, Change::kCallOutside}) {
    SCOPED_TRACE(static_cast<int>(change));
    internal::GoImage changed = image;
    // Every aligned word equal to inlinedMid's name offset in read-only data: its entries in the
    // inline trees (Go 1.26 keeps those inside the table), and its own record, which outer's
    // lookups do not read.
    std::vector<std::vector<uint8_t>> copies;
    copies.reserve(changed.segments.size());
    size_t entries = 0;
    for (internal::GoImage::Segment& segment : changed.segments) {
      if (segment.writable) continue;
      std::vector<uint8_t>& bytes = copies.emplace_back(segment.bytes.begin(), segment.bytes.end());
      for (size_t at = 0; at + 8 <= bytes.size(); at += 4) {
        uint32_t value;
        std::memcpy(&value, bytes.data() + at, 4);
        if (value != mid_name) continue;
        ++entries;
        const uint32_t bad = change == Change::kInsideAName    ? mid_name + 1
                             : change == Change::kPastTheNames ? 0x7ffffff0u
                                                               : 0x7fff0000u;
        std::memcpy(bytes.data() + at + (change == Change::kCallOutside ? 4 : 0), &bad, 4);
      }
      segment.bytes = bytes;
    }
    ASSERT_GT(entries, 0u);
    absl::StatusOr<std::unique_ptr<internal::GoPclntab>> go =
        internal::GoPclntab::Open(std::move(changed));
    ASSERT_TRUE(go.ok()) << go.status();
    size_t inlined_pcs = 0;
    for (uint64_t a = outer.address; a < outer.address + outer.size; ++a) {
      internal::GoSymbol symbol;
      ASSERT_TRUE((*go)->Lookup(a, &symbol));
      EXPECT_EQ(symbol.function, "main.outer");
      EXPECT_TRUE(symbol.inlined.empty()) << symbol.inlined[0].function;
      // Where outer's own code is, its line stays.
      if (symbol.line == 0) ++inlined_pcs;
    }
    EXPECT_GT(inlined_pcs, 0u);
  }
}

// The module data is found by its first words (the table's address, then its name table's); the
// words read after them by number are trusted only while its minpc and maxpc span the function
// table, which a module data of another layout, or words that only look like its start, do not.
TEST_P(GoPclntabTest, ModuleDataOfAnotherLayoutIsNotRead) {
  absl::StatusOr<std::unique_ptr<internal::ElfFile>> file = internal::ElfFile::Open(Program());
  ASSERT_TRUE(file.ok());
  const internal::GoImage image = internal::GoImageOfElf((*file)->elf());
  ASSERT_TRUE(image.pclntab_address.has_value());
  std::span<const uint8_t> table = image.Read(*image.pclntab_address, image.pclntab_size);
  ASSERT_GT(table.size(), 64u);
  uint64_t names_offset = 0;
  std::memcpy(&names_offset, table.data() + 8 + 3 * 8, 8);
  const uint64_t words[2] = {*image.pclntab_address, *image.pclntab_address + names_offset};
  const std::vector<NmSymbol> symbols = NmFunctions(Program());
  const int gofunc_word = GetParam().table_version == 118 ? 38 : 40;
  // maxpc, or the start of read-only data before gofunc, one word on: as if a field were added.
  for (int moved : {21, gofunc_word - 1}) {
    SCOPED_TRACE(moved);
    internal::GoImage changed = image;
    std::vector<std::vector<uint8_t>> copies;
    copies.reserve(changed.segments.size());
    size_t found = 0;
    for (internal::GoImage::Segment& segment : changed.segments) {
      if (!segment.writable) continue;
      std::vector<uint8_t>& bytes = copies.emplace_back(segment.bytes.begin(), segment.bytes.end());
      for (size_t at = 0; at + 48 * 8 <= bytes.size(); at += 8) {
        if (std::memcmp(bytes.data() + at, words, 16) != 0) continue;
        ++found;
        // maxpc 8 bytes on; the start of read-only data 8 bytes past gofunc.
        const size_t from = moved == 21 ? 21 : moved + 1;
        uint64_t next;
        std::memcpy(&next, bytes.data() + at + from * 8, 8);
        next += 8;
        std::memcpy(bytes.data() + at + moved * 8, &next, 8);
      }
      segment.bytes = bytes;
    }
    ASSERT_EQ(found, 1u);
    absl::StatusOr<std::unique_ptr<internal::GoPclntab>> go =
        internal::GoPclntab::Open(std::move(changed));
    if (moved == 21 && GetParam().table_version >= 120) {
      // Newer linkers leave the header's text start zero: the module data's is the only one,
      // and the .text section no substitute (C code begins it in a cgo binary).
      ASSERT_FALSE(go.ok());
      EXPECT_THAT(go.status().message(), HasSubstr("no text start"));
      continue;
    }
    ASSERT_TRUE(go.ok()) << go.status();
    EXPECT_FALSE((*go)->has_inline_tree());
    // Names and lines do not need the inline trees.
    internal::GoSymbol symbol;
    ASSERT_TRUE((*go)->Lookup(Named(symbols, "main.outer").address, &symbol));
    EXPECT_EQ(symbol.function, "main.outer");
    EXPECT_TRUE(symbol.inlined.empty());
  }
}

INSTANTIATE_TEST_SUITE_P(Toolchains, GoPclntabTest,
                         ::testing::Values(Toolchain{"go119", 118}, Toolchain{"gonew", 120}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace ember
