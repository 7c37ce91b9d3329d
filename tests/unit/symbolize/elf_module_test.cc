// Tests of ElfModule on fixture binaries built by CMake (tests/fixtures/symbolize), checked
// against binutils: nm for symbols, addr2line for lines, readelf for program headers.
#include "symbolize/elf_module.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "support/nm_symbols.h"

namespace ember {
namespace {

const std::string kFixtureDir = EMBER_SYMBOLIZE_FIXTURE_DIR;
const std::string kProgram = kFixtureDir + "/ember_sym_fixture";
const std::string kLibrary = kFixtureDir + "/libember_sym_fixture_lib.so";
const std::string kDebuglinkProgram = kFixtureDir + "/debuglink/ember_sym_fixture_stripped";
const std::string kDebuglinkLibrary =
    kFixtureDir + "/debuglink/libember_sym_fixture_lib_stripped.so";
const std::string kBuildIdProgram = kFixtureDir + "/buildid/ember_sym_fixture_nolink";
const std::string kBuildIdDebugDir = kFixtureDir + "/buildid_debug";
// A debug root with nothing in it, so that the host's /usr/lib/debug never leaks into a test.
const std::string kEmptyDebugDir = kFixtureDir + "/no_such_debug_dir";

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

using ::ember::testing::CommandOutput;
using ::ember::testing::NmSymbol;  // names demangled by nm -C

// Sized function symbols (T/t/W: global, local, weak text) of `path`, as nm sees them.
std::vector<NmSymbol> NmFunctions(const std::string& path) {
  return ::ember::testing::NmSizedSymbols(path, "TtW", /*demangle=*/true);
}

// Names of every nm symbol covering `address`: aliases (several names for one function) are
// all acceptable answers.
std::set<std::string> NamesCovering(const std::vector<NmSymbol>& symbols, uint64_t address) {
  std::set<std::string> names;
  for (const NmSymbol& s : symbols) {
    if (address >= s.address && address < s.address + s.size) names.insert(s.name);
  }
  return names;
}

const NmSymbol* FindNm(const std::vector<NmSymbol>& symbols, const std::string& name) {
  for (const NmSymbol& s : symbols) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::unique_ptr<ElfModule> OpenOrDie(const std::string& path,
                                     const std::string& debug_dir = kEmptyDebugDir) {
  ElfModuleOptions options;
  options.debug_dir = debug_dir;
  absl::StatusOr<std::unique_ptr<ElfModule>> module = ElfModule::Open(path, path, options);
  EXPECT_TRUE(module.ok()) << module.status();
  return module.ok() ? std::move(*module) : nullptr;
}

// Asserts that every sized function nm reports in `nm_path` symbolizes, in `module`, to its
// name at its first and last byte.
void ExpectMatchesNm(const ElfModule& module, const std::string& nm_path) {
  std::vector<NmSymbol> symbols = NmFunctions(nm_path);
  ASSERT_GE(symbols.size(), 3u) << nm_path;
  for (const NmSymbol& s : symbols) {
    for (uint64_t address : {s.address, s.address + s.size - 1}) {
      std::optional<SourceSymbol> symbol = module.Symbolize(ElfAddress{address});
      ASSERT_TRUE(symbol.has_value()) << s.name << " at 0x" << std::hex << address;
      EXPECT_THAT(NamesCovering(symbols, address), ::testing::Contains(symbol->function))
          << "at 0x" << std::hex << address;
    }
  }
}

// The line of `marker` in a fixture source file.
uint32_t MarkerLine(const std::string& marker,
                    const std::string& path = EMBER_SYMBOLIZE_FIXTURE_SOURCE) {
  std::ifstream in(path);
  uint32_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.find(marker) != std::string::npos) return number;
  }
  ADD_FAILURE() << "marker not found: " << marker << " in " << path;
  return 0;
}

TEST(ElfModuleTest, ReadsPathAndBuildId) {
  std::unique_ptr<ElfModule> module = OpenOrDie(kProgram);
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(module->path(), kProgram);
  std::string notes = CommandOutput(std::string(EMBER_READELF) + " -n '" + kProgram + "'");
  size_t pos = notes.find("Build ID: ");
  ASSERT_NE(pos, std::string::npos);
  std::string expected = notes.substr(pos + 10, notes.find('\n', pos) - pos - 10);
  EXPECT_EQ(module->build_id(), expected);
  EXPECT_EQ(module->build_id().size(), 40u);  // --build-id=sha1

  std::unique_ptr<ElfModule> library = OpenOrDie(kLibrary);
  ASSERT_NE(library, nullptr);
  EXPECT_EQ(library->build_id(), "");  // linked with --build-id=none
}

TEST(ElfModuleTest, DisplayPathIsReportedNotOpenPath) {
  absl::StatusOr<std::unique_ptr<ElfModule>> module =
      ElfModule::Open(kProgram, "/usr/bin/as-the-process-saw-it");
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_EQ((*module)->path(), "/usr/bin/as-the-process-saw-it");
}

TEST(ElfModuleTest, EveryFunctionMatchesNm) {
  std::unique_ptr<ElfModule> module = OpenOrDie(kProgram);
  ASSERT_NE(module, nullptr);
  ExpectMatchesNm(*module, kProgram);
}

TEST(ElfModuleTest, DemanglesNamespacedTemplatedAndOverloadedNames) {
  std::unique_ptr<ElfModule> module = OpenOrDie(kProgram);
  ASSERT_NE(module, nullptr);
  std::vector<NmSymbol> symbols = NmFunctions(kProgram);
  for (const std::string& name : {
           std::string("ember_fixture::Widget::Spin(int) const"),
           std::string("int ember_fixture::Widget::Unrolled<4>() const"),
           std::string("int ember_fixture::Widget::Unrolled<7>() const"),
           std::string("int ember_fixture::detail::Accumulate<int>(std::vector<int, "
                       "std::allocator<int> > const&)"),
           std::string("ember_fixture::detail::Overloaded(int)"),
           std::string("ember_fixture::detail::Overloaded(double)"),
           std::string("ember_fixture_plain_c"),
       }) {
    const NmSymbol* s = FindNm(symbols, name);
    ASSERT_NE(s, nullptr) << "fixture lacks " << name;
    std::optional<SourceSymbol> symbol = module->Symbolize(ElfAddress{s->address + 1});
    ASSERT_TRUE(symbol.has_value()) << name;
    EXPECT_EQ(symbol->function, name);
  }
}

// Every instruction of Widget::Spin maps to a line of its body in the fixture source. (Which
// body line the first instruction gets is the compiler's choice; LinesMatchAddr2line pins it.)
void ExpectSpinLines(const ElfModule& module) {
  std::vector<NmSymbol> symbols = NmFunctions(kProgram);
  const NmSymbol* spin = FindNm(symbols, "ember_fixture::Widget::Spin(int) const");
  ASSERT_NE(spin, nullptr);
  uint32_t begin = MarkerLine("EMBER_LINE_MARKER: Widget::Spin begin");
  uint32_t end = MarkerLine("EMBER_LINE_MARKER: Widget::Spin end");
  for (uint64_t a = spin->address; a < spin->address + spin->size; ++a) {
    std::optional<SourceSymbol> symbol = module.Symbolize(ElfAddress{a});
    ASSERT_TRUE(symbol.has_value());
    EXPECT_EQ(symbol->function, spin->name);
    EXPECT_EQ(symbol->source_file, EMBER_SYMBOLIZE_FIXTURE_SOURCE);
    EXPECT_GE(symbol->line, begin) << "at 0x" << std::hex << a;
    EXPECT_LE(symbol->line, end) << "at 0x" << std::hex << a;
  }
}

TEST(ElfModuleTest, SourceLineOfKnownFunction) {
  std::unique_ptr<ElfModule> module = OpenOrDie(kProgram);
  ASSERT_NE(module, nullptr);
  ExpectSpinLines(*module);
}

// Lines agree with addr2line -i's outermost frame (the line within the symbol's own function)
// at the start, middle and end of every fixture function defined in the fixture source.
TEST(ElfModuleTest, LinesMatchAddr2line) {
  std::unique_ptr<ElfModule> module = OpenOrDie(kProgram);
  ASSERT_NE(module, nullptr);
  std::vector<uint64_t> addresses;
  for (const NmSymbol& s : NmFunctions(kProgram)) {
    if (s.name.find("ember_fixture") == std::string::npos && s.name != "main") continue;
    addresses.push_back(s.address);
    addresses.push_back(s.address + s.size / 2);
    addresses.push_back(s.address + s.size - 1);
  }
  ASSERT_GT(addresses.size(), 20u);
  std::ostringstream command;
  command << EMBER_ADDR2LINE << " -a -i -e '" << kProgram << "'" << std::hex;
  for (uint64_t a : addresses) command << " 0x" << a;
  // -a starts each address's group with a "0x..." line; -i lists inlined frames innermost first.
  std::map<uint64_t, std::string> outermost;
  uint64_t current = 0;
  for (const std::string& line : Lines(CommandOutput(command.str()))) {
    if (line.rfind("0x", 0) == 0) {
      current = std::stoull(line, nullptr, 16);
    } else {
      outermost[current] = line.substr(0, line.find(" (discriminator"));
    }
  }
  int checked = 0;
  for (uint64_t a : addresses) {
    std::optional<SourceSymbol> symbol = module->Symbolize(ElfAddress{a});
    ASSERT_TRUE(symbol.has_value());
    std::string expected = outermost[a];
    if (expected.rfind("??", 0) == 0) continue;  // addr2line knows no line either
    std::string actual = symbol->source_file + ":" + std::to_string(symbol->line);
    EXPECT_EQ(actual, expected) << symbol->function << " at 0x" << std::hex << a;
    ++checked;
  }
  EXPECT_GT(checked, 20);
}

// Inline frames, on sym_inline.cc: Scale (static, always_inline) inlined into SingleInline;
// Middle (always_inline) inlined into DoubleInline, with Scale inlined into it; NotInlined.
const std::string kInlineSource = EMBER_SYMBOLIZE_INLINE_SOURCE;
const std::string kInlineHeader = EMBER_SYMBOLIZE_INLINE_HEADER;

struct LineRange {
  uint32_t first;
  uint32_t last;
};

// The lines between the "<function> begin" and "<function> end" markers of `path`.
LineRange BodyOf(const std::string& function, const std::string& path) {
  return {MarkerLine("EMBER_INLINE_MARKER: " + function + " begin", path),
          MarkerLine("EMBER_INLINE_MARKER: " + function + " end", path)};
}

std::string Describe(const SourceSymbol& symbol) {
  std::ostringstream out;
  for (const InlineFrame& f : symbol.inlined) {
    out << f.function << " " << f.source_file << ":" << f.line << " <- ";
  }
  out << symbol.function << " " << symbol.source_file << ":" << symbol.line;
  return out.str();
}

// Each address of the nm symbol `name` with what `module` says of it.
std::vector<std::pair<uint64_t, SourceSymbol>> SymbolizeEach(const ElfModule& module,
                                                             const std::string& name) {
  std::vector<std::pair<uint64_t, SourceSymbol>> out;
  std::vector<NmSymbol> symbols = NmFunctions(kProgram);
  const NmSymbol* s = FindNm(symbols, name);
  EXPECT_NE(s, nullptr) << "fixture lacks " << name;
  if (s == nullptr) return out;
  for (uint64_t a = s->address; a < s->address + s->size; ++a) {
    std::optional<SourceSymbol> symbol = module.Symbolize(ElfAddress{a});
    EXPECT_TRUE(symbol.has_value()) << name << " at 0x" << std::hex << a;
    if (!symbol.has_value()) continue;
    EXPECT_EQ(symbol->function, name) << "at 0x" << std::hex << a;
    EXPECT_EQ(symbol->source_file, kInlineSource) << "at 0x" << std::hex << a;
    out.emplace_back(a, std::move(*symbol));
  }
  return out;
}

void ExpectInlineChains(const ElfModule& module) {
  const LineRange scale = BodyOf("Scale", kInlineHeader);
  const LineRange middle = BodyOf("Middle", kInlineHeader);
  const uint32_t middle_calls_scale =
      MarkerLine("EMBER_INLINE_MARKER: Middle calls Scale", kInlineHeader);
  const auto in = [](uint32_t line, LineRange range) {
    return line >= range.first && line <= range.last;
  };

  // One level: [Scale at its own line, SingleInline at the call].
  const LineRange single = BodyOf("SingleInline", kInlineSource);
  int inlined = 0;
  for (const auto& [a, symbol] : SymbolizeEach(module, "ember_fixture::inl::SingleInline(int)")) {
    SCOPED_TRACE(Describe(symbol));
    if (symbol.inlined.empty()) {
      EXPECT_TRUE(in(symbol.line, single));
      continue;
    }
    ++inlined;
    ASSERT_EQ(symbol.inlined.size(), 1u);
    // Scale is static: no linkage name, so its namespace comes from where it is declared.
    EXPECT_EQ(symbol.inlined[0].function, "ember_fixture::inl::Scale");
    EXPECT_EQ(symbol.inlined[0].source_file, kInlineHeader);
    EXPECT_TRUE(in(symbol.inlined[0].line, scale));
    EXPECT_EQ(symbol.line,
              MarkerLine("EMBER_INLINE_MARKER: SingleInline calls Scale", kInlineSource));
  }
  EXPECT_GT(inlined, 0) << "no address of SingleInline is in Scale's inlined body";

  // Two levels: [Scale at its own line, Middle at its call of Scale, DoubleInline at its call of
  // Middle], and [Middle, DoubleInline] outside Scale's body.
  const LineRange outer = BodyOf("DoubleInline", kInlineSource);
  const uint32_t double_calls_middle =
      MarkerLine("EMBER_INLINE_MARKER: DoubleInline calls Middle", kInlineSource);
  int depth_counts[3] = {0, 0, 0};
  for (const auto& [a, symbol] : SymbolizeEach(module, "ember_fixture::inl::DoubleInline(int)")) {
    SCOPED_TRACE(Describe(symbol));
    ASSERT_LE(symbol.inlined.size(), 2u);
    ++depth_counts[symbol.inlined.size()];
    if (symbol.inlined.empty()) {
      EXPECT_TRUE(in(symbol.line, outer));
      continue;
    }
    EXPECT_EQ(symbol.line, double_calls_middle);
    const InlineFrame& middle_frame = symbol.inlined.back();
    EXPECT_EQ(middle_frame.function, "ember_fixture::inl::Middle(int)");
    EXPECT_EQ(middle_frame.source_file, kInlineHeader);
    if (symbol.inlined.size() == 1) {
      EXPECT_TRUE(in(middle_frame.line, middle));
      continue;
    }
    EXPECT_EQ(middle_frame.line, middle_calls_scale);
    EXPECT_EQ(symbol.inlined[0].function, "ember_fixture::inl::Scale");
    EXPECT_EQ(symbol.inlined[0].source_file, kInlineHeader);
    EXPECT_TRUE(in(symbol.inlined[0].line, scale));
  }
  EXPECT_GT(depth_counts[1], 0) << "no address in Middle's own code";
  EXPECT_GT(depth_counts[2], 0) << "no address in Scale's body inlined into Middle";

  // No inlining: exactly what symbolization gave before inline frames existed.
  const LineRange plain = BodyOf("NotInlined", kInlineSource);
  for (const auto& [a, symbol] : SymbolizeEach(module, "ember_fixture::inl::NotInlined(int)")) {
    SCOPED_TRACE(Describe(symbol));
    EXPECT_TRUE(symbol.inlined.empty());
    EXPECT_TRUE(in(symbol.line, plain));
  }
}

TEST(ElfModuleTest, InlinedFunctionsAreListedInnermostFirst) {
  std::unique_ptr<ElfModule> module = OpenOrDie(kProgram);
  ASSERT_NE(module, nullptr);
  ExpectInlineChains(*module);
}

// Every level of every inline chain in the inline fixture agrees with addr2line -i: as many
// frames, and the same file:line for each. (Names are checked above: binutils names an inlined
// function without a linkage name after its caller.)
TEST(ElfModuleTest, InlineChainsMatchAddr2line) {
  std::unique_ptr<ElfModule> module = OpenOrDie(kProgram);
  ASSERT_NE(module, nullptr);
  std::vector<uint64_t> addresses;
  for (const NmSymbol& s : NmFunctions(kProgram)) {
    if (s.name.find("ember_fixture::inl::") != 0) continue;
    for (uint64_t a = s.address; a < s.address + s.size; ++a) addresses.push_back(a);
  }
  ASSERT_GT(addresses.size(), 50u);
  std::ostringstream command;
  command << EMBER_ADDR2LINE << " -a -i -e '" << kProgram << "'" << std::hex;
  for (uint64_t a : addresses) command << " 0x" << a;
  std::map<uint64_t, std::vector<std::string>> chains;  // innermost first
  uint64_t current = 0;
  for (const std::string& line : Lines(CommandOutput(command.str()))) {
    if (line.rfind("0x", 0) == 0) {
      current = std::stoull(line, nullptr, 16);
    } else {
      chains[current].push_back(line.substr(0, line.find(" (discriminator")));
    }
  }
  int with_inlines = 0;
  for (uint64_t a : addresses) {
    std::optional<SourceSymbol> symbol = module->Symbolize(ElfAddress{a});
    ASSERT_TRUE(symbol.has_value());
    std::vector<std::string> ours;
    for (const InlineFrame& f : symbol->inlined) {
      ours.push_back(f.source_file + ":" + std::to_string(f.line));
    }
    ours.push_back(symbol->source_file + ":" + std::to_string(symbol->line));
    EXPECT_EQ(ours, chains[a]) << symbol->function << " at 0x" << std::hex << a;
    if (!symbol->inlined.empty()) ++with_inlines;
  }
  EXPECT_GT(with_inlines, 10);
}

TEST(ElfModuleTest, StrippedBinaryUsesDebuglinkFile) {
  std::unique_ptr<ElfModule> module = OpenOrDie(kDebuglinkProgram);
  ASSERT_NE(module, nullptr);
  std::unique_ptr<ElfModule> original = OpenOrDie(kProgram);
  EXPECT_EQ(module->build_id(), original->build_id());
  ExpectMatchesNm(*module, kProgram);
  ExpectSpinLines(*module);
  ExpectInlineChains(*module);
}

TEST(ElfModuleTest, StrippedLibraryWithoutBuildIdUsesDebuglinkCrc) {
  std::unique_ptr<ElfModule> module = OpenOrDie(kDebuglinkLibrary);
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(module->build_id(), "");
  ExpectMatchesNm(*module, kLibrary);
}

TEST(ElfModuleTest, StrippedBinaryUsesBuildIdTree) {
  std::unique_ptr<ElfModule> module = OpenOrDie(kBuildIdProgram, kBuildIdDebugDir);
  ASSERT_NE(module, nullptr);
  ExpectMatchesNm(*module, kProgram);
  ExpectSpinLines(*module);
  ExpectInlineChains(*module);
}

TEST(ElfModuleTest, StrippedBinaryWithoutDebugFileKnowsOnlyDynamicSymbols) {
  std::unique_ptr<ElfModule> module = OpenOrDie(kBuildIdProgram, kEmptyDebugDir);
  ASSERT_NE(module, nullptr);
  std::vector<NmSymbol> symbols = NmFunctions(kProgram);
  const NmSymbol* spin = FindNm(symbols, "ember_fixture::Widget::Spin(int) const");
  ASSERT_NE(spin, nullptr);
  EXPECT_FALSE(module->Symbolize(ElfAddress{spin->address}).has_value());
}

// A binary of a container (opened under its root) finds its .gnu_debuglink file under that root
// only: not at the same path in the agent's namespace, and a FIFO there is refused at once.
class DebugLinkUnderRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Each test its own root: ctest runs the tests of one fixture in parallel processes.
    root_ = absl::StrCat(::testing::TempDir(), "/ember_debuglink_root_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name(), "_",
                         getpid());
    std::filesystem::remove_all(root_);
    binary_ = kDebuglinkProgram;  // the same path inside the root as on the host
    std::filesystem::create_directories(
        root_ + std::filesystem::path(binary_).parent_path().string() + "/.debug");
    std::filesystem::copy_file(kDebuglinkProgram, root_ + binary_);
    debug_file_ =
        std::filesystem::path(binary_).parent_path().string() + "/.debug/ember_sym_fixture.debug";
    ASSERT_TRUE(std::filesystem::exists(debug_file_));  // the host's copy, never to be read
    std::vector<NmSymbol> symbols = NmFunctions(kProgram);
    const NmSymbol* spin = FindNm(symbols, "ember_fixture::Widget::Spin(int) const");
    ASSERT_NE(spin, nullptr);
    spin_ = spin->address;
    alarm(20);  // a blocking open ends the test
  }
  void TearDown() override {
    alarm(0);
    std::filesystem::remove_all(root_);
  }
  std::unique_ptr<ElfModule> Open() {
    ElfModuleOptions options;
    options.debug_dir = kEmptyDebugDir;
    absl::StatusOr<std::unique_ptr<ElfModule>> module =
        ElfModule::Open(FileLocation(root_, binary_), binary_, options);
    EXPECT_TRUE(module.ok()) << module.status();
    return module.ok() ? std::move(*module) : nullptr;
  }

  std::string root_, binary_, debug_file_;
  uint64_t spin_ = 0;
};

TEST_F(DebugLinkUnderRootTest, TheHostsDebugFileIsNotRead) {
  std::unique_ptr<ElfModule> module = Open();
  ASSERT_NE(module, nullptr);
  EXPECT_FALSE(module->Symbolize(ElfAddress{spin_}).has_value());
}

TEST_F(DebugLinkUnderRootTest, TheRootsOwnDebugFileIsRead) {
  std::filesystem::copy_file(debug_file_, root_ + debug_file_);
  std::unique_ptr<ElfModule> module = Open();
  ASSERT_NE(module, nullptr);
  std::optional<SourceSymbol> symbol = module->Symbolize(ElfAddress{spin_});
  ASSERT_TRUE(symbol.has_value());
  EXPECT_EQ(symbol->function, "ember_fixture::Widget::Spin(int) const");
}

TEST_F(DebugLinkUnderRootTest, AFifoAtTheDebugLinkIsRefusedAtOnce) {
  ASSERT_EQ(mkfifo((root_ + debug_file_).c_str(), 0600), 0);
  const uint64_t before = OpenRefusalCount(OpenRefusal::kNotRegular);
  std::unique_ptr<ElfModule> module = Open();
  ASSERT_NE(module, nullptr);
  EXPECT_FALSE(module->Symbolize(ElfAddress{spin_}).has_value());
  EXPECT_EQ(OpenRefusalCount(OpenRefusal::kNotRegular), before + 1);
}

TEST(ElfModuleTest, CorruptDebugFileCandidateIsIgnored) {
  // A debug root whose .build-id entry for the program is not its debug file.
  std::string root = ::testing::TempDir() + "/ember_bad_debug_root";
  std::unique_ptr<ElfModule> original = OpenOrDie(kProgram);
  std::string id = original->build_id();
  std::filesystem::create_directories(root + "/.build-id/" + id.substr(0, 2));
  std::filesystem::copy_file(kLibrary,
                             root + "/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug",
                             std::filesystem::copy_options::overwrite_existing);
  std::unique_ptr<ElfModule> module = OpenOrDie(kBuildIdProgram, root);
  ASSERT_NE(module, nullptr);
  std::vector<NmSymbol> symbols = NmFunctions(kProgram);
  const NmSymbol* spin = FindNm(symbols, "ember_fixture::Widget::Spin(int) const");
  ASSERT_NE(spin, nullptr);
  EXPECT_FALSE(module->Symbolize(ElfAddress{spin->address}).has_value());
}

struct LoadSegment {
  uint64_t offset, vaddr, file_size;
};

std::vector<LoadSegment> ReadelfLoads(const std::string& path) {
  std::vector<LoadSegment> loads;
  for (const std::string& line :
       Lines(CommandOutput(std::string(EMBER_READELF) + " -lW '" + path + "'"))) {
    std::istringstream in(line);
    std::string type, offset, vaddr, paddr, file_size;
    if (!(in >> type >> offset >> vaddr >> paddr >> file_size) || type != "LOAD") continue;
    loads.push_back({std::stoull(offset, nullptr, 16), std::stoull(vaddr, nullptr, 16),
                     std::stoull(file_size, nullptr, 16)});
  }
  return loads;
}

TEST(ElfModuleTest, ToElfAddressFollowsProgramHeaders) {
  std::unique_ptr<ElfModule> module = OpenOrDie(kLibrary);
  ASSERT_NE(module, nullptr);
  std::vector<LoadSegment> loads = ReadelfLoads(kLibrary);
  ASSERT_GE(loads.size(), 2u);
  uint64_t file_end = 0;
  for (const LoadSegment& load : loads) {
    EXPECT_NE(load.vaddr, load.offset) << "fixture should be linked at a non-zero base";
    std::optional<ElfAddress> first = module->ToElfAddress(FileOffset{load.offset});
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->value, load.vaddr);
    std::optional<ElfAddress> last =
        module->ToElfAddress(FileOffset{load.offset + load.file_size - 1});
    ASSERT_TRUE(last.has_value());
    EXPECT_EQ(last->value, load.vaddr + load.file_size - 1);
    file_end = std::max(file_end, load.offset + load.file_size);
  }
  EXPECT_FALSE(module->ToElfAddress(FileOffset{file_end}).has_value());
  EXPECT_FALSE(module->ToElfAddress(FileOffset{~uint64_t{0}}).has_value());
}

// The path a sampled ip takes: file offset -> ELF address -> symbol, in a library whose code
// does not sit at vaddr == offset.
TEST(ElfModuleTest, SymbolizesLibraryFunctionsFromFileOffsets) {
  std::unique_ptr<ElfModule> module = OpenOrDie(kLibrary);
  ASSERT_NE(module, nullptr);
  std::vector<LoadSegment> loads = ReadelfLoads(kLibrary);
  int checked = 0;
  for (const NmSymbol& s : NmFunctions(kLibrary)) {
    for (const LoadSegment& load : loads) {
      if (s.address < load.vaddr || s.address >= load.vaddr + load.file_size) continue;
      FileOffset offset{s.address - load.vaddr + load.offset};
      std::optional<ElfAddress> address = module->ToElfAddress(offset);
      ASSERT_TRUE(address.has_value()) << s.name;
      EXPECT_EQ(address->value, s.address);
      std::optional<SourceSymbol> symbol = module->Symbolize(*address);
      ASSERT_TRUE(symbol.has_value()) << s.name;
      EXPECT_THAT(NamesCovering(NmFunctions(kLibrary), s.address),
                  ::testing::Contains(symbol->function));
      ++checked;
    }
  }
  EXPECT_GT(checked, 3);
  std::vector<NmSymbol> library_symbols = NmFunctions(kLibrary);
  const NmSymbol* hash = FindNm(library_symbols,
                                "ember_fixture_lib::Hash(std::__cxx11::basic_string<char, "
                                "std::char_traits<char>, std::allocator<char> > const&)");
  ASSERT_NE(hash, nullptr);
  EXPECT_EQ(module->Symbolize(ElfAddress{hash->address})->function, hash->name);
}

TEST(ElfModuleTest, AddressOutsideAnyFunctionIsNotSymbolized) {
  std::unique_ptr<ElfModule> module = OpenOrDie(kProgram);
  ASSERT_NE(module, nullptr);
  EXPECT_FALSE(module->Symbolize(ElfAddress{0}).has_value());
  EXPECT_FALSE(module->Symbolize(ElfAddress{~uint64_t{0}}).has_value());
}

class ElfModuleErrorTest : public ::testing::Test {
 protected:
  std::string WriteFile(const std::string& name, const std::string& contents) {
    std::string path = ::testing::TempDir() + "/" + name;
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }
  static std::string ReadFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

TEST_F(ElfModuleErrorTest, MissingFile) {
  absl::StatusOr<std::unique_ptr<ElfModule>> module =
      ElfModule::Open("/nonexistent/ember/binary", "/nonexistent/ember/binary");
  ASSERT_FALSE(module.ok());
  EXPECT_EQ(module.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(module.status().message().find("/nonexistent/ember/binary"), absl::string_view::npos);
}

TEST_F(ElfModuleErrorTest, NotAnElfFile) {
  std::string path = WriteFile("ember_not_elf", "#!/bin/sh\necho this is a script\n");
  absl::StatusOr<std::unique_ptr<ElfModule>> module = ElfModule::Open(path, path);
  ASSERT_FALSE(module.ok());
  EXPECT_NE(module.status().message().find("not an ELF file"), absl::string_view::npos)
      << module.status();
  EXPECT_FALSE(ElfModule::Open(WriteFile("ember_empty", ""), "empty").ok());
  EXPECT_FALSE(ElfModule::Open(::testing::TempDir(), "a directory").ok());
}

TEST_F(ElfModuleErrorTest, TruncatedElfFiles) {
  std::string contents = ReadFile(kProgram);
  ASSERT_GT(contents.size(), 4096u);
  for (size_t size : {size_t{4}, size_t{16}, size_t{63}, size_t{64}, size_t{200}, size_t{4096},
                      contents.size() / 2, contents.size() - 64, contents.size() - 1}) {
    std::string path = WriteFile("ember_truncated", contents.substr(0, size));
    absl::StatusOr<std::unique_ptr<ElfModule>> module = ElfModule::Open(path, path);
    EXPECT_FALSE(module.ok()) << "truncated to " << size << " bytes";
  }
}

TEST_F(ElfModuleErrorTest, CorruptSectionHeadersDoNotCrash) {
  // Overwrite the section header table with garbage: the module must either refuse the file or
  // open it and symbolize nothing wrong, never crash.
  std::string contents = ReadFile(kProgram);
  uint64_t shoff = 0;
  std::memcpy(&shoff, contents.data() + 0x28, sizeof(shoff));  // Elf64_Ehdr.e_shoff
  ASSERT_LT(shoff, contents.size());
  for (size_t i = shoff; i < contents.size(); ++i) contents[i] = static_cast<char>(i * 131 + 7);
  std::string path = WriteFile("ember_garbled", contents);
  absl::StatusOr<std::unique_ptr<ElfModule>> module = ElfModule::Open(path, path);
  if (module.ok()) (*module)->Symbolize(ElfAddress{0x1000});
}

}  // namespace
}  // namespace ember
