// The lines src/stacks writes to the log: StackBuilder's summary of how user stacks ended, and
// KernelSymbolsSource's warning when kallsyms cannot be read again (the table read before stays).
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "otlp/log_capture.h"
#include "process/process_table.h"
#include "stacks/kernel_symbols_source.h"
#include "stacks/stack_builder.h"
#include "support/temp_dir.h"
#include "symbolize/elf_module.h"
#include "unwind/dwarf_unwinder.h"

namespace ember {
namespace {

uint64_t MetricValue(const MetricsRegistry& metrics, const std::string& name) {
  const std::string text = metrics.Render();
  const std::string line = "\n" + name + " ";
  const size_t at = text.find(line);
  EXPECT_NE(at, std::string::npos) << text;
  return at == std::string::npos ? 0 : std::stoull(text.substr(at + line.size()));
}

TEST(StackBuilderSummaryTest, TheLineCarriesTheEndsAndTheSnapshotErrors) {
  ProcessTable processes;
  ModuleCache modules;
  FrameResolver frames(&processes, &modules, nullptr);
  DwarfUnwinder unwinder;
  MetricsRegistry metrics;
  StackBuilder builder(&frames, &processes, &unwinder, metrics);
  BpfStats bpf;
  bpf.snapshot_errors = 7;
  bpf.snapshot_no_mapping = 3;
  ::ember::testing::LogCapture capture;
  builder.LogSummary(bpf);
  EXPECT_EQ(capture.text(),
            "user stacks unwound with CFI: 0 complete, 0 truncated, 0 failed; 7 snapshot errors "
            "(3 with no stack mapping found)\n");
}

TEST(KernelSymbolsSourceRereadTest, AFailedReadAgainKeepsTheTableAndWarns) {
  ::ember::testing::TempDir temp("ember-kallsyms-reread");
  const std::string kallsyms = temp.path() + "/kallsyms";
  const std::string modules_file = temp.path() + "/modules";
  std::ofstream(kallsyms) << "ffffffff81000000 T _stext\nffffffff81000100 T schedule\n";
  std::ofstream(modules_file) << "";
  MetricsRegistry metrics;
  KernelSymbolsSource source(metrics, kallsyms, modules_file);
  ASSERT_TRUE(source.Load(std::chrono::hours(1)).ok());
  const KernelSymbols* before = source.symbols();
  ASSERT_NE(before, nullptr);
  ASSERT_EQ(before->size(), 2u);

  ProcessTable processes;
  ModuleCache modules;
  FrameResolver frames(&processes, &modules, source.symbols());
  // A new module forces a read again, and the file kept open now hides its addresses (as with
  // kptr_restrict raised): removing it would not do, the open file stays readable.
  std::ofstream(kallsyms, std::ios::trunc)
      << "0000000000000000 T _stext\n0000000000000000 T schedule\n";
  std::ofstream(modules_file, std::ios::trunc) << "nf_tables 352256 0 - Live 0xffffffffc0a00000\n";
  ::ember::testing::LogCapture capture;
  frames.NextGeneration();
  source.Refresh(frames);
  EXPECT_EQ(MetricValue(metrics, "ember_kernel_symbols_reads_total"), 1u);
  EXPECT_EQ(source.symbols(), before);
  EXPECT_EQ(source.symbols()->size(), 2u);
  EXPECT_EQ(frames.Kernel(0xffffffff81000110, /*caller=*/false)->function, "schedule");
  ASSERT_EQ(capture.lines().size(), 1u) << capture.text();
  EXPECT_EQ(capture.lines()[0].rfind("kernel symbols not read again (the table read before is "
                                     "kept): ",
                                     0),
            0u)
      << capture.text();
}

}  // namespace
}  // namespace ember
