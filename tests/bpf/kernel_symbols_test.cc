// Kernel symbols read again (issue 31): a BPF program loaded after the agent read /proc/kallsyms
// is not in its table, so its frames would take the name of the symbol below them until the
// agent reads the symbols again (--kernel-symbols-recheck, while frames land above the kernel
// image).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "profiled_run.h"
#include "support/pprof_reader.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

using std::chrono::seconds;

constexpr int kHz = 199;

// The kernel's frames of a sample, leaf first.
std::vector<std::string> KernelFrames(const NamedSample& s) {
  std::vector<std::string> kernel;
  for (size_t i = 0; i < s.functions.size() && IsKernelModule(s.modules[i]); ++i) {
    kernel.push_back(s.functions[i]);
  }
  return kernel;
}

// Frames above the kernel function that runs raw-tracepoint programs are the program's (or of
// the helpers it calls).
bool InTheProgram(const NamedSample& s) {
  const std::vector<std::string> kernel = KernelFrames(s);
  for (size_t i = 1; i < kernel.size(); ++i) {
    if (absl::StrContains(kernel[i], "bpf_trace_run")) return true;
  }
  return false;
}

TEST(KernelSymbolsTest, AProgramLoadedAfterTheStartIsNamedOnceSymbolsAreReadAgain) {
  const std::string output_dir = MakeTempDir();
  ASSERT_FALSE(output_dir.empty());
  // Spins 8 s of CPU: the frames of the first interval or two, before the read, keep the wrong
  // name, and the rest must outweigh them clearly.
  Subprocess fixture({EMBER_BPF_BUSY_BIN, EMBER_BPF_BUSY_OBJECT, "8"});
  Subprocess agent(WithTheChartsCapabilities(
      {EMBER_AGENT_BIN, "--pid", std::to_string(fixture.pid()), "--sampling-hz",
       std::to_string(kHz), "--export-interval", "1s", "--kernel-symbols-recheck", "1s",
       "--metrics-address", "127.0.0.1:0", "--output-dir", output_dir}));
  // The status endpoint starts last, after the agent read the kernel's symbols: only then may
  // the program be loaded.
  ASSERT_TRUE(agent.WaitForOutput("status endpoint: ", seconds(15))) << agent.output();
  const std::string endpoint = StatusEndpoint(agent.output());
  ASSERT_FALSE(endpoint.empty()) << agent.output();
  const std::string before = HttpGet(endpoint + "/metrics").second;
  fixture.WriteStdin("g");
  ASSERT_EQ(fixture.Wait(seconds(90)), 0) << fixture.output();
  // An interval's end, where the symbols are read again, passes before the agent is stopped.
  std::this_thread::sleep_for(seconds(2));
  const std::string after = HttpGet(endpoint + "/metrics").second;
  agent.Signal(SIGINT);
  ASSERT_EQ(agent.Wait(seconds(30)), 0) << agent.output();
  ExpectNoSampleLost(agent.output());

  std::smatch match;
  ASSERT_TRUE(std::regex_search(fixture.output(), match, std::regex(R"(kallsyms (\S+))")))
      << fixture.output();
  const std::string program = match[1];
  EXPECT_EQ(MetricValue(before, "ember_kernel_symbols_reads_total"), 0) << before;
  const double reads = MetricValue(after, "ember_kernel_symbols_reads_total").value_or(0);
  EXPECT_GE(reads, 1) << after;

  std::vector<NamedSample> samples = SamplesOf(output_dir, fixture.pid());
  std::filesystem::remove_all(output_dir);
  int64_t total = 0;
  int64_t in_program = 0;
  int64_t named = 0;
  for (const NamedSample& s : samples) {
    total += s.count;
    if (!InTheProgram(s)) continue;
    in_program += s.count;
    const std::vector<std::string> kernel = KernelFrames(s);
    if (std::find(kernel.begin(), kernel.end(), program) != kernel.end()) named += s.count;
  }
  ASSERT_TRUE(fixture.cpu_time().has_value());
  ExpectSamplesForCpuTime(total, fixture.cpu_time()->count() / 1e6, kHz, agent.output());
  std::printf("%.0f reads; %lld samples, %lld in the program, %lld of them name it %s\n", reads,
              static_cast<long long>(total), static_cast<long long>(in_program),
              static_cast<long long>(named), program.c_str());
  // Nearly all the fixture's CPU goes to the program, which spins in the kernel.
  EXPECT_GE(Share(in_program, total), 0.8) << CommonStacks(
      samples, [](const NamedSample&) { return true; }, 10, KernelFrames);
  EXPECT_GE(Share(named, in_program), 0.6)
      << named << " of " << in_program << " samples in the program name it " << program << "\n"
      << CommonStacks(samples, InTheProgram, 10, KernelFrames) << agent.output();
}

}  // namespace
}  // namespace ember::testing
