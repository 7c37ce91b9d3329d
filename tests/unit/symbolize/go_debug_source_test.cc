// Which stripped binaries ElfModule asks a debug-file source (debuginfod) for: a stripped C
// program is asked for by its build id, a stripped Go program is not: Go's own table names it.
#include <elf.h>

#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "symbolize/debug_file_source.h"
#include "symbolize/elf_module.h"

namespace ember {
namespace {

class CountingSource : public DebugFileSource {
 public:
  std::optional<std::string> Find(const std::string& build_id) override {
    asked.push_back(build_id);
    return std::nullopt;
  }
  std::vector<std::string> asked;
};

// The ELF entry point of a 64-bit executable: code of the program itself.
uint64_t EntryPoint(const std::string& path) {
  Elf64_Ehdr header{};
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(&header), sizeof(header));
  return header.e_entry;
}

std::vector<std::string> AskedWhenSymbolized(const std::string& path) {
  CountingSource source;
  ElfModuleOptions options;
  options.debug_dir = "/nonexistent";
  options.debug_file_source = &source;
  absl::StatusOr<std::unique_ptr<ElfModule>> module = ElfModule::Open(path, path, options);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok()) return {};
  EXPECT_FALSE((*module)->build_id().empty()) << path << " has no GNU build id to ask by";
  (*module)->Symbolize(ElfAddress{EntryPoint(path)});
  return source.asked;
}

TEST(DebugFileSourceTest, AStrippedCProgramIsAskedForByItsBuildId) {
  const std::string path =
      std::string(EMBER_SYMBOLIZE_FIXTURE_DIR) + "/buildid/ember_sym_fixture_nolink";
  EXPECT_EQ(AskedWhenSymbolized(path).size(), 1u);
}

TEST(DebugFileSourceTest, AStrippedGoProgramIsNamedWithoutAsking) {
  // The newer Go writes a GNU build id (Go 1.19 does not, so it could never be asked for).
  const std::string path = std::string(EMBER_GO_FIXTURE_DIR) + "/gosym_gonew_stripped";
  CountingSource source;
  ElfModuleOptions options;
  options.debug_dir = "/nonexistent";
  options.debug_file_source = &source;
  absl::StatusOr<std::unique_ptr<ElfModule>> module = ElfModule::Open(path, path, options);
  ASSERT_TRUE(module.ok()) << module.status();
  ASSERT_FALSE((*module)->build_id().empty());
  std::optional<SourceSymbol> symbol = (*module)->Symbolize(ElfAddress{EntryPoint(path)});
  ASSERT_TRUE(symbol.has_value());
  EXPECT_EQ(symbol->function, "_rt0_amd64_linux");
  EXPECT_TRUE(source.asked.empty());
  EXPECT_FALSE((*module)->awaiting_debug_file());
}

}  // namespace
}  // namespace ember
