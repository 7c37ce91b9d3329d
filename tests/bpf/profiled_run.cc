// Runs fixtures under build/ember-agent (EMBER_AGENT_BIN) for the bpf tests.
#include "profiled_run.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "support/subprocess.h"

namespace ember::testing {

using std::chrono::seconds;

std::string MakeTempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "ember-bpf-XXXXXX").string();
  char* dir = mkdtemp(pattern.data());
  return dir ? std::string(dir) : std::string();
}

std::vector<std::string> WithTheChartsCapabilities(std::vector<std::string> agent_argv) {
  // But CAP_SYS_RESOURCE, which matters only before Linux 5.11 and which some hosts withhold even
  // from root (privileges_test.cc).
  const std::string set = "-all,+bpf,+perfmon,+sys_ptrace,+dac_read_search,+syslog,+setpcap";
  std::vector<std::string> argv = {"/usr/bin/setpriv", "--inh-caps=" + set, "--ambient-caps=" + set,
                                   "--bounding-set=" + set};
  argv.insert(argv.end(), std::make_move_iterator(agent_argv.begin()),
              std::make_move_iterator(agent_argv.end()));
  return argv;
}

uint64_t PeakRssBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (!line.starts_with("VmHWM:")) continue;
    std::istringstream fields(line.substr(6));
    uint64_t kib = 0;
    if (fields >> kib) return kib * 1024;
  }
  return 0;
}

uint64_t AgentPeakRssBound(uint64_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  return bytes + bytes / 8 + (uint64_t{256} << 20);
#else
  return bytes;
#endif
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
  run.hz = hz;
  Subprocess fixture(fixture_argv);
  run.pid = fixture.pid();
  if (after_start) after_start(fixture.pid());
  std::vector<std::string> agent_argv = launch.argv;
  if (agent_argv.empty()) agent_argv.push_back(EMBER_AGENT_BIN);
  for (std::string arg :
       {std::string("--pid"), std::to_string(fixture.pid()), std::string("--sampling-hz"),
        std::to_string(hz), std::string("--export-interval"), std::string("3s"),
        // any free port: another agent may hold the default
        std::string("--metrics-address"), std::string("127.0.0.1:0")}) {
    agent_argv.push_back(std::move(arg));
  }
  if (launch.output_dir_flag) {
    agent_argv.push_back("--output-dir");
    agent_argv.push_back(run.output_dir);
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
  if (fixture.cpu_time()) run.fixture_cpu_seconds = fixture.cpu_time()->count() / 1e6;
  agent.Signal(stop_signal);
  EXPECT_EQ(agent.Wait(seconds(30)), 0) << agent.output();
  run.agent_log = agent.output();
  ExpectNoSampleLost(run.agent_log);
  return run;
}

std::optional<AgentDone> AgentDoneLine(const std::string& agent_log) {
  std::smatch match;
  static const std::regex kDone(R"(done: (\d+) samples, (\d+) lost, (\d+) malformed)");
  if (!std::regex_search(agent_log, match, kDone)) return std::nullopt;
  return AgentDone{std::stoll(match[1]), std::stoll(match[2]), std::stoll(match[3])};
}

void ExpectNoSampleLost(const std::string& agent_log) {
  std::optional<AgentDone> done = AgentDoneLine(agent_log);
  ASSERT_TRUE(done.has_value()) << "no \"done:\" line from the agent\n" << agent_log;
  EXPECT_EQ(done->lost, 0) << "samples lost: ring buffer full\n" << agent_log;
  EXPECT_EQ(done->malformed, 0) << agent_log;
}

void ExpectSamplesComplete(const ProfiledRun& run, int64_t samples, double min_share) {
  ExpectSamplesForCpuTime(samples, run.fixture_cpu_seconds, run.hz, run.agent_log, min_share);
}

void ExpectSamplesForCpuTime(int64_t samples, double cpu_seconds, int hz,
                             const std::string& context, double min_share) {
  const double expected = cpu_seconds * hz;
  std::printf("[   INFO   ] %lld samples for %.3f s of CPU time at %d Hz (%.0f expected)\n",
              static_cast<long long>(samples), cpu_seconds, hz, expected);
  ASSERT_GT(expected, 0) << "the process's CPU time was not measured";
  // A process that runs in slices shorter than the period is sampled in each with a chance of
  // slice / period, so short runs on a busy machine scatter by about the standard deviation of
  // such a count, sqrt(n): two of them are allowed, or the share when that is more.
  const double slack = std::max((1 - min_share) * expected, 2 * std::sqrt(expected));
  EXPECT_GE(static_cast<double>(samples), expected - slack)
      << samples << " samples where " << cpu_seconds << " s of CPU at " << hz << " Hz give "
      << expected << "\n"
      << context;
  EXPECT_LE(static_cast<double>(samples), expected + slack)
      << samples << " samples where " << cpu_seconds << " s of CPU at " << hz << " Hz give "
      << expected;
}

std::optional<double> ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  // The fields after the command name, which is in parentheses and may hold spaces: state is
  // field 3, utime and stime are fields 14 and 15.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14) ticks += std::strtod(field.c_str(), nullptr);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
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

std::string CommonStacks(
    const std::vector<NamedSample>& samples, const std::function<bool(const NamedSample&)>& pick,
    size_t limit, const std::function<std::vector<std::string>(const NamedSample&)>& frames_of) {
  std::map<std::string, int64_t> counts;
  for (const NamedSample& s : samples) {
    if (!pick(s)) continue;
    counts[absl::StrJoin(frames_of ? frames_of(s) : s.functions, " <- ")] += s.count;
  }
  std::vector<std::pair<int64_t, std::string>> sorted;
  for (auto& [stack, count] : counts) sorted.emplace_back(count, stack);
  std::sort(sorted.rbegin(), sorted.rend());
  std::string out;
  for (size_t i = 0; i < sorted.size() && i < limit; ++i) {
    absl::StrAppend(&out, "  ", sorted[i].first, " x ", sorted[i].second, "\n");
  }
  return out;
}

double Share(int64_t part, int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

std::map<std::string, std::set<int>> FlameGraphTypes(const std::string& html_path) {
  std::ifstream in(html_path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string html = buffer.str();
  const std::string open = "<script id=\"data\" type=\"application/json\">";
  const size_t begin = html.find(open);
  const size_t end = html.find("</script>", begin);
  std::map<std::string, std::set<int>> types;
  if (begin == std::string::npos || end == std::string::npos) return types;
  nlohmann::json data = nlohmann::json::parse(
      html.substr(begin + open.size(), end - begin - open.size()), nullptr, false);
  if (data.is_discarded()) return types;
  const auto& names = data["names"];
  const auto& tree = data["tree"];
  for (size_t i = 0; i + 3 < tree.size(); i += 4) {
    types[names[tree[i].get<size_t>()].get<std::string>()].insert(tree[i + 1].get<int>());
  }
  return types;
}

}  // namespace ember::testing
