// Go frames in a binary without CFI (a stripped Go build: no .eh_frame, no .debug_frame) step by
// the stack-pointer deltas of Go's own symbol table. Checked against the .debug_frame CFI that Go
// writes into the plain build of the same program (tests/fixtures/go): at the entry, the middle
// and the last byte of every function, both must find the same caller's stack pointer and pc.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "unwind/elf_image.h"
#include "unwind/module_cfi.h"

namespace ember {
namespace {

struct NmSymbol {
  uint64_t address = 0;
  uint64_t size = 0;
  std::string name;
};

std::vector<NmSymbol> NmFunctions(const std::string& path) {
  std::string output;
  FILE* pipe = popen((std::string(EMBER_NM) + " --defined-only -S '" + path + "'").c_str(), "r");
  if (pipe == nullptr) return {};
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0);
  std::vector<NmSymbol> symbols;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string address, size, type;
    if (!(in >> address >> size >> type) || (type != "T" && type != "t")) continue;
    NmSymbol symbol{std::stoull(address, nullptr, 16), std::stoull(size, nullptr, 16), ""};
    std::getline(in >> std::ws, symbol.name);
    if (symbol.size > 0) symbols.push_back(symbol);
  }
  return symbols;
}

std::unique_ptr<ModuleCfi> Cfi(const std::string& path) {
  absl::StatusOr<std::shared_ptr<ElfImage>> image = ElfImage::Open(path);
  EXPECT_TRUE(image.ok()) << image.status();
  return image.ok() ? std::make_unique<ModuleCfi>(*image) : nullptr;
}

class GoUnwindTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoUnwindTest, StrippedBuildStepsAsGosDebugFrameSays) {
  const std::string plain = std::string(EMBER_GO_FIXTURE_DIR) + "/gosym_" + GetParam();
  const std::vector<NmSymbol> symbols = NmFunctions(plain);
  ASSERT_GT(symbols.size(), 500u);
  std::unique_ptr<ModuleCfi> by_dwarf = Cfi(plain);
  std::unique_ptr<ModuleCfi> by_go = Cfi(plain + "_stripped");
  ASSERT_TRUE(by_dwarf && by_go);
  // Every word of the stack says where it is, so a caller's pc tells the slot it came from.
  constexpr uint64_t kStackStart = 0x7ffd00000000;
  std::vector<uint64_t> words(2048);
  for (size_t i = 0; i < words.size(); ++i) words[i] = 0x100000000 + i * 8;
  const StackMemory stack{
      .start = kStackStart,
      .bytes = {reinterpret_cast<const uint8_t*>(words.data()), words.size() * 8}};
  size_t compared = 0, agreed = 0, framed = 0;
  std::string first_difference;
  for (const NmSymbol& symbol : symbols) {
    for (uint64_t offset : {uint64_t{0}, symbol.size / 2, symbol.size - 1}) {
      FrameRegisters frame;
      frame.Set(kCfiRegisterCount - 1, symbol.address + offset);
      frame.Set(7, kStackStart);
      frame.Set(6, 0x5555);
      StepResult dwarf, go;
      by_dwarf->Step(frame, 0, /*is_return_address=*/false, stack, dwarf);
      if (dwarf.end != StepEnd::kStepped) continue;  // no CFI there (padding, some stubs)
      by_go->Step(frame, 0, /*is_return_address=*/false, stack, go);
      ++compared;
      const bool same =
          go.end == StepEnd::kStepped && go.caller.value[7] == dwarf.caller.value[7] &&
          go.caller.value[kCfiRegisterCount - 1] == dwarf.caller.value[kCfiRegisterCount - 1];
      if (same) {
        ++agreed;
        if (go.caller.value[7] > kStackStart + 8) ++framed;
      } else if (first_difference.empty()) {
        first_difference = symbol.name + "+" + std::to_string(offset);
      }
    }
  }
  std::printf("%zu of %zu steps agree (%zu in a frame of their own)\n", agreed, compared, framed);
  ASSERT_GT(compared, 1000u);
  EXPECT_EQ(agreed, compared) << "first at " << first_difference;
  EXPECT_GT(framed, compared / 4);
}

INSTANTIATE_TEST_SUITE_P(Toolchains, GoUnwindTest, ::testing::Values("go119", "gonew"));

}  // namespace
}  // namespace ember
