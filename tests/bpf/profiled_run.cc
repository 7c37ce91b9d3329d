// Runs fixtures under build/ember-agent (EMBER_AGENT_BIN) for the bpf tests.
#include "profiled_run.h"

#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <sstream>

#include "gtest/gtest.h"
#include "support/subprocess.h"

namespace ember::testing {

using std::chrono::seconds;

std::string MakeTempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "ember-bpf-XXXXXX").string();
  char* dir = mkdtemp(pattern.data());
  return dir ? std::string(dir) : std::string();
}

bool IsKernelModule(const std::string& module) { return !module.empty() && module[0] == '['; }

std::vector<NamedSample> SamplesOf(const std::string& dir, int64_t pid) {
  std::vector<NamedSample> all;
  for (const std::string& file : PprofFilesIn(dir)) {
    auto profile = ReadPprofFile(file);
    EXPECT_TRUE(profile.ok()) << profile.status();
    if (!profile.ok()) continue;
    for (NamedSample& s : NamedSamples(*profile)) {
      if (s.pid == pid) all.push_back(std::move(s));
    }
  }
  return all;
}

ProfiledRun ProfileFixture(const std::vector<std::string>& fixture_argv, int hz,
                           const std::function<void(pid_t)>& after_start, int stop_signal,
                           const std::vector<std::string>& extra_agent_args,
                           const AgentLaunch& launch) {
  ProfiledRun run;
  run.output_dir = MakeTempDir();
  std::filesystem::permissions(run.output_dir, launch.output_dir_perms);
  Subprocess fixture(fixture_argv);
  run.pid = fixture.pid();
  if (after_start) after_start(fixture.pid());
  std::vector<std::string> agent_argv = launch.argv;
  if (agent_argv.empty()) agent_argv.push_back(EMBER_AGENT_BIN);
  for (std::string arg :
       {std::string("--pid"), std::to_string(fixture.pid()), std::string("--sampling-hz"),
        std::to_string(hz), std::string("--export-interval"), std::string("3s"),
        std::string("--output-dir"), run.output_dir,
        // any free port: another agent may hold the default
        std::string("--metrics-address"), std::string("127.0.0.1:0")}) {
    agent_argv.push_back(std::move(arg));
  }
  agent_argv.insert(agent_argv.end(), extra_agent_args.begin(), extra_agent_args.end());
  Subprocess agent(agent_argv);
  bool attached = agent.WaitForOutput("attached to", seconds(15));
  EXPECT_TRUE(attached) << agent.output();
  if (launch.once_dropped) {
    // The status endpoint is the last thing the agent starts, after dropping its capabilities:
    // by then every thread it has at run time is there.
    bool dropped = agent.WaitForOutput("status endpoint: ", seconds(15));
    EXPECT_TRUE(dropped) << agent.output();
    if (dropped) launch.once_dropped(agent.pid());
  }
  fixture.WriteStdin("g");
  EXPECT_EQ(fixture.Wait(seconds(60)), 0) << fixture.output();
  run.fixture_output = fixture.output();
  agent.Signal(stop_signal);
  EXPECT_EQ(agent.Wait(seconds(30)), 0) << agent.output();
  run.agent_log = agent.output();
  return run;
}

std::map<std::string, double> MeasuredCpuNs(const std::string& fixture_output) {
  std::map<std::string, double> measured_ns;
  std::istringstream lines(fixture_output);
  std::string name;
  double ns = 0;
  while (lines >> name >> ns) measured_ns[name] = ns;
  return measured_ns;
}

}  // namespace ember::testing
