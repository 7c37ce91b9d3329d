// ember-agent: wires flags, signals and the profiling loop together.
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <vector>

#include "absl/strings/string_view.h"
#include "agent/agent.h"
#include "agent/options.h"
#include "spdlog/spdlog.h"

namespace {

std::atomic<bool> g_stop{false};

void OnStopSignal(int) { g_stop.store(true); }

// Each export builds buffers of megabytes (the interval's samples, the pprof message and its
// bytes, the page's text) and frees them. glibc maps such a block on its own and unmaps it at the
// free, and hands the heap's free top back once it passes its trim threshold, so every export
// faulted all of its pages in afresh (costly in a VM). Here they come from the heap and are
// reused, and MemoryUpkeep::TrimHeap gives free heap back when it piles up: system-wide at 99 Hz
// the agent's CPU fell by 15 to 19% (docs/benchmarks.md).
void KeepExportBuffersInTheHeap() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest; setting it also fixes the trim threshold
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

void InstallSignalHandlers() {
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  // No SA_RESTART: the ring-buffer poll returns at once. SA_RESETHAND: a second signal is not
  // caught, so it ends a run whose last export hangs.
  action.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  const auto started_at = std::chrono::steady_clock::now();
  KeepExportBuffersInTheHeap();
  std::vector<absl::string_view> args(argv + 1, argv + argc);
  auto options = ember::ParseOptions(args);
  if (!options.ok()) {
    std::fprintf(stderr, "ember-agent: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  if (options->help) {
    std::fputs(ember::UsageText().c_str(), stdout);
    return 0;
  }
  if (options->version) {
    std::printf("ember-agent %s\n", EMBER_VERSION);
    return 0;
  }
  spdlog::set_level(options->log_level);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  InstallSignalHandlers();

  auto agent = ember::Agent::Create(*options, started_at);
  if (!agent.ok()) {
    std::fprintf(stderr, "ember-agent: %s\n", std::string(agent.status().message()).c_str());
    return absl::IsInvalidArgument(agent.status()) ? 2 : 1;
  }
  if (absl::Status status = (*agent)->Run(g_stop); !status.ok()) {
    std::fprintf(stderr, "ember-agent: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
