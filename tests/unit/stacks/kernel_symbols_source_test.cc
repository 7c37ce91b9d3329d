// KernelSymbolsSource over a kallsyms and a modules file in a temp dir: the first read, a read
// again when the modules change (counted, and kernel frames renamed), and none when they do not.
#include "stacks/kernel_symbols_source.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "process/process_table.h"
#include "support/temp_dir.h"
#include "symbolize/elf_module.h"

namespace ember {
namespace {

constexpr char kImage[] =
    "ffffffff81000000 T _stext\nffffffff81000100 T schedule\nffffffff83000000 T _einittext\n";
constexpr char kModule[] = "ffffffffc0a01000 t nf_hook_slow\t[nf_tables]\n";

class KernelSymbolsSourceTest : public ::testing::Test {
 protected:
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name, std::ios::trunc) << text;
  }
  uint64_t Reads() {
    const std::string text = metrics_.Render();
    const std::string line = "\nember_kernel_symbols_reads_total ";
    const size_t at = text.find(line);
    EXPECT_NE(at, std::string::npos) << text;
    return at == std::string::npos ? 0 : std::stoull(text.substr(at + line.size()));
  }

  ::ember::testing::TempDir temp_{"ember-kernel-symbols"};
  const std::string& dir_ = temp_.path();
  MetricsRegistry metrics_;
};

TEST_F(KernelSymbolsSourceTest, ModulesThatChangeBringTheirSymbols) {
  Write("kallsyms", kImage);
  Write("modules", "");
  KernelSymbolsSource source(metrics_, dir_ + "/kallsyms", dir_ + "/modules");
  EXPECT_EQ(source.symbols(), nullptr);
  ASSERT_TRUE(source.Load(std::chrono::hours(1)).ok());
  ASSERT_NE(source.symbols(), nullptr);
  EXPECT_EQ(source.symbols()->size(), 3u);

  ProcessTable processes;
  ModuleCache modules;
  FrameResolver frames(&processes, &modules, source.symbols());
  EXPECT_EQ(frames.Kernel(0xffffffffc0a01010, /*caller=*/false)->function, "_einittext");

  // Nothing changed: not read again (the recheck is an hour away).
  frames.NextGeneration();
  source.Refresh(frames);
  EXPECT_EQ(Reads(), 0u);

  Write("kallsyms", std::string(kImage) + kModule);
  Write("modules", "nf_tables 352256 0 - Live 0xffffffffc0a00000\n");
  frames.NextGeneration();
  source.Refresh(frames);
  EXPECT_EQ(Reads(), 1u);
  EXPECT_EQ(source.symbols()->size(), 4u);
  EXPECT_EQ(frames.Kernel(0xffffffffc0a01010, /*caller=*/false)->function, "nf_hook_slow");
}

TEST_F(KernelSymbolsSourceTest, HiddenAddressesLeaveKernelFramesUnnamed) {
  Write("kallsyms", "0000000000000000 T _stext\n0000000000000000 T schedule\n");
  Write("modules", "");
  KernelSymbolsSource source(metrics_, dir_ + "/kallsyms", dir_ + "/modules");
  EXPECT_FALSE(source.Load(std::chrono::hours(1)).ok());
  EXPECT_EQ(source.symbols(), nullptr);
  ProcessTable processes;
  ModuleCache modules;
  FrameResolver frames(&processes, &modules, nullptr);
  Write("modules", "nf_tables 352256 0 - Live 0xffffffffc0a00000\n");
  source.Refresh(frames);  // nothing to read again from
  EXPECT_EQ(Reads(), 0u);
}

}  // namespace
}  // namespace ember
