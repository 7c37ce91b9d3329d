// Runs fixtures under build/ember-agent (EMBER_AGENT_BIN) for the bpf tests.
#include "profiled_run.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <regex>
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
                           const std::vector<std::string>& extra_agent_args) {
  ProfiledRun run;
  run.output_dir = MakeTempDir();
  Subprocess fixture(fixture_argv);
  run.pid = fixture.pid();
  if (after_start) after_start(fixture.pid());
  std::vector<std::string> agent_argv = {EMBER_AGENT_BIN, "--pid", std::to_string(fixture.pid()),
                                         "--sampling-hz", std::to_string(hz), "--export-interval",
                                         "3s", "--output-dir", run.output_dir,
                                         // any free port: another agent may hold the default
                                         "--metrics-address", "127.0.0.1:0"};
  agent_argv.insert(agent_argv.end(), extra_agent_args.begin(), extra_agent_args.end());
  Subprocess agent(agent_argv);
  bool attached = agent.WaitForOutput("attached to", seconds(15));
  EXPECT_TRUE(attached) << agent.output();
  fixture.WriteStdin("g");
  EXPECT_EQ(fixture.Wait(seconds(60)), 0) << fixture.output();
  run.fixture_output = fixture.output();
  agent.Signal(stop_signal);
  EXPECT_EQ(agent.Wait(seconds(30)), 0) << agent.output();
  run.agent_log = agent.output();
  return run;
}

namespace {
size_t AppendBody(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}
}  // namespace

std::pair<long, std::string> HttpGet(const std::string& url) {
  std::string body;
  long status = 0;
  CURL* curl = curl_easy_init();
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  if (curl_easy_perform(curl) == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(curl);
  return {status, body};
}

std::string StatusEndpoint(const std::string& agent_log) {
  std::smatch match;
  std::regex line("status endpoint: (http://[0-9.]+:[0-9]+)/metrics");
  return std::regex_search(agent_log, match, line) ? match[1].str() : "";
}

std::optional<double> MetricValue(const std::string& page, const std::string& series) {
  std::istringstream lines(page);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::strtod(line.c_str() + series.size() + 1, nullptr);
    }
  }
  return std::nullopt;
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
