// ember-agent's command line as a user meets it: exit codes and one-line errors.
#include <string>

#include "gtest/gtest.h"
#include "support/subprocess.h"

namespace ember::testing {
namespace {

TEST(CliTest, BadFlagValueIsOneLineNamingTheFlagAndExitCode2) {
  for (const char* arg : {"--sampling-hz=fast", "--pid=abc", "--duration=soon", "--bogus",
                          "--max-processes=0", "--max-symbol-cache-bytes=1x"}) {
    RunResult result = RunProgram({EMBER_AGENT_BIN, arg});
    EXPECT_EQ(result.exit_code, 2) << arg;
    EXPECT_EQ(result.output.rfind("ember-agent: ", 0), 0u) << result.output;
    EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
  }
}

TEST(CliTest, HelpAndVersionExitZero) {
  RunResult help = RunProgram({EMBER_AGENT_BIN, "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--export-interval"), std::string::npos);
  RunResult version = RunProgram({EMBER_AGENT_BIN, "--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.output.rfind("ember-agent ", 0), 0u) << version.output;
}

TEST(CliTest, PidOfNoRunningProcessIsAFlagError) {
  RunResult result = RunProgram({EMBER_AGENT_BIN, "--pid=4194000", "--output-dir=/tmp"});
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_EQ(result.output, "ember-agent: --pid: no running process with id 4194000\n");
}

TEST(CliTest, UnwritableOutputDirIsAClearError) {
  RunResult result = RunProgram({EMBER_AGENT_BIN, "--output-dir=/proc/ember-cannot-exist"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("--output-dir: cannot create"), std::string::npos) << result.output;
}

TEST(CliTest, UnwritableDebuginfodCacheIsAClearError) {
  RunResult result =
      RunProgram({EMBER_AGENT_BIN, "--debuginfod-urls=http://127.0.0.1:1",
                  "--debuginfod-cache-dir=/proc/ember-cannot-exist/cache", "--output-dir=/tmp"});
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(result.output.rfind("ember-agent: --debuginfod-cache-dir: cannot create", 0), 0u)
      << result.output;
  EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
}

TEST(CliTest, BadOtlpSettingsAreFlagErrorsThatHideHeaderValues) {
  RunResult endpoint = RunProgram({EMBER_AGENT_BIN, "--otlp-endpoint=ftp://collector"});
  EXPECT_EQ(endpoint.exit_code, 2) << endpoint.output;
  EXPECT_EQ(endpoint.output.rfind("ember-agent: --otlp-endpoint: expected", 0), 0u)
      << endpoint.output;
  RunResult header =
      RunProgram({EMBER_AGENT_BIN, "--otlp-endpoint=localhost:4317", "--otlp-header=token-s3cret"});
  EXPECT_EQ(header.exit_code, 2) << header.output;
  EXPECT_EQ(header.output.rfind("ember-agent: --otlp-header: expected", 0), 0u) << header.output;
  EXPECT_EQ(header.output.find("s3cret"), std::string::npos) << header.output;
  EXPECT_EQ(std::count(header.output.begin(), header.output.end(), '\n'), 1) << header.output;
  RunResult help = RunProgram({EMBER_AGENT_BIN, "--help"});
  EXPECT_NE(help.output.find("--otlp-endpoint"), std::string::npos);
}

}  // namespace
}  // namespace ember::testing
