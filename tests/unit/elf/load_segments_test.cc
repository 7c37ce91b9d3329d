// ReadLoadSegments on the GNU ld and LLD builds of one program (checked against readelf), and on
// hand-made files: one without PT_LOAD, and program header tables that lie past the file's end.
#include "elf/load_segments.h"

#include <elf.h>
#include <gelf.h>
#include <gtest/gtest.h>
#include <libelf.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "elf/elf_file.h"
#include "support/elf_image_builder.h"
#include "support/nm_symbols.h"

namespace ember {
namespace {

using internal::ElfFile;

// The PT_LOAD lines of `readelf -lW`: "LOAD offset vaddr paddr filesz memsz flags align", the
// flags one to three words (R, R E, RW, RWE).
std::vector<LoadSegment> ReadelfLoads(const std::string& path) {
  std::vector<LoadSegment> loads;
  std::istringstream lines(
      testing::CommandOutput(std::string(EMBER_READELF) + " -lW '" + path + "'"));
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string type, offset, vaddr, paddr, file_size, mem_size;
    if (!(in >> type >> offset >> vaddr >> paddr >> file_size >> mem_size) || type != "LOAD") {
      continue;
    }
    std::string flags, word;
    while (in >> word) flags += word;  // the last word is the alignment
    const size_t hex = flags.find("0x");
    const uint64_t align = std::stoull(flags.substr(hex), nullptr, 16);
    flags = flags.substr(0, hex);
    loads.push_back({.offset = std::stoull(offset, nullptr, 16),
                     .vaddr = std::stoull(vaddr, nullptr, 16),
                     .file_size = std::stoull(file_size, nullptr, 16),
                     .mem_size = std::stoull(mem_size, nullptr, 16),
                     .executable = absl::StrContains(flags, "E"),
                     .writable = absl::StrContains(flags, "W"),
                     .align = align});
  }
  return loads;
}

void ExpectSameSegments(const std::vector<LoadSegment>& got, const std::vector<LoadSegment>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got[i].offset, want[i].offset);
    EXPECT_EQ(got[i].vaddr, want[i].vaddr);
    EXPECT_EQ(got[i].file_size, want[i].file_size);
    EXPECT_EQ(got[i].mem_size, want[i].mem_size);
    EXPECT_EQ(got[i].executable, want[i].executable);
    EXPECT_EQ(got[i].writable, want[i].writable);
    EXPECT_EQ(got[i].align, want[i].align);
  }
}

std::vector<LoadSegment> SegmentsOf(const std::string& path) {
  absl::StatusOr<std::unique_ptr<ElfFile>> file = ElfFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return {};
  absl::StatusOr<std::vector<LoadSegment>> segments = ReadLoadSegments((*file)->elf());
  EXPECT_TRUE(segments.ok()) << segments.status();
  return segments.ok() ? *segments : std::vector<LoadSegment>{};
}

// The executable segment and where the loader maps it (from its first file page, at its
// address's page).
FileMapping CodeMapping(const std::vector<LoadSegment>& segments, uint64_t base) {
  for (const LoadSegment& s : segments) {
    if (!s.executable) continue;
    return {.start = base + (s.vaddr & ~uint64_t{0xfff}),
            .end = base + ((s.vaddr + s.file_size + 0xfff) & ~uint64_t{0xfff}),
            .file_offset = s.offset & ~uint64_t{0xfff},
            .executable = true};
  }
  ADD_FAILURE() << "no executable segment";
  return {};
}

constexpr uint64_t kBase = 0x555555554000;

TEST(LoadSegmentsTest, GnuLdLayoutAsReadelfListsIt) {
  const std::vector<LoadSegment> segments = SegmentsOf(EMBER_GNU_LD_BIN);
  ExpectSameSegments(segments, ReadelfLoads(EMBER_GNU_LD_BIN));
  ASSERT_GE(segments.size(), 3u);
  // GNU ld gives the code pages of its own.
  const FileMapping code = CodeMapping(segments, kBase);
  const LoadSegment* mapped = MappedSegment(segments, code);
  ASSERT_NE(mapped, nullptr);
  EXPECT_TRUE(mapped->executable);
  EXPECT_EQ(code.file_offset, mapped->offset);
  EXPECT_EQ(LoadBias(segments, code), kBase);
}

TEST(LoadSegmentsTest, LldLayoutAsReadelfListsIt) {
  const std::vector<LoadSegment> segments = SegmentsOf(EMBER_LLD_BIN);
  ExpectSameSegments(segments, ReadelfLoads(EMBER_LLD_BIN));
  ASSERT_GE(segments.size(), 3u);
  // LLD starts the code in the file page that ends the read-only data, at an address one page on:
  // its mapping starts at a file offset that the data segment holds, and is placed by the code.
  const FileMapping code = CodeMapping(segments, kBase);
  const LoadSegment* mapped = MappedSegment(segments, code);
  ASSERT_NE(mapped, nullptr);
  EXPECT_TRUE(mapped->executable);
  EXPECT_LT(code.file_offset, mapped->offset) << "the fixture's code no longer shares a page";
  EXPECT_NE(mapped->vaddr - mapped->offset, segments.front().vaddr - segments.front().offset);
  EXPECT_EQ(LoadBias(segments, code), kBase);
}

// A sampled offset is placed as the code mapping that holds it places it, in both layouts: the
// answer of the offset alone is the mapping's.
TEST(LoadSegmentsTest, CodeOffsetsArePlacedAsTheirMappingPlacesThem) {
  for (const char* path : {EMBER_GNU_LD_BIN, EMBER_LLD_BIN}) {
    SCOPED_TRACE(path);
    const std::vector<LoadSegment> segments = SegmentsOf(path);
    const FileMapping code = CodeMapping(segments, kBase);
    const std::optional<uint64_t> bias = LoadBias(segments, code);
    ASSERT_TRUE(bias.has_value());
    const LoadSegment* text = MappedSegment(segments, code);
    ASSERT_NE(text, nullptr);
    for (uint64_t offset :
         {text->offset, text->offset + text->file_size / 2, text->offset + text->file_size - 1}) {
      const uint64_t process_address = code.start + (offset - code.file_offset);
      EXPECT_EQ(CodeOffsetToElfAddress(segments, offset), process_address - *bias);
      EXPECT_EQ(CodeOffsetToElfAddress(segments, offset), text->vaddr + (offset - text->offset));
    }
    // Read-only data on pages of its own keeps its own addresses.
    const LoadSegment& first = segments.front();
    ASSERT_FALSE(first.executable);
    const uint64_t last_data_byte = first.offset + first.file_size - 1;
    if ((last_data_byte & ~uint64_t{0xfff}) != (text->offset & ~uint64_t{0xfff})) {
      EXPECT_EQ(CodeOffsetToElfAddress(segments, last_data_byte),
                first.vaddr + first.file_size - 1);
    }
    uint64_t file_end = 0;
    for (const LoadSegment& s : segments) file_end = std::max(file_end, s.offset + s.file_size);
    EXPECT_FALSE(CodeOffsetToElfAddress(segments, file_end).has_value());
    EXPECT_FALSE(CodeOffsetToElfAddress(segments, ~uint64_t{0}).has_value());
  }
}

TEST(LoadSegmentsTest, FileWithoutLoadableSegmentsHasNone) {
  const std::string path = ::testing::TempDir() + "/load_segments_no_load";
  Elf64_Phdr note{};  // a C struct: what is not set here is zero
  note.p_type = PT_NOTE;
  note.p_offset = 0x100;
  note.p_filesz = 0x10;
  note.p_align = 4;
  ASSERT_TRUE(testing::WriteElfImage(path, {.program_headers = {note}}));
  absl::StatusOr<std::unique_ptr<ElfFile>> file = ElfFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::vector<LoadSegment>> segments = ReadLoadSegments((*file)->elf());
  ASSERT_TRUE(segments.ok()) << segments.status();
  EXPECT_TRUE(segments->empty());
  EXPECT_FALSE(LoadBias(*segments, {.start = kBase, .end = kBase + 0x1000}).has_value());
}

// A table past the file's end, read without ElfFile's checks (as the vDSO's is): an error, not a
// read out of bounds; ElfFile::Open refuses the file with a clear line.
TEST(LoadSegmentsTest, CorruptProgramHeaderTableIsAnError) {
  Elf64_Phdr load{};  // offset and addresses 0
  load.p_type = PT_LOAD;
  load.p_flags = PF_R | PF_X;
  load.p_filesz = 0x200;
  load.p_memsz = 0x200;
  load.p_align = 0x1000;
  const testing::ElfImageSpec past_end = {.program_headers = {load}, .size = 0x400, .phoff = 0x3f0};
  const testing::ElfImageSpec too_many = {.program_headers = {load}, .size = 0x400, .phnum = 200};
  for (const testing::ElfImageSpec& spec : {past_end, too_many}) {
    std::string bytes = testing::ElfImageBytes(spec);
    elf_version(EV_CURRENT);
    Elf* elf = elf_memory(bytes.data(), bytes.size());
    ASSERT_NE(elf, nullptr);
    absl::StatusOr<std::vector<LoadSegment>> segments = ReadLoadSegments(elf);
    elf_end(elf);
    ASSERT_FALSE(segments.ok());
    EXPECT_TRUE(absl::IsDataLoss(segments.status())) << segments.status();
    EXPECT_TRUE(absl::StrContains(segments.status().message(), "program header"))
        << segments.status();

    const std::string path = ::testing::TempDir() + "/load_segments_corrupt";
    ASSERT_TRUE(testing::WriteElfImage(path, spec));
    absl::StatusOr<std::unique_ptr<ElfFile>> file = ElfFile::Open(path);
    ASSERT_FALSE(file.ok());
    EXPECT_TRUE(absl::StrContains(file.status().message(), "program headers extend past the end"))
        << file.status();
  }
}

TEST(LoadSegmentsTest, NoElfIsAnError) { EXPECT_FALSE(ReadLoadSegments(nullptr).ok()); }

}  // namespace
}  // namespace ember
