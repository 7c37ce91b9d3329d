// Helpers the bpf tests share: run a fixture program under ember-agent and read back the samples
// the agent wrote for it.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "support/pprof_reader.h"

namespace ember::testing {

// A fresh private directory under the system temp dir; "" if it cannot be made.
std::string MakeTempDir();

// `agent_argv` run as root with only the capabilities the Helm chart grants (its daemonset's
// securityContext, docs/capabilities.md), through setpriv: no CAP_SYS_ADMIN nor
// CAP_CHECKPOINT_RESTORE, so /proc/PID/map_files cannot be opened and files are reached by path.
// setpriv execs the agent, so the process keeps its pid.
std::vector<std::string> WithTheChartsCapabilities(std::vector<std::string> agent_argv);

// VmHWM (peak resident memory) of a live process, in bytes; 0 when unreadable. Read it before the
// process exits.
uint64_t PeakRssBytes(pid_t pid);

// A bound of `bytes` on the agent's peak RSS, for the build these tests run: in a sanitized build
// (scripts/sanitize-and-fuzz.sh runs the agent and these tests with AddressSanitizer) its shadow
// memory (an eighth of what is used) and its quarantine of freed memory (256 MiB by default)
// come on top.
uint64_t AgentPeakRssBound(uint64_t bytes);

// Kernel frames carry a "[kernel.kallsyms]" or "[module]" mapping; so do marker frames such as
// "[truncated]", and the vDSO's frames ("[vdso]"), which are not code of the profiled program
// either.
bool IsKernelModule(const std::string& module);

// Every sample of every pprof file in dir, for process `pid`.
std::vector<NamedSample> SamplesOf(const std::string& dir, int64_t pid);

// Starts the agent on one paused fixture, lets the fixture run to its end, then stops the agent
// with a signal.
struct ProfiledRun {
  std::string output_dir;
  std::string agent_log;
  std::string fixture_output;
  int64_t pid = 0;
  int hz = 0;
  // The fixture's user and system CPU time, all threads, from its exit (0 if it did not exit).
  double fixture_cpu_seconds = 0;
};

// The counts of the agent's last line, "done: N samples, L lost, M malformed, ...".
struct AgentDone {
  int64_t samples = 0;
  int64_t lost = 0;
  int64_t malformed = 0;
};
std::optional<AgentDone> AgentDoneLine(const std::string& agent_log);

// The agent ended with its "done:" line and lost no sample (a full ring buffer) and read none it
// could not decode. ProfileFixture checks it of every run.
void ExpectNoSampleLost(const std::string& agent_log);

// `samples` (of the fixture's process, from the run's profiles) are as many as its CPU time at
// the run's rate gives: at least min_share of them (a sample lost or dropped on the way lowers
// it), and as much over at most (counted twice); for a few hundred samples or fewer, within the
// scatter of the count instead. The fixture's own CPU time is the measure, so a busy machine
// changes both sides alike.
void ExpectSamplesComplete(const ProfiledRun& run, int64_t samples, double min_share = 0.9);
// The same for `samples` of a process that used cpu_seconds while sampled at hz; `context` (the
// agent's log) goes into the failure message.
void ExpectSamplesForCpuTime(int64_t samples, double cpu_seconds, int hz,
                             const std::string& context, double min_share = 0.9);

// The user and system CPU time of all threads of process `pid` so far (/proc/PID/stat), in
// seconds; nullopt when it cannot be read.
std::optional<double> ProcessCpuSeconds(pid_t pid);

// How ProfileFixture starts the agent, beyond its flags: e.g. as another user with some
// capabilities (tests/bpf/privileges_test.cc).
struct AgentLaunch {
  // The command line before the agent's flags; empty: EMBER_AGENT_BIN.
  std::vector<std::string> argv = {};
  // Mode of the output directory, for an agent run as another user.
  std::filesystem::perms output_dir_perms = std::filesystem::perms::owner_all;
  // false: no --output-dir flag (an agent that only exports OTLP writes no files).
  bool output_dir_flag = true;
  // Runs with the agent's pid once it has dropped its capabilities and started all its threads,
  // before the fixture goes on.
  std::function<void(pid_t)> once_dropped = nullptr;
};

// after_start runs once the fixture has been started, before the agent. stop_signal (SIGINT or
// SIGTERM) must make the agent write its last interval and exit 0. Failures are reported with
// gtest's EXPECT_* and the run is returned as far as it went.
ProfiledRun ProfileFixture(const std::vector<std::string>& fixture_argv, int hz,
                           const std::function<void(pid_t)>& after_start = nullptr,
                           int stop_signal = SIGINT,
                           const std::vector<std::string>& extra_agent_args = {},
                           const AgentLaunch& launch = {});

// GET url over loopback, bounded by 5 s: the status code (0 when the request failed) and the
// body.
std::pair<long, std::string> HttpGet(const std::string& url);

// "http://127.0.0.1:PORT" from the agent's "status endpoint: http://..." log line; "" if none.
std::string StatusEndpoint(const std::string& agent_log);

// The value of one series of a Prometheus text page, named as rendered with its labels (e.g.
// `ember_samples_total` or `ember_proc_read_failures_total{file="stat"}`); nullopt when absent.
std::optional<double> MetricValue(const std::string& page, const std::string& series);

// The fixtures' own accounting: the "name cpu_ns" lines they print at the end.
std::map<std::string, double> MeasuredCpuNs(const std::string& fixture_output);

// The `limit` most common stacks among the samples `pick` picks, one line each ("  N x f <- g"),
// for failure messages. `frames_of` chooses the frames shown (default: all, leaf first).
std::string CommonStacks(
    const std::vector<NamedSample>& samples, const std::function<bool(const NamedSample&)>& pick,
    size_t limit,
    const std::function<std::vector<std::string>(const NamedSample&)>& frames_of = nullptr);

// part / whole, 0 when whole is 0.
double Share(int64_t part, int64_t whole);

// The flame graph's node types (FlameGraph::NodeType values) of every name, from the JSON that
// flamegraph.html embeds (names, then a tree of [name, type, samples, children] nodes); empty
// when the page has none.
std::map<std::string, std::set<int>> FlameGraphTypes(const std::string& html_path);

}  // namespace ember::testing
