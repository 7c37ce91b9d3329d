// The hostile host (issue 8): while the agent profiles every process of the machine, the tests
// replace, delete, truncate and overwrite the files processes run, churn processes through exec
// and exit, remove cgroups under them and hide /proc entries from the agent. The agent must keep
// running to the end of --duration, keep sampling a steady fixture in every interval, name what it
// still can, and count on /metrics what it cannot. (Wall-clock steps are tested at the unit
// level, tests/unit/agent/interval_clock_test.cc: the host's clock is not the tests' to set.)
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "profiled_run.h"
#include "support/elf_layout.h"
#include "support/pprof_reader.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const std::string kPhases = EMBER_PHASES_BIN;
const std::string kReadZero = EMBER_READ_ZERO_BIN;
const std::string kSpinLib = EMBER_SPIN_LIB;
const std::string kSpinLoader = EMBER_SPIN_LOADER_BIN;
const std::string kLeaderExit = EMBER_LEADER_EXIT_BIN;
const std::vector<std::string> kBusyShell = {"/bin/sh", "-c", "while :; do :; done"};

// A temp directory removed with everything in it when the test ends, passed or not.
class TempDir {
 public:
  TempDir() : path_(MakeTempDir()) {}
  ~TempDir() {
    std::error_code error;
    std::filesystem::remove_all(path_, error);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string CopyExecutable(const std::string& from, const std::string& to) {
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::permissions(to, std::filesystem::perms::owner_all);
  return to;
}

// ember-agent on every process, sampling at 99 Hz with 1 s intervals for `duration_s`, started
// through `wrapper` (an argv prefix) when given. Waits for its status endpoint.
struct HostileAgent {
  HostileAgent(const std::string& output_dir, int duration_s,
               std::vector<std::string> wrapper = {}) {
    std::vector<std::string> argv = std::move(wrapper);
    for (const std::string& arg :
         {std::string(EMBER_AGENT_BIN), std::string("--sampling-hz"), std::string("99"),
          std::string("--export-interval"), std::string("1s"), std::string("--duration"),
          absl::StrCat(duration_s, "s"), std::string("--output-dir"), output_dir,
          std::string("--metrics-address"), std::string("127.0.0.1:0")}) {
      argv.push_back(arg);
    }
    process = std::make_unique<Subprocess>(argv);
    ready = process->WaitForOutput("status endpoint", seconds(30));
    endpoint = StatusEndpoint(process->output());
  }
  std::string Metrics() const { return HttpGet(endpoint + "/metrics").second; }

  std::unique_ptr<Subprocess> process;
  bool ready = false;
  std::string endpoint;
};

// How far a counter moved between two scrapes (a missing series counts as 0).
double Moved(const std::string& before, const std::string& after, const std::string& series) {
  return MetricValue(after, series).value_or(0) - MetricValue(before, series).value_or(0);
}

bool HasFunction(const NamedSample& sample, const std::string& function) {
  return std::find(sample.functions.begin(), sample.functions.end(), function) !=
         sample.functions.end();
}

// Per pprof file (one per interval, in time order), the samples of `pid`. Ordered by the
// profiles' start times (ExpectSampledEveryInterval checks that the names sort the same way).
std::vector<std::vector<NamedSample>> SamplesPerInterval(const std::string& dir, int64_t pid) {
  std::vector<std::pair<int64_t, std::vector<NamedSample>>> intervals;
  for (const std::string& file : PprofFilesIn(dir)) {
    auto profile = ReadPprofFile(file);
    EXPECT_TRUE(profile.ok()) << file << ": " << profile.status();
    if (!profile.ok()) continue;
    intervals.emplace_back(profile->time_nanos(), std::vector<NamedSample>());
    for (NamedSample& s : NamedSamples(*profile)) {
      if (s.pid == pid) intervals.back().second.push_back(std::move(s));
    }
  }
  std::sort(intervals.begin(), intervals.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::vector<NamedSample>> samples;
  for (auto& [start, interval] : intervals) samples.push_back(std::move(interval));
  return samples;
}

// The steady fixture's phases are named in every interval the agent wrote (the last one, cut by
// the end of --duration, may be too short to hold a sample), and the intervals cover the run (an
// interval whose writing overran the next one's start is merged into it: a loaded machine's first
// symbolization of every process may take that long).
void ExpectSampledEveryInterval(const std::string& dir, int64_t steady_pid, int duration_s,
                                const std::string& log) {
  // Intervals written within one second (a slow write caught up) are listed in time order too.
  int64_t previous_start = 0;
  for (const std::string& file : PprofFilesIn(dir)) {
    auto profile = ReadPprofFile(file);
    if (!profile.ok()) continue;
    EXPECT_GE(profile->time_nanos(), previous_start) << file << " sorts before an earlier interval";
    previous_start = profile->time_nanos();
  }
  std::vector<std::vector<NamedSample>> intervals = SamplesPerInterval(dir, steady_pid);
  EXPECT_GE(intervals.size(), static_cast<size_t>(duration_s / 2)) << log;
  for (size_t i = 0; i + 1 < intervals.size(); ++i) {
    int64_t named = 0;
    for (const NamedSample& s : intervals[i]) {
      if (HasFunction(s, "run_phases")) named += s.count;
    }
    EXPECT_GT(named, 0) << "interval " << i << " of " << intervals.size()
                        << " has no sample of the steady fixture\n"
                        << log;
  }
}

int64_t CountSamples(const std::vector<NamedSample>& samples,
                     const std::function<bool(const NamedSample&)>& match) {
  int64_t total = 0;
  for (const NamedSample& s : samples) {
    if (match(s)) total += s.count;
  }
  return total;
}

// Whether an interval written so far holds a sample of `pid` naming `function`.
bool Named(const std::string& dir, int64_t pid, const std::string& function) {
  for (const NamedSample& s : SamplesOf(dir, pid)) {
    if (HasFunction(s, function)) return true;
  }
  return false;
}

// Polls `done` every 100 ms until it holds or `timeout` passes.
bool WaitUntil(std::chrono::milliseconds timeout, const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(100));
  }
  return true;
}

int64_t Total(const std::vector<NamedSample>& samples) {
  return CountSamples(samples, [](const NamedSample&) { return true; });
}

// Every frame of `module_suffix` (a file the test cut or overwrote) is either one of `names` or
// the module+offset fallback ("spin-x.so+0x1a2b"): nothing half-read.
void ExpectNamedOrModuleOffset(const std::vector<NamedSample>& samples,
                               const std::string& module_suffix,
                               const std::set<std::string>& names) {
  for (const NamedSample& s : samples) {
    for (size_t i = 0; i < s.functions.size(); ++i) {
      if (!absl::EndsWith(s.modules[i], module_suffix)) continue;
      const std::string& function = s.functions[i];
      EXPECT_TRUE(names.count(function) || absl::StartsWith(function, module_suffix + "+0x"))
          << "frame '" << function << "' in " << s.modules[i];
    }
  }
}

TEST(HostileHostTest, FilesReplacedDeletedTruncatedOrOverwrittenUnderRunningProcesses) {
  TempDir dir;
  TempDir out;
  ASSERT_FALSE(dir.path().empty() || out.path().empty());
  const std::string renamed = CopyExecutable(kPhases, dir / "phases-renamed");
  const std::string deleted = CopyExecutable(kPhases, dir / "phases-deleted");
  const std::string replacement = CopyExecutable(kReadZero, dir / "replacement");
  const std::string truncated = CopyExecutable(kSpinLib, dir / "spin-truncated.so");
  const std::string overwritten = CopyExecutable(kSpinLib, dir / "spin-overwritten.so");
  const std::string cut = CopyExecutable(kSpinLib, dir / "spin-cut.so");
  const uint64_t loaded_end = LoadedEnd(kSpinLib);
  ASSERT_LT(loaded_end, std::filesystem::file_size(kSpinLib));
  std::filesystem::resize_file(cut, loaded_end);  // cut before any process maps it

  Subprocess steady({kPhases, "30"});
  steady.WriteStdin("g");  // running before the agent starts, so in its first interval too
  Subprocess renamed_run({renamed, "30"});
  Subprocess deleted_run({deleted, "30"});
  // Each spins in spin_lib_first until told the file changed, then 4 s in spin_lib_second: code
  // first seen after the change.
  Subprocess truncated_run({kSpinLoader, truncated, "4"});
  Subprocess overwritten_run({kSpinLoader, overwritten, "4"});
  Subprocess cut_run({kSpinLoader, cut, "4"});
  std::vector<Subprocess*> loaders = {&truncated_run, &overwritten_run, &cut_run};
  for (Subprocess* loader : loaders) {
    ASSERT_TRUE(loader->WaitForOutput("loaded", seconds(10))) << loader->output();
  }
  constexpr int kDuration = 16;
  HostileAgent agent(out.path(), kDuration);
  ASSERT_TRUE(agent.ready) << agent.process->output();
  for (Subprocess* p : {&renamed_run, &deleted_run, &truncated_run, &overwritten_run, &cut_run}) {
    p->WriteStdin("g");
  }
  // Every file about to change has been opened and symbolized once its code is named in a
  // written interval.
  const bool warm = WaitUntil(seconds(9), [&] {
    return Named(out.path(), renamed_run.pid(), "run_phases") &&
           Named(out.path(), deleted_run.pid(), "run_phases") &&
           Named(out.path(), truncated_run.pid(), "spin_lib_first") &&
           Named(out.path(), overwritten_run.pid(), "spin_lib_first");
  });
  ASSERT_TRUE(warm) << "the fixtures were not named within 9 s\n" << agent.process->output();
  const std::string before = agent.Metrics();

  // A new file renamed over the binary, as package managers install; the binary deleted.
  std::filesystem::rename(replacement, renamed);
  std::filesystem::remove(deleted);
  // A library cut to its loaded segments, and one whose symbols and DWARF are overwritten in
  // place with zeros. (A running executable cannot be written: ETXTBSY, checked above.)
  std::filesystem::resize_file(truncated, loaded_end);
  {
    std::fstream file(overwritten, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(loaded_end));
    std::string zeros(std::filesystem::file_size(overwritten) - loaded_end, '\0');
    file.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  }
  for (Subprocess* loader : loaders) loader->WriteStdin("n");
  std::this_thread::sleep_for(seconds(3));  // the libraries' second phase
  const std::string after = agent.Metrics();
  EXPECT_EQ(agent.process->Wait(seconds(30)), 0) << agent.process->output();
  const std::string& log = agent.process->output();

  ExpectSampledEveryInterval(out.path(), steady.pid(), kDuration, log);
  // The replaced and the deleted binary are still named, from the file the process maps.
  for (Subprocess* p : {&renamed_run, &deleted_run}) {
    std::vector<NamedSample> samples = SamplesOf(out.path(), p->pid());
    const int64_t total = Total(samples);
    const int64_t named =
        CountSamples(samples, [](const NamedSample& s) { return HasFunction(s, "run_phases"); });
    EXPECT_GE(total, 20) << log;
    EXPECT_GE(static_cast<double>(named), 0.9 * static_cast<double>(total))
        << named << " of " << total << " samples of pid " << p->pid() << " name run_phases";
  }
  // The truncated library: named until it was cut; its code first seen after that faulted the
  // symbolizer's reads (SIGBUS), which is counted and leaves module+offset frames.
  std::vector<NamedSample> truncated_samples = SamplesOf(out.path(), truncated_run.pid());
  EXPECT_GT(CountSamples(truncated_samples,
                         [](const NamedSample& s) { return HasFunction(s, "spin_lib_first"); }),
            0);
  EXPECT_GT(CountSamples(truncated_samples,
                         [](const NamedSample& s) {
                           return !HasFunction(s, "spin_lib_first") &&
                                  std::any_of(s.modules.begin(), s.modules.end(),
                                              [](const std::string& m) {
                                                return absl::EndsWith(m, "spin-truncated.so");
                                              });
                         }),
            0)
      << "no sample of the truncated library's second phase";
  ExpectNamedOrModuleOffset(truncated_samples, "spin-truncated.so",
                            {"spin_lib_first", "spin_lib_run"});
  EXPECT_GE(Moved(before, after, "ember_symbolization_failures_total{reason=\"file_changed\"}"), 1)
      << after;
  // The overwritten library: its symbol names now read as zeros, so its new frames keep their
  // module and offset, and are counted as unnamed.
  std::vector<NamedSample> overwritten_samples = SamplesOf(out.path(), overwritten_run.pid());
  EXPECT_GT(Total(overwritten_samples), 0);
  ExpectNamedOrModuleOffset(overwritten_samples, "spin-overwritten.so",
                            {"spin_lib_first", "spin_lib_run", "spin_lib_second"});
  EXPECT_GE(Moved(before, after, "ember_symbolization_failures_total{reason=\"no_symbol\"}"), 1)
      << after;
  // The library cut before it was mapped: refused as ELF (its section headers are gone), so
  // module+offset frames, counted as an unreadable file.
  std::vector<NamedSample> cut_samples = SamplesOf(out.path(), cut_run.pid());
  EXPECT_GT(Total(cut_samples), 0);
  ExpectNamedOrModuleOffset(cut_samples, "spin-cut.so", {});
  EXPECT_GE(MetricValue(after, "ember_symbolization_failures_total{reason=\"unreadable_file\"}")
                .value_or(0),
            1)
      << after;
  EXPECT_TRUE(absl::StrContains(log, "cannot symbolize " + cut)) << log;
}

// A sample's thread, then its frames with their modules (unnamed ones show module+offset): how
// CommonStacks lists the samples a check did not expect.
std::vector<std::string> ThreadAndFrames(const NamedSample& s) {
  std::vector<std::string> frames = {s.thread};
  for (size_t i = 0; i < s.functions.size(); ++i) {
    frames.push_back(absl::StrCat(s.functions[i], "@", s.modules[i]));
  }
  return frames;
}

TEST(HostileHostTest, ProcessesExecAndExitBeforeTheirSamplesAreSymbolized) {
  TempDir dir;
  TempDir out;
  ASSERT_FALSE(dir.path().empty() || out.path().empty());
  const std::string exec_target = CopyExecutable(kPhases, dir / "phases-exec");
  std::ofstream(dir / "go") << "g";
  Subprocess steady({kPhases, "30"});
  steady.WriteStdin("g");  // running before the agent starts, so in its first interval too
  constexpr int kDuration = 8;
  HostileAgent agent(out.path(), kDuration);
  ASSERT_TRUE(agent.ready) << agent.process->output();
  const std::string before = agent.Metrics();
  // Fast churn: three short-lived processes per round (a subshell, date, true), for 5 s.
  Subprocess churn(
      {"/bin/sh", "-c",
       "end=$(($(date +%s) + 5)); while [ $(date +%s) -lt $end ]; do /bin/true; done"});
  // A shell that spins, then execs into another program under the same pid.
  Subprocess execer({"/bin/sh", "-c",
                     "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; exec \"$0\" 3 < \"$1\"",
                     exec_target, dir / "go"});
  // The same, into a program with the same name: busybox as "sh", so only the maps tell.
  std::filesystem::create_symlink("/bin/busybox", dir / "sh");
  Subprocess same_name_execer(
      {"/bin/sh", "-c",
       "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; exec \"$0\" -c 'i=0; while [ $i -lt "
       "400000 ]; do i=$((i+1)); done'",
       dir / "sh"});
  EXPECT_EQ(churn.Wait(seconds(20)), 0) << churn.output();
  const std::string after = agent.Metrics();
  EXPECT_EQ(agent.process->Wait(seconds(30)), 0) << agent.process->output();
  EXPECT_EQ(execer.Wait(seconds(10)), 0) << execer.output();
  EXPECT_EQ(same_name_execer.Wait(seconds(10)), 0) << same_name_execer.output();
  const std::string& log = agent.process->output();

  ExpectSampledEveryInterval(out.path(), steady.pid(), kDuration, log);
  // Before the exec the shell's frames, after it the new program's: never one for the other.
  std::vector<NamedSample> samples = SamplesOf(out.path(), execer.pid());
  std::vector<NamedSample> as_shell, as_phases;
  // A sample between the test's fork and its exec of sh carries the test's own thread name: it is
  // neither program's (now and then one is taken, in the fork's page-table copy).
  for (NamedSample& s : samples) {
    if (s.thread == "sh") as_shell.push_back(s);
    if (s.thread == "phases-exec") as_phases.push_back(s);
  }
  EXPECT_GT(Total(as_shell), 0) << log;
  EXPECT_EQ(
      CountSamples(as_shell, [](const NamedSample& s) { return HasFunction(s, "run_phases"); }), 0);
  const int64_t after_exec = Total(as_phases);
  const int64_t named =
      CountSamples(as_phases, [](const NamedSample& s) { return HasFunction(s, "run_phases"); });
  EXPECT_GE(after_exec, 10) << log;
  EXPECT_GE(static_cast<double>(named), 0.9 * static_cast<double>(after_exec))
      << named << " of " << after_exec << " samples after the exec name run_phases";
  for (const NamedSample& s : as_phases) {
    EXPECT_EQ(s.process, "phases-exec");
  }
  // dash, then busybox, under one name: each stack is one program's, never a mix.
  const auto in_module = [](const NamedSample& s, const std::string& name) {
    return std::any_of(s.modules.begin(), s.modules.end(),
                       [&](const std::string& m) { return absl::EndsWith(m, "/" + name); });
  };
  std::vector<NamedSample> same_name = SamplesOf(out.path(), same_name_execer.pid());
  const int64_t in_dash =
      CountSamples(same_name, [&](const NamedSample& s) { return in_module(s, "dash"); });
  const int64_t in_busybox =
      CountSamples(same_name, [&](const NamedSample& s) { return in_module(s, "busybox"); });
  const int64_t mixed = CountSamples(same_name, [&](const NamedSample& s) {
    return in_module(s, "dash") && in_module(s, "busybox");
  });
  std::printf("same-name exec: %lld samples in dash, %lld in busybox, %lld of %lld mixed\n",
              static_cast<long long>(in_dash), static_cast<long long>(in_busybox),
              static_cast<long long>(mixed), static_cast<long long>(Total(same_name)));
  EXPECT_GT(in_dash, 0) << log;
  EXPECT_GT(in_busybox, 0) << log;
  EXPECT_EQ(mixed, 0);
  // After the exec the BPF side no longer knows the process (its exec cleared the mark), so the
  // agent reads busybox's maps while it runs: its samples are in busybox, not unknown addresses.
  EXPECT_GE(static_cast<double>(in_busybox), 0.9 * static_cast<double>(Total(same_name) - in_dash))
      << "samples neither in dash nor in busybox: " << Total(same_name) - in_dash - in_busybox
      << ", by thread and frames:\n"
      << CommonStacks(
             same_name,
             [&](const NamedSample& s) {
               return !in_module(s, "dash") && !in_module(s, "busybox");
             },
             20, ThreadAndFrames);
  // Processes gone before the agent read their /proc entry: counted, and their samples kept
  // under a marker with the thread name the kernel gave.
  EXPECT_GE(Moved(before, after, "ember_proc_read_failures_total{file=\"stat\"}"), 1) << after;
  int64_t exited = 0;
  for (const std::string& file : PprofFilesIn(out.path())) {
    auto profile = ReadPprofFile(file);
    if (!profile.ok()) continue;
    for (const NamedSample& s : NamedSamples(*profile)) {
      if (HasFunction(s, "[process exited]")) exited += s.count;
    }
  }
  EXPECT_GT(exited, 0);
}

// A process the agent has not read yet wakes it with its first sample: the agent otherwise waits a
// second between reads of its samples, and a process that lives a fraction of that would be gone,
// its maps with it, by then.
TEST(HostileHostTest, ShortLivedProcessesAreReadWhileTheyRun) {
  TempDir out;
  ASSERT_FALSE(out.path().empty());
  HostileAgent agent(out.path(), /*duration_s=*/8);
  ASSERT_TRUE(agent.ready) << agent.process->output();
  // One after another, each busy for 0.3 s (about 30 samples at 99 Hz).
  std::vector<int64_t> pids;
  for (int i = 0; i < 8; ++i) {
    Subprocess fixture({kPhases, "0.3"});
    fixture.WriteStdin("g");
    pids.push_back(fixture.pid());
    EXPECT_EQ(fixture.Wait(seconds(10)), 0) << fixture.output();
  }
  EXPECT_EQ(agent.process->Wait(seconds(30)), 0) << agent.process->output();
  int64_t total = 0, named = 0, exited = 0;
  std::vector<NamedSample> all;
  for (int64_t pid : pids) {
    std::vector<NamedSample> samples = SamplesOf(out.path(), pid);
    total += Total(samples);
    named +=
        CountSamples(samples, [](const NamedSample& s) { return HasFunction(s, "run_phases"); });
    exited += CountSamples(samples,
                           [](const NamedSample& s) { return HasFunction(s, "[process exited]"); });
    all.insert(all.end(), samples.begin(), samples.end());
  }
  // The others, by thread and frames (with their modules: unnamed ones show module+offset).
  const std::string unnamed = CommonStacks(
      all, [](const NamedSample& s) { return !HasFunction(s, "run_phases"); }, 20, ThreadAndFrames);
  std::printf("8 processes of 0.3 s: %lld samples, %lld name run_phases, %lld [process exited]\n",
              static_cast<long long>(total), static_cast<long long>(named),
              static_cast<long long>(exited));
  std::printf("the others:\n%s", unnamed.c_str());
  EXPECT_GE(total, 8 * 15) << agent.process->output();
  EXPECT_GE(static_cast<double>(named), 0.9 * static_cast<double>(total))
      << named << " of " << total << " samples name run_phases; " << exited
      << " are [process exited]\n"
      << agent.process->output();
}

// The cgroup v2 mount, from /proc/self/mounts ("/sys/fs/cgroup/unified" on hybrid hosts).
std::string CgroupV2Mount() {
  std::ifstream mounts("/proc/self/mounts");
  std::string device, mount_point, type, rest;
  while (mounts >> device >> mount_point >> type && std::getline(mounts, rest)) {
    if (type == "cgroup2") return mount_point;
  }
  return "";
}

// Cgroups for one test under the v2 mount, named like Docker's containers. Removed (after the
// processes in them, which must be gone first) when the test ends, passed or not.
class TestCgroups {
 public:
  TestCgroups() {
    std::string mount = CgroupV2Mount();
    if (!mount.empty()) base_ = absl::StrCat(mount, "/ember-hostile-", getpid());
    if (!base_.empty() && !std::filesystem::create_directory(base_, error_)) base_.clear();
  }
  ~TestCgroups() {
    if (base_.empty()) return;
    for (int attempt = 0; attempt < 50; ++attempt) {  // exiting processes leave within ms
      for (const std::string& dir : made_) rmdir(dir.c_str());
      if (rmdir(base_.c_str()) == 0) return;
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
  bool ok() const { return !base_.empty(); }
  // A container cgroup docker-<id>.scope; its path.
  std::string Make(const std::string& id) {
    std::string dir = absl::StrCat(base_, "/docker-", id, ".scope");
    std::filesystem::create_directory(dir, error_);
    made_.push_back(dir);
    return dir;
  }

 private:
  std::string base_;
  std::vector<std::string> made_;
  std::error_code error_;
};

// The container.id labels of `pid`'s samples in the intervals written so far ("" for none).
std::set<std::string> ContainerLabels(const std::string& dir, int64_t pid) {
  std::set<std::string> ids;
  for (const NamedSample& s : SamplesOf(dir, pid)) {
    auto it = s.labels.find("container.id");
    ids.insert(it == s.labels.end() ? "" : it->second);
  }
  return ids;
}

bool MoveTo(const std::string& cgroup, pid_t pid) {
  std::ofstream procs(cgroup + "/cgroup.procs");
  procs << pid << std::flush;
  return static_cast<bool>(procs);
}

TEST(HostileHostTest, CgroupsRemovedUnderProfiledProcesses) {
  TempDir out;
  ASSERT_FALSE(out.path().empty());
  TestCgroups cgroups;
  ASSERT_TRUE(cgroups.ok()) << "no cgroup v2 mount to make cgroups under";
  const std::string id_a(64, 'a'), id_b(64, 'b'), id_c(64, 'c');
  const std::string a = cgroups.Make(id_a), b = cgroups.Make(id_b), c = cgroups.Make(id_c);
  Subprocess steady({kPhases, "30"});
  steady.WriteStdin("g");  // running before the agent starts, so in its first interval too
  // `moved` starts in A, moves to B, then A is removed; `ended` exits, then C is removed.
  Subprocess moved(kBusyShell);
  Subprocess ended(kBusyShell);
  ASSERT_TRUE(MoveTo(a, moved.pid()));
  ASSERT_TRUE(MoveTo(c, ended.pid()));
  constexpr int kDuration = 12;
  HostileAgent agent(out.path(), kDuration);
  ASSERT_TRUE(agent.ready) << agent.process->output();
  // Labels are the process's container when its interval is written: wait for one written in A
  // (and one of `ended` in C) before the move, and for one in B after it.
  ASSERT_TRUE(WaitUntil(seconds(6), [&] {
    return ContainerLabels(out.path(), moved.pid()).count(id_a) &&
           ContainerLabels(out.path(), ended.pid()).count(id_c);
  })) << agent.process->output();
  ASSERT_TRUE(MoveTo(b, moved.pid()));
  EXPECT_EQ(rmdir(a.c_str()), 0) << "rmdir " << a;
  ended.Signal(SIGKILL);
  ended.Wait(seconds(5));
  EXPECT_EQ(rmdir(c.c_str()), 0) << "rmdir " << c;
  EXPECT_TRUE(
      WaitUntil(seconds(4), [&] { return ContainerLabels(out.path(), moved.pid()).count(id_b); }));
  EXPECT_EQ(agent.process->Wait(seconds(30)), 0) << agent.process->output();
  const std::string& log = agent.process->output();

  ExpectSampledEveryInterval(out.path(), steady.pid(), kDuration, log);
  // Each interval labels `moved` with one container: A, then B once it moved, and never A again
  // after that (the removed cgroup's cached container is not reused).
  std::vector<std::string> labels;
  for (const std::vector<NamedSample>& interval : SamplesPerInterval(out.path(), moved.pid())) {
    std::set<std::string> ids;
    for (const NamedSample& s : interval) {
      auto it = s.labels.find("container.id");
      ids.insert(it == s.labels.end() ? "" : it->second);
    }
    if (ids.size() == 1) labels.push_back(*ids.begin());
    EXPECT_LE(ids.size(), 1u) << "one interval, one container";
  }
  ASSERT_FALSE(labels.empty()) << log;
  EXPECT_EQ(labels.front(), id_a);
  EXPECT_EQ(labels.back(), id_b);
  auto first_b = std::find(labels.begin(), labels.end(), id_b);
  EXPECT_EQ(std::count(first_b, labels.end(), id_a), 0);
  std::vector<NamedSample> ended_samples = SamplesOf(out.path(), ended.pid());
  EXPECT_GT(Total(ended_samples), 0);
  for (const NamedSample& s : ended_samples) {
    EXPECT_EQ(s.labels.count("container.id") ? s.labels.at("container.id") : "", id_c);
  }
}

TEST(HostileHostTest, OddOrHiddenProcEntries) {
  TempDir dir;
  TempDir out;
  ASSERT_FALSE(dir.path().empty() || out.path().empty());
  std::filesystem::create_directory(dir / "empty");
  Subprocess steady({kPhases, "30"});
  steady.WriteStdin("g");  // running before the agent starts, so in its first interval too
  // Its main thread exits at once; its worker spins on (killed when the test ends), however long
  // the agent takes to start on a loaded machine.
  Subprocess leader_exited({kLeaderExit, "60"});
  ASSERT_TRUE(leader_exited.WaitForOutput("leader exits", seconds(10)));
  // Hidden from the agent by bind mounts in the agent's own mount namespace (as a rootkit, or a
  // hardening tool, hides them): one process whole, and one process's maps.
  Subprocess hidden(kBusyShell);
  const std::string maps_hidden_bin = CopyExecutable(kPhases, dir / "phases-no-maps");
  Subprocess maps_hidden({maps_hidden_bin, "30"});
  const std::string mounts =
      absl::StrCat("mount --bind '", dir / "empty", "' /proc/", hidden.pid(),
                   " && mount --bind /dev/null /proc/", maps_hidden.pid(), "/maps && exec \"$@\"");
  constexpr int kDuration = 7;
  HostileAgent agent(
      out.path(), kDuration,
      {"/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", mounts, "sh"});
  ASSERT_TRUE(agent.ready) << agent.process->output();
  maps_hidden.WriteStdin("g");
  const std::string before = agent.Metrics();
  std::this_thread::sleep_for(seconds(4));
  const std::string after = agent.Metrics();
  EXPECT_EQ(agent.process->Wait(seconds(30)), 0) << agent.process->output();
  const std::string& log = agent.process->output();

  ExpectSampledEveryInterval(out.path(), steady.pid(), kDuration, log);
  // The maps of a zombie leader, and the hidden maps, are read through a live thread's task/.
  for (auto [pid, function] :
       {std::pair<pid_t, std::string>{leader_exited.pid(), "leader_exit_worker"},
        {maps_hidden.pid(), "run_phases"}}) {
    std::vector<NamedSample> samples = SamplesOf(out.path(), pid);
    const int64_t total = Total(samples);
    const int64_t named = CountSamples(
        samples, [&, f = function](const NamedSample& s) { return HasFunction(s, f); });
    EXPECT_GE(total, 15) << log;
    EXPECT_GE(static_cast<double>(named), 0.9 * static_cast<double>(total))
        << named << " of " << total << " samples of pid " << pid << " name " << function;
  }
  // A process with no /proc entry at all: its samples keep the kernel's thread name and a
  // marker, and every one is counted.
  std::vector<NamedSample> hidden_samples = SamplesOf(out.path(), hidden.pid());
  const int64_t hidden_total = Total(hidden_samples);
  EXPECT_GT(hidden_total, 0) << log;
  const int64_t marked = CountSamples(
      hidden_samples, [](const NamedSample& s) { return HasFunction(s, "[process exited]"); });
  EXPECT_GE(static_cast<double>(marked), 0.9 * static_cast<double>(hidden_total))
      << marked << " of " << hidden_total;
  EXPECT_GE(Moved(before, after, "ember_proc_read_failures_total{file=\"stat\"}"), 1) << after;
}

// The host's clocks cannot be stepped on a shared machine (wall-clock steps are tested at the unit
// level with made-up readings: tests/unit/agent/interval_clock_test.cc), but a time namespace
// moves the agent's monotonic and boot clocks 31 years away from the kernel's, which stamps the
// samples: nothing may mix the two.
TEST(HostileHostTest, AgentInATimeNamespaceWithItsMonotonicClockOffset) {
  TempDir out;
  ASSERT_FALSE(out.path().empty());
  Subprocess steady({kPhases, "30"});
  steady.WriteStdin("g");  // running before the agent starts, so in its first interval too
  constexpr int kDuration = 4;
  const absl::Time started = absl::Now();
  HostileAgent agent(out.path(), kDuration,
                     {"/usr/bin/unshare", "--time", "--fork", "--monotonic", "1000000000",
                      "--boottime", "1000000000"});
  ASSERT_TRUE(agent.ready) << agent.process->output();
  EXPECT_EQ(agent.process->Wait(seconds(30)), 0) << agent.process->output();
  const absl::Time ended = absl::Now();
  const std::string& log = agent.process->output();

  ExpectSampledEveryInterval(out.path(), steady.pid(), kDuration, log);
  std::vector<std::string> files = PprofFilesIn(out.path());
  EXPECT_LE(files.size(), static_cast<size_t>(kDuration + 1)) << log;
  for (const std::string& file : files) {
    auto profile = ReadPprofFile(file);
    ASSERT_TRUE(profile.ok()) << profile.status();
    const absl::Time start = absl::FromUnixNanos(profile->time_nanos());
    EXPECT_GE(start, started - absl::Seconds(30)) << file;
    EXPECT_LE(start, ended) << file;
    // An interval is a second, or a few when writing one overran the next on a loaded machine:
    // never negative, never years.
    EXPECT_LE(profile->duration_nanos(), int64_t{kDuration} * 1'000'000'000) << file;
    EXPECT_GE(profile->duration_nanos(), 0) << file;
  }
}

}  // namespace
}  // namespace ember::testing
