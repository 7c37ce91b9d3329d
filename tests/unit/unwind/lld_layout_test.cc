// Placement, CFI lookup and symbolization on programs whose segments' file offsets and addresses
// differ: a clang build linked by LLD and Rust release builds (rustc links with LLD), built at
// build time, with the GCC build of the same C program as the control. Each program runs, waiting
// on its stdin, so the kernel's own mappings of it are what is placed; its load bias is known
// independently from its auxiliary vector (AT_ENTRY minus the ELF header's entry point).
#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "process/proc_maps.h"
#include "support/elf_image_builder.h"
#include "symbolize/elf_module.h"
#include "unwind/dwarf_unwinder.h"
#include "unwind/elf_image.h"

extern char** environ;

namespace ember {
namespace {

struct Fixture {
  const char* name;
  const char* path;
  // Functions of the program, by the names symbolization must give them.
  std::vector<std::string> functions;
  bool lld;  // linked by LLD: some segment's offset and address differ from the first's
};

const Fixture kGcc = {"Gcc",
                      EMBER_CFI_CHAINS_BIN,
                      {"leaf_deep", "deep_01", "deep_16", "compare_items", "run_phase", "main"},
                      false};
const Fixture kClangLld = {
    "ClangLld",
    EMBER_CFI_CHAINS_LLD_BIN,
    {"leaf_deep", "deep_01", "deep_16", "compare_items", "run_phase", "main"},
    true};
const Fixture kRustLegacy = {"RustLegacy",
                             EMBER_BURN_LEGACY_BIN,
                             {"burn::server::Handler<T>::rs_hot_leaf", "burn::store::rs_cold_leaf",
                              "burn::rs_deep_leaf", "burn::deep_1", "burn::run_phase", "main"},
                             true};
const Fixture kRustV0 = {"RustV0",
                         EMBER_BURN_V0_BIN,
                         {"<burn::server::Handler<u32>>::rs_hot_leaf", "burn::store::rs_cold_leaf",
                          "burn::rs_deep_leaf", "burn::deep_1", "burn::run_phase", "main"},
                         true};

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The fixture, started and waiting for its go byte; ended (its stdin closed) when done with.
class PausedProgram {
 public:
  explicit PausedProgram(const char* path) {
    int fds[2];
    if (pipe(fds) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[0], 0);
    posix_spawn_file_actions_addclose(&actions, fds[1]);
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    posix_spawn_file_actions_adddup2(&actions, devnull, 1);
    char* argv[] = {const_cast<char*>(path), const_cast<char*>("1"), nullptr};
    if (posix_spawn(&pid_, path, &actions, nullptr, argv, environ) != 0) pid_ = 0;
    posix_spawn_file_actions_destroy(&actions);
    close(devnull);
    close(fds[0]);
    stdin_ = fds[1];
    // Until it sleeps in its read of stdin: the loader is done mapping and protecting.
    for (int i = 0; i < 500 && pid_ > 0; ++i) {
      std::string stat = ReadText(absl::StrCat("/proc/", pid_, "/stat"));
      size_t paren = stat.rfind(')');
      if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'S') break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~PausedProgram() {
    if (stdin_ >= 0) close(stdin_);  // no go byte: it exits at once
    if (pid_ > 0) {
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = 0;
  int stdin_ = -1;
};

// Process address minus ELF address of the main program of `pid`, from its auxiliary vector.
uint64_t TrueBias(pid_t pid, const char* path) {
  std::string auxv = ReadText(absl::StrCat("/proc/", pid, "/auxv"));
  uint64_t entry = 0;
  for (size_t at = 0; at + 16 <= auxv.size(); at += 16) {
    uint64_t pair[2];
    std::memcpy(pair, auxv.data() + at, sizeof(pair));
    if (pair[0] == AT_ENTRY) entry = pair[1];
  }
  Elf64_Ehdr ehdr{};
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(&ehdr), sizeof(ehdr));
  EXPECT_NE(entry, 0u);
  return entry - ehdr.e_entry;
}

std::vector<ExecutableMapping> ProgramText(pid_t pid, const std::string& path) {
  absl::StatusOr<std::vector<MemoryMapping>> maps =
      ParseProcMaps(ReadText(absl::StrCat("/proc/", pid, "/maps")));
  EXPECT_TRUE(maps.ok()) << maps.status();
  std::vector<ExecutableMapping> text;
  if (!maps.ok()) return text;
  for (const MemoryMapping& m : *maps) {
    if (!m.executable || m.path != path) continue;
    text.push_back(
        {{.start = m.start, .end = m.end, .offset = m.offset, .file = m.file, .path = m.path},
         m.path});
  }
  return text;
}

struct Symbol {
  uint64_t address;  // ELF address
  uint64_t size;
};

// The defined functions of the file's .symtab.
std::vector<Symbol> Functions(const char* path) {
  std::vector<Symbol> functions;
  elf_version(EV_CURRENT);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != SHT_SYMTAB) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    for (size_t i = 0; data != nullptr && i < shdr.sh_size / shdr.sh_entsize; ++i) {
      GElf_Sym sym;
      if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) continue;
      if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF || sym.st_size == 0) {
        continue;
      }
      functions.push_back({sym.st_value, sym.st_size});
    }
  }
  elf_end(elf);
  close(fd);
  return functions;
}

void PrintTo(const Fixture& fixture, std::ostream* out) { *out << fixture.name; }

class LldLayoutTest : public ::testing::TestWithParam<Fixture> {};

// The fixture is what it stands for: LLD's text segment is placed apart from its file offset by
// another amount than the first segment, and shares a file page with the segment before it.
TEST_P(LldLayoutTest, FixtureHasTheLayoutUnderTest) {
  auto image = ElfImage::Open(GetParam().path);
  ASSERT_TRUE(image.ok()) << image.status();
  Elf* elf = (*image)->elf();
  size_t count = 0;
  ASSERT_EQ(elf_getphdrnum(elf, &count), 0);
  std::optional<uint64_t> first_distance;
  bool code_elsewhere = false;  // code's address minus offset is not the first segment's
  bool shared_page = false;
  uint64_t previous_end = UINT64_MAX;
  for (size_t i = 0; i < count; ++i) {
    GElf_Phdr phdr;
    if (gelf_getphdr(elf, static_cast<int>(i), &phdr) == nullptr || phdr.p_type != PT_LOAD) {
      continue;
    }
    const uint64_t distance = phdr.p_vaddr - phdr.p_offset;
    if (!first_distance) first_distance = distance;
    if (phdr.p_flags & PF_X) {
      code_elsewhere |= distance != *first_distance;
      shared_page |= previous_end != UINT64_MAX && (phdr.p_offset & ~uint64_t{4095}) < previous_end;
    }
    previous_end = phdr.p_offset + phdr.p_filesz;
  }
  EXPECT_EQ(code_elsewhere, GetParam().lld);
  EXPECT_EQ(shared_page, GetParam().lld);
}

// Every executable mapping of the running program gets the program's true load bias.
TEST_P(LldLayoutTest, MappingsArePlacedAtTheTrueBias) {
  PausedProgram program(GetParam().path);
  ASSERT_GT(program.pid(), 0);
  const uint64_t bias = TrueBias(program.pid(), GetParam().path);
  const std::vector<ExecutableMapping> text = ProgramText(program.pid(), GetParam().path);
  ASSERT_FALSE(text.empty());
  auto image = ElfImage::Open(GetParam().path);
  ASSERT_TRUE(image.ok()) << image.status();
  for (const ExecutableMapping& m : text) {
    std::optional<ModulePlacement> placement = (*image)->Place(m.start, m.end, m.offset);
    ASSERT_TRUE(placement.has_value()) << std::hex << m.start << " offset " << m.offset;
    EXPECT_EQ(placement->bias, bias)
        << std::hex << "mapping 0x" << m.start << " offset 0x" << m.offset << ": bias 0x"
        << placement->bias << ", the program's 0x" << bias;
  }
}

// At the running program's addresses, each function of the program is named (file offset to
// ELF address through the segment holding the offset) and its CFI found: from the function's
// first instruction, one step of the unwinder reads the return address at the stack pointer.
TEST_P(LldLayoutTest, FunctionsAreNamedAndStepByTheirCfi) {
  PausedProgram program(GetParam().path);
  ASSERT_GT(program.pid(), 0);
  const uint64_t bias = TrueBias(program.pid(), GetParam().path);
  const std::vector<ExecutableMapping> text = ProgramText(program.pid(), GetParam().path);
  ASSERT_FALSE(text.empty());
  auto module = ElfModule::Open(GetParam().path, GetParam().path);
  ASSERT_TRUE(module.ok()) << module.status();

  DwarfUnwinder unwinder;
  constexpr uint64_t kSp = 0x7ff000001000;
  constexpr uint64_t kReturnAddress = 0x1234560;  // in no mapping
  std::vector<uint8_t> stack(64);
  std::memcpy(stack.data(), &kReturnAddress, sizeof(kReturnAddress));

  std::set<std::string> wanted(GetParam().functions.begin(), GetParam().functions.end());
  std::map<std::string, std::string> failures;  // function -> what went wrong
  std::set<std::string> found;
  for (const Symbol& symbol : Functions(GetParam().path)) {
    const uint64_t pc = bias + symbol.address;
    const ExecutableMapping* mapping = nullptr;
    for (const ExecutableMapping& m : text) {
      if (m.start <= pc && pc < m.end) mapping = &m;
    }
    if (mapping == nullptr) continue;
    std::optional<ElfAddress> elf_address =
        (*module)->ToElfAddress(FileOffset{mapping->offset + (pc - mapping->start)});
    std::optional<SourceSymbol> named =
        elf_address ? (*module)->Symbolize(*elf_address) : std::nullopt;
    if (!named || !wanted.contains(named->function)) continue;
    found.insert(named->function);
    if (elf_address->value != symbol.address) {
      failures[named->function] = absl::StrCat("ELF address 0x", absl::Hex(elf_address->value));
      continue;
    }
    std::vector<uint64_t> registers(kUnwindRegisterCount);
    registers[kUnwindRegisterSp] = kSp;
    registers[kUnwindRegisterIp] = pc;
    UserStack user_stack{.registers = registers, .stack = stack};
    UnwindResult result = unwinder.Unwind(
        static_cast<uint32_t>(program.pid()), 1, [&] { return text; }, user_stack);
    if (result.frames.size() < 2 || result.frames[1].pc != kReturnAddress) {
      failures[named->function] =
          absl::StrCat("unwound to ", result.frames.size() < 2 ? "nothing" : "a wrong caller");
    }
  }
  for (const std::string& function : wanted) {
    EXPECT_TRUE(found.contains(function)) << function << " is not named at its address";
  }
  for (const auto& [function, failure] : failures) ADD_FAILURE() << function << ": " << failure;
}

// A PT_LOAD segment by the fields the layouts here set.
struct Segment {
  Elf64_Word flags = PF_R;
  Elf64_Off offset = 0;
  Elf64_Addr vaddr = 0;
  Elf64_Xword file_size = 0;
  Elf64_Xword mem_size = 0;
};

// An ELF file of `loads` (PT_LOAD, 4 KiB aligned) and nothing else, opened.
std::shared_ptr<ElfImage> ImageOf(const std::string& name, const std::vector<Segment>& loads) {
  std::vector<Elf64_Phdr> segments;
  for (const Segment& load : loads) {
    segments.push_back({.p_type = PT_LOAD,
                        .p_flags = load.flags,
                        .p_offset = load.offset,
                        .p_vaddr = load.vaddr,
                        .p_paddr = load.vaddr,
                        .p_filesz = load.file_size,
                        .p_memsz = load.mem_size,
                        .p_align = 0x1000});
  }
  const std::string path = ::testing::TempDir() + name;
  EXPECT_TRUE(testing::WriteElfImage(
      path, {.type = ET_DYN, .program_headers = std::move(segments), .size = 0x4000}));
  auto opened = ElfImage::Open(path);
  EXPECT_TRUE(opened.ok()) << opened.status();
  return opened.ok() ? *opened : nullptr;
}

constexpr uint64_t kBase = 0x7f0000000000;

// LLD's layout of a small program: the code shares its file page with the read-only data
// before it, and its one page of mapping fits either segment: the code's is the one mapped
// executable.
TEST(LoadLayoutTest, CodeSharingAPageWithDataIsPlacedByTheCode) {
  std::shared_ptr<ElfImage> image =
      ImageOf("lld_layout_small", {{.flags = PF_R, .offset = 0, .vaddr = 0, .file_size = 0x744},
                                   {.flags = PF_R | PF_X,
                                    .offset = 0x750,
                                    .vaddr = 0x1750,
                                    .file_size = 0x240,
                                    .mem_size = 0x240}});
  ASSERT_NE(image, nullptr);
  std::optional<ModulePlacement> code = image->Place(kBase + 0x1000, kBase + 0x2000, 0);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(code->bias, kBase);
}

// Two code segments in one file page, as a linker script can lay them out: the executable
// preference cannot tell them apart, the size of the mapping does.
TEST(LoadLayoutTest, MappingFitsOnlyTheSegmentItMaps) {
  std::shared_ptr<ElfImage> image = ImageOf(
      "lld_layout_two_code_segments",
      {{.flags = PF_R | PF_X, .offset = 0, .vaddr = 0, .file_size = 0x800, .mem_size = 0x800},
       {.flags = PF_R | PF_X,
        .offset = 0x800,
        .vaddr = 0x1800,
        .file_size = 0x3000,
        .mem_size = 0x3000}});
  ASSERT_NE(image, nullptr);
  // The second segment: its pages at 0x1000..0x5000, from file page 0.
  std::optional<ModulePlacement> second = image->Place(kBase + 0x1000, kBase + 0x5000, 0);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->bias, kBase);
  // The first: one page, which either segment's pages could hold; the first in the file wins.
  std::optional<ModulePlacement> first = image->Place(kBase, kBase + 0x1000, 0);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->bias, kBase);
}

INSTANTIATE_TEST_SUITE_P(Builds, LldLayoutTest,
                         ::testing::Values(kGcc, kClangLld, kRustLegacy, kRustV0),
                         [](const ::testing::TestParamInfo<Fixture>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace ember
