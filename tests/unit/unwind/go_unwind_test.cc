// Go frames in a binary without CFI (a stripped Go build: no .eh_frame, no .debug_frame) step by
// the stack-pointer deltas of Go's own symbol table. Checked against the .debug_frame CFI that Go
// writes into the plain build of the same program (tests/fixtures/go): at the entry, the middle
// and the last byte of every function, both must find the same caller's stack pointer and pc.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "support/nm_symbols.h"
#include "unwind/elf_image.h"
#include "unwind/module_cfi.h"

namespace ember {
namespace {

using ::ember::testing::NmSymbol;

std::unique_ptr<ModuleCfi> Cfi(const std::string& path) {
  absl::StatusOr<std::shared_ptr<ElfImage>> image = ElfImage::Open(path);
  EXPECT_TRUE(image.ok()) << image.status();
  return image.ok() ? std::make_unique<ModuleCfi>(*image) : nullptr;
}

class GoUnwindTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoUnwindTest, StrippedBuildStepsAsGosDebugFrameSays) {
  const std::string plain = std::string(EMBER_GO_FIXTURE_DIR) + "/gosym_" + GetParam();
  const std::vector<NmSymbol> symbols =
      ::ember::testing::NmSizedSymbols(plain, "Tt", /*demangle=*/false);
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

// The caller's frame pointer is given only where the function has stored it: just after the push
// that begins a Go 1.21+ frame it is the word below the return address; between an older
// prologue's SUBQ and its store of BP (and in assembly that keeps none) it is not known, never a
// stack word read where nothing was stored. Instruction pairs from objdump of the plain build.
TEST_P(GoUnwindTest, CallersFramePointerOnlyWhereStored) {
  const std::string plain = std::string(EMBER_GO_FIXTURE_DIR) + "/gosym_" + GetParam();
  std::unique_ptr<ModuleCfi> by_go = Cfi(plain + "_stripped");
  ASSERT_TRUE(by_go);
  const std::string listing =
      ::ember::testing::CommandOutput("objdump -d --no-show-raw-insn '" + plain + "'");
  ASSERT_FALSE(HasFailure()) << "objdump failed";
  constexpr uint64_t kStackStart = 0x7ffd00000000;
  // Room for the largest frames (runtime.debugCall65536).
  std::vector<uint64_t> words(1 << 15);
  for (size_t i = 0; i < words.size(); ++i) words[i] = 0x100000000 + i * 8;
  const StackMemory stack{
      .start = kStackStart,
      .bytes = {reinterpret_cast<const uint8_t*>(words.data()), words.size() * 8}};
  // nullopt when the frame is larger than the stack here (runtime.call1073741824): not counted.
  auto caller_bp = [&](uint64_t pc) -> std::optional<std::optional<uint64_t>> {
    FrameRegisters frame;
    frame.Set(kCfiRegisterCount - 1, pc);
    frame.Set(7, kStackStart);
    frame.Set(6, 0x5555);
    StepResult result;
    by_go->Step(frame, 0, /*is_return_address=*/false, stack, result);
    if (result.end != StepEnd::kStepped) return std::nullopt;
    if (!result.caller.Has(6)) return std::optional<uint64_t>();
    return result.caller.value[6];
  };
  std::istringstream lines(listing);
  std::string previous, line;
  size_t before_store = 0, after_push = 0;
  while (std::getline(lines, line)) {
    const size_t colon = line.find(":\t");
    if (colon == std::string::npos) {
      previous.clear();
      continue;
    }
    const uint64_t pc = std::stoull(line.substr(0, colon), nullptr, 16);
    const std::string instruction = line.substr(colon + 2);
    if (previous.starts_with("sub ") && previous.ends_with(",%rsp") &&
        instruction.starts_with("mov    %rbp,") && instruction.ends_with("(%rsp)")) {
      const std::optional<std::optional<uint64_t>> bp = caller_bp(pc);
      if (!bp.has_value()) continue;
      ++before_store;
      EXPECT_TRUE(!bp->has_value() || **bp == 0x5555) << std::hex << pc << " " << **bp;
    } else if (previous == "push   %rbp" && instruction == "mov    %rsp,%rbp") {
      // delta 8: the CFA is 16 above the stack pointer, the pushed word at the stack pointer.
      const std::optional<std::optional<uint64_t>> bp = caller_bp(pc);
      if (!bp.has_value()) continue;
      ++after_push;
      EXPECT_EQ(*bp, words[0]) << std::hex << pc;
    }
    previous = instruction;
  }
  std::printf("%zu prologues before their BP store, %zu after their BP push\n", before_store,
              after_push);
  EXPECT_GT(before_store + after_push, 500u);
}

INSTANTIATE_TEST_SUITE_P(Toolchains, GoUnwindTest, ::testing::Values("go119", "gonew"));

}  // namespace
}  // namespace ember
