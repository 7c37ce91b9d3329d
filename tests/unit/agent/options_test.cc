// Flag parsing: every flag, both value forms, and one-line errors naming the flag; --help and the
// README's flag tables against the flags parsed and the defaults of Options.
#include "agent/options.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ember {
namespace {

absl::StatusOr<Options> Parse(std::vector<absl::string_view> args) { return ParseOptions(args); }

TEST(OptionsTest, DefaultsMatchTheDocumentedOnes) {
  auto options = Parse({});
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->sampling_hz, 19);
  EXPECT_EQ(options->export_interval, absl::Seconds(10));
  EXPECT_EQ(options->kernel_symbols_recheck, absl::Minutes(5));
  EXPECT_EQ(options->duration, absl::ZeroDuration());
  EXPECT_EQ(options->output_dir, "ember-profiles");
  EXPECT_EQ(options->stack_snapshot_bytes, 16384u);
  EXPECT_TRUE(options->pids.empty());
  EXPECT_EQ(options->metrics_address, "127.0.0.1:9464");
  EXPECT_EQ(options->max_processes, 4096u);
  EXPECT_EQ(options->max_symbol_cache_bytes, size_t{256} << 20);
  EXPECT_EQ(options->max_perf_map_bytes, size_t{64} << 20);
  EXPECT_EQ(options->max_perf_map_total_bytes, size_t{256} << 20);
  EXPECT_EQ(options->max_mappings_per_process, 4096u);
  EXPECT_EQ(options->max_mapping_bytes, size_t{64} << 20);
  EXPECT_EQ(options->otlp_max_queue_bytes, size_t{64} << 20);
  EXPECT_EQ(options->otlp_max_request_bytes, size_t{4} << 20);  // a Collector's gRPC limit
  EXPECT_EQ(options->max_pods, 4096u);
  EXPECT_FALSE(options->profile_self);                 // the agent leaves its own process out
  EXPECT_FALSE(options->debuginfod_urls.has_value());  // $DEBUGINFOD_URLS decides
  EXPECT_EQ(options->debuginfod_cache_dir, "/var/cache/ember/debuginfod");
  EXPECT_EQ(options->debuginfod_cache_bytes, size_t{1} << 30);
  EXPECT_EQ(options->debuginfod_timeout, absl::Seconds(30));
  EXPECT_EQ(options->debuginfod_max_fetches, 2);
}

TEST(OptionsTest, DebuginfodFlags) {
  auto options = Parse({"--debuginfod-urls", "https://a.example/ http://127.0.0.1:8002",
                        "--debuginfod-cache-dir=/srv/cache", "--debuginfod-cache-bytes=64MiB",
                        "--debuginfod-timeout=5s", "--debuginfod-max-fetches=4"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->debuginfod_urls, "https://a.example/ http://127.0.0.1:8002");
  EXPECT_EQ(options->debuginfod_cache_dir, "/srv/cache");
  EXPECT_EQ(options->debuginfod_cache_bytes, size_t{64} << 20);
  EXPECT_EQ(options->debuginfod_timeout, absl::Seconds(5));
  EXPECT_EQ(options->debuginfod_max_fetches, 4);
  // "" turns debuginfod off whatever the environment says.
  options = Parse({"--debuginfod-urls="});
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->debuginfod_urls, "");
}

TEST(OptionsTest, ProfileSelfIsASwitch) {
  auto options = Parse({"--profile-self"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->profile_self);
  EXPECT_FALSE(Parse({"--profile-self=yes"}).ok());  // a switch takes no value
  EXPECT_NE(UsageText().find("--profile-self"), std::string::npos);
}

TEST(OptionsTest, BpfUnwindRows) {
  auto defaults = Parse({});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->bpf_unwind_rows, 1u << 20);  // on by default: 16 MiB of rows
  auto off = Parse({"--bpf-unwind-rows", "0"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->bpf_unwind_rows, 0u);
  auto most = Parse({"--bpf-unwind-rows=16777216"});
  ASSERT_TRUE(most.ok()) << most.status();
  EXPECT_EQ(most->bpf_unwind_rows, 16777216u);
  for (const char* bad : {"16777217", "-1", "many", ""}) {
    auto options = Parse({"--bpf-unwind-rows", bad});
    ASSERT_FALSE(options.ok()) << bad;
    EXPECT_NE(options.status().message().find("--bpf-unwind-rows"), std::string::npos);
  }
  EXPECT_NE(UsageText().find("--bpf-unwind-rows"), std::string::npos);
}

TEST(OptionsTest, LimitFlags) {
  auto options = Parse({"--max-processes=4", "--max-symbol-cache-bytes", "512MiB",
                        "--max-perf-map-bytes=4096", "--otlp-max-queue-bytes", "1G", "--max-pods",
                        "100", "--max-cfi-cache-bytes=2MiB", "--otlp-max-request-bytes=16MiB"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->max_processes, 4u);
  EXPECT_EQ(options->max_symbol_cache_bytes, size_t{512} << 20);
  EXPECT_EQ(options->max_perf_map_bytes, 4096u);
  EXPECT_EQ(options->otlp_max_queue_bytes, size_t{1} << 30);
  EXPECT_EQ(options->max_pods, 100u);
  EXPECT_EQ(options->max_cfi_cache_bytes, size_t{2} << 20);
  EXPECT_EQ(options->otlp_max_request_bytes, size_t{16} << 20);

  auto budgets = Parse({"--max-perf-map-bytes=1GiB", "--max-perf-map-total-bytes=2GiB",
                        "--max-mappings-per-process", "16", "--max-mapping-bytes=8MiB"});
  ASSERT_TRUE(budgets.ok()) << budgets.status();
  EXPECT_EQ(budgets->max_perf_map_total_bytes, size_t{2} << 30);
  EXPECT_EQ(budgets->max_mappings_per_process, 16u);
  EXPECT_EQ(budgets->max_mapping_bytes, size_t{8} << 20);
}

TEST(OptionsTest, ByteSizes) {
  size_t bytes = 0;
  EXPECT_TRUE(ParseByteSize("65536", &bytes));
  EXPECT_EQ(bytes, 65536u);
  EXPECT_TRUE(ParseByteSize("64KiB", &bytes));
  EXPECT_EQ(bytes, 64u << 10);
  EXPECT_TRUE(ParseByteSize("3Mi", &bytes));
  EXPECT_EQ(bytes, 3u << 20);
  EXPECT_TRUE(ParseByteSize("2GiB", &bytes));
  EXPECT_EQ(bytes, size_t{2} << 30);
  EXPECT_TRUE(ParseByteSize("7B", &bytes));
  EXPECT_EQ(bytes, 7u);
  for (const char* bad : {"", "MiB", "1.5MiB", "-1", "12 MiB", "1TB", "1kib", "0x10",
                          "99999999999999999999", "17179869184GiB"}) {
    EXPECT_FALSE(ParseByteSize(bad, &bytes)) << bad;
  }
}

TEST(OptionsTest, MetricsAddress) {
  EXPECT_EQ(Parse({"--metrics-address=0.0.0.0:9100"})->metrics_address, "0.0.0.0:9100");
  EXPECT_EQ(Parse({"--metrics-address", "[::]:0"})->metrics_address, "[::]:0");
  // Empty turns the endpoint off, in both forms.
  EXPECT_EQ(Parse({"--metrics-address="})->metrics_address, "");
  EXPECT_EQ(Parse({"--metrics-address", ""})->metrics_address, "");
  auto bad = Parse({"--metrics-address=localhost:9464"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "--metrics-address: expected IPv4:port or [IPv6]:port such as 127.0.0.1:9464, "
            "0.0.0.0:9464 or [::]:9464 (port 0: any free port), got 'localhost:9464' "
            "('localhost' is not an IPv4 address; host names are not resolved, so write "
            "127.0.0.1 rather than localhost)");
}

TEST(OptionsTest, ParsesEveryFlagInBothForms) {
  auto options = Parse({"--duration=1m30s", "--pid", "12", "--pid=34", "--sampling-hz", "99",
                        "--export-interval=5", "--output-dir", "/tmp/x", "--log-level=debug",
                        "--stack-snapshot-bytes", "65536", "--kernel-symbols-recheck", "30s"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->duration, absl::Seconds(90));
  EXPECT_EQ(options->pids, (std::vector<uint32_t>{12, 34}));
  EXPECT_EQ(options->sampling_hz, 99);
  EXPECT_EQ(options->export_interval, absl::Seconds(5));
  EXPECT_EQ(options->kernel_symbols_recheck, absl::Seconds(30));
  EXPECT_EQ(Parse({"--kernel-symbols-recheck=1s"})->kernel_symbols_recheck, absl::Seconds(1));
  EXPECT_EQ(options->output_dir, "/tmp/x");
  EXPECT_EQ(options->log_level, spdlog::level::debug);
  EXPECT_EQ(options->stack_snapshot_bytes, 65536u);
  EXPECT_EQ(Parse({"--stack-snapshot-bytes=0"})->stack_snapshot_bytes, 0u);  // frame pointers only
}

TEST(OptionsTest, OtlpFlagsAreKeptForResolutionWithTheEnvironment) {
  auto options = Parse({"--otlp-endpoint=https://collector:4317", "--otlp-protocol",
                        "http/protobuf", "--otlp-header=a=1", "--otlp-header", "b=2",
                        "--otlp-insecure", "--otlp-ca-file=/ca.pem", "--otlp-client-cert=/c.pem",
                        "--otlp-client-key=/k.pem", "--otlp-timeout=2s"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->otlp.endpoint, "https://collector:4317");
  EXPECT_EQ(options->otlp.protocol, "http/protobuf");
  EXPECT_EQ(options->otlp.headers, (std::vector<std::string>{"a=1", "b=2"}));
  EXPECT_TRUE(options->otlp.insecure);
  EXPECT_EQ(options->otlp.ca_file, "/ca.pem");
  EXPECT_EQ(options->otlp.client_cert_file, "/c.pem");
  EXPECT_EQ(options->otlp.client_key_file, "/k.pem");
  EXPECT_EQ(options->otlp.timeout, absl::Seconds(2));
  EXPECT_FALSE(options->output_dir_given);
  EXPECT_TRUE(Parse({"--output-dir=/tmp/x"})->output_dir_given);
  EXPECT_FALSE(Parse({"--otlp-timeout=soon"}).ok());
}

TEST(OptionsTest, KubernetesFlagsAreKeptForResolutionWithTheEnvironment) {
  auto defaults = Parse({});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->kubernetes, Options::Kubernetes::kAuto);
  EXPECT_FALSE(defaults->kube.server.has_value());
  EXPECT_FALSE(defaults->kube.node_name.has_value());

  auto options =
      Parse({"--kubernetes", "--kube-api-server=https://127.0.0.1:6443", "--kube-token-file",
             "/run/token", "--kube-ca-file=", "--node-name", "node-7"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->kubernetes, Options::Kubernetes::kOn);
  EXPECT_EQ(options->kube.server, "https://127.0.0.1:6443");
  EXPECT_EQ(options->kube.token_file, "/run/token");
  EXPECT_EQ(options->kube.ca_file, "");  // given empty: the system roots, not the default file
  EXPECT_EQ(options->kube.node_name, "node-7");
  EXPECT_EQ(Parse({"--no-kubernetes"})->kubernetes, Options::Kubernetes::kOff);

  auto both = Parse({"--kubernetes", "--no-kubernetes"});
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().message().substr(0, 13), "--kubernetes:");
  auto empty_node = Parse({"--node-name="});
  ASSERT_FALSE(empty_node.ok());
  EXPECT_EQ(empty_node.status().message().substr(0, 12), "--node-name:");
  EXPECT_FALSE(Parse({"--kubernetes=yes"}).ok());  // a switch takes no value
}

TEST(OptionsTest, HelpAndVersion) {
  EXPECT_TRUE(Parse({"--help"})->help);
  EXPECT_TRUE(Parse({"-h"})->help);
  EXPECT_TRUE(Parse({"--version"})->version);
  EXPECT_NE(UsageText().find("--sampling-hz"), std::string::npos);
  for (const char* flag :
       {"--max-processes", "--max-symbol-cache-bytes", "--max-perf-map-bytes", "--max-pods",
        "--otlp-max-queue-bytes", "--max-cfi-cache-bytes", "--otlp-max-request-bytes",
        "--max-perf-map-total-bytes", "--max-mappings-per-process", "--max-mapping-bytes"}) {
    EXPECT_NE(UsageText().find(flag), std::string::npos) << flag;
  }
}

struct BadCase {
  std::vector<absl::string_view> args;
  absl::string_view starts_with;
};

TEST(OptionsTest, BadValuesNameTheFlag) {
  const std::vector<BadCase> cases = {
      {{"--sampling-hz=abc"}, "--sampling-hz: expected"},
      {{"--sampling-hz=0"}, "--sampling-hz: expected"},
      {{"--sampling-hz=1001"}, "--sampling-hz: expected"},
      {{"--pid=-3"}, "--pid: expected"},
      {{"--pid=0"}, "--pid: expected"},
      {{"--pid", "12abc"}, "--pid: expected"},
      {{"--duration=forever"}, "--duration: expected"},
      {{"--duration=-5s"}, "--duration: expected"},
      {{"--export-interval=100ms"}, "--export-interval: expected"},
      {{"--kernel-symbols-recheck=500ms"}, "--kernel-symbols-recheck: expected"},
      {{"--kernel-symbols-recheck=soon"}, "--kernel-symbols-recheck: expected"},
      {{"--kernel-symbols-recheck=-1m"}, "--kernel-symbols-recheck: expected"},
      {{"--log-level=loud"}, "--log-level: expected"},
      {{"--stack-snapshot-bytes=65537"}, "--stack-snapshot-bytes: expected"},
      {{"--stack-snapshot-bytes=-1"}, "--stack-snapshot-bytes: expected"},
      {{"--stack-snapshot-bytes=16K"}, "--stack-snapshot-bytes: expected"},
      {{"--output-dir="}, "--output-dir: expected"},
      {{"--max-processes=0"}, "--max-processes: expected"},
      {{"--max-processes=4194305"}, "--max-processes: expected"},
      {{"--max-processes=many"}, "--max-processes: expected"},
      {{"--max-symbol-cache-bytes=1KiB"}, "--max-symbol-cache-bytes: expected"},
      {{"--max-symbol-cache-bytes=2TiB"}, "--max-symbol-cache-bytes: expected"},
      {{"--max-symbol-cache-bytes=lots"}, "--max-symbol-cache-bytes: expected"},
      {{"--max-perf-map-bytes=100"}, "--max-perf-map-bytes: expected"},
      {{"--max-cfi-cache-bytes=1KiB"}, "--max-cfi-cache-bytes: expected"},
      {{"--max-perf-map-bytes=-1"}, "--max-perf-map-bytes: expected"},
      {{"--max-perf-map-total-bytes=1KiB"}, "--max-perf-map-total-bytes: expected"},
      {{"--max-perf-map-total-bytes=32MiB"}, "--max-perf-map-total-bytes: expected at least"},
      {{"--max-perf-map-bytes=1GiB"}, "--max-perf-map-total-bytes: expected at least"},
      {{"--max-mappings-per-process=15"}, "--max-mappings-per-process: expected"},
      {{"--max-mappings-per-process=lots"}, "--max-mappings-per-process: expected"},
      {{"--max-mapping-bytes=64KiB"}, "--max-mapping-bytes: expected"},
      {{"--otlp-max-queue-bytes=1KiB"}, "--otlp-max-queue-bytes: expected"},
      {{"--otlp-max-queue-bytes="}, "--otlp-max-queue-bytes: expected"},
      {{"--otlp-max-request-bytes=1KiB"}, "--otlp-max-request-bytes: expected"},
      {{"--otlp-max-request-bytes=big"}, "--otlp-max-request-bytes: expected"},
      {{"--max-pods=0"}, "--max-pods: expected"},
      {{"--max-pods=1e3"}, "--max-pods: expected"},
      {{"--max-pods"}, "--max-pods: missing value"},
      {{"--metrics-address=9464"}, "--metrics-address: expected"},
      {{"--metrics-address", "127.0.0.1:70000"}, "--metrics-address: expected"},
      {{"--metrics-address=::1:9464"}, "--metrics-address: expected"},
      {{"--metrics-address"}, "--metrics-address: missing value"},
      {{"--output-dir"}, "--output-dir: missing value"},
      {{"--debuginfod-urls=ftp://a.example"}, "--debuginfod-urls: expected"},
      {{"--debuginfod-urls", "127.0.0.1:8002"}, "--debuginfod-urls: expected"},
      {{"--debuginfod-cache-dir=cache"}, "--debuginfod-cache-dir: expected"},
      {{"--debuginfod-cache-dir="}, "--debuginfod-cache-dir: expected"},
      {{"--debuginfod-cache-bytes=1KiB"}, "--debuginfod-cache-bytes: expected"},
      {{"--debuginfod-timeout=100ms"}, "--debuginfod-timeout: expected"},
      {{"--debuginfod-max-fetches=0"}, "--debuginfod-max-fetches: expected"},
      {{"--debuginfod-max-fetches=17"}, "--debuginfod-max-fetches: expected"},
      {{"--help=yes"}, "--help: expected"},
      {{"--frobnicate"}, "unknown flag --frobnicate"},
      {{"stray"}, "unexpected argument 'stray'"},
  };
  for (const BadCase& c : cases) {
    auto options = Parse(c.args);
    ASSERT_FALSE(options.ok()) << c.args[0];
    std::string message(options.status().message());
    EXPECT_EQ(message.rfind(std::string(c.starts_with), 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

namespace flag_docs {

std::string CollapseSpaces(absl::string_view text) {
  return absl::StrJoin(absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty()), " ");
}

std::string StripBackticks(absl::string_view text) {
  return absl::StrReplaceAll(absl::StripAsciiWhitespace(text), {{"`", ""}});
}

const FlagDoc* Find(const std::vector<FlagDoc>& flags, absl::string_view name) {
  for (const FlagDoc& flag : flags) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

TEST(FlagDocsTest, EveryFlagParsedIsDocumentedAndNoOther) {
  std::vector<std::string> parsed = ParsedFlagNames();
  std::vector<std::string> documented;
  for (const FlagDoc& flag : DocumentedFlags()) documented.push_back(flag.name);
  std::sort(parsed.begin(), parsed.end());
  std::sort(documented.begin(), documented.end());
  EXPECT_EQ(parsed, documented);
}

TEST(FlagDocsTest, HelpShowsEveryFlagWithItsDefaultWithin100Columns) {
  std::string usage = UsageText();
  for (absl::string_view line : absl::StrSplit(usage, '\n')) {
    EXPECT_LE(line.size(), 100u) << line;
  }
  std::string flat = CollapseSpaces(usage);
  for (const FlagDoc& flag : DocumentedFlags()) {
    std::string entry = absl::StrCat("--", flag.name, flag.arg.empty() ? "" : " ", flag.arg, " ",
                                     CollapseSpaces(flag.help));
    if (!flag.default_value.empty()) absl::StrAppend(&entry, " (default ", flag.default_value, ")");
    EXPECT_THAT(flat, ::testing::HasSubstr(entry));
  }
  // The defaults are read from a default-constructed Options.
  EXPECT_THAT(flat, ::testing::HasSubstr("--sampling-hz N samples per second per CPU, 1 to 1000 "
                                         "(default 19)"));
  EXPECT_THAT(flat, ::testing::HasSubstr("(default 256MiB)"));
  EXPECT_THAT(flat, ::testing::HasSubstr("(default 10s)"));
}

// README.md's flag tables ("| flag | default | meaning |", "| limit | default | ... |" and the
// OTLP one, "| flag | environment ... | meaning |" with "(default X)" in its meaning) list every
// flag, each default as --help prints it.
TEST(FlagDocsTest, ReadmeTablesAgreeWithTheHelp) {
  std::ifstream in(EMBER_README);
  ASSERT_TRUE(in) << EMBER_README;
  std::stringstream readme;
  readme << in.rdbuf();
  const std::vector<FlagDoc> flags = DocumentedFlags();
  enum class Table { kNone, kDefaults, kLimits, kOtlp } table = Table::kNone;
  std::set<std::string> listed;
  size_t rows = 0;
  for (absl::string_view line : absl::StrSplit(readme.str(), '\n')) {
    if (!absl::StartsWith(line, "|")) {
      table = Table::kNone;
      continue;
    }
    std::vector<absl::string_view> cells = absl::StrSplit(line, '|');
    if (cells.size() < 4) continue;
    absl::string_view first = absl::StripAsciiWhitespace(cells[1]);
    absl::string_view second = absl::StripAsciiWhitespace(cells[2]);
    if (first == "flag" && second == "default") table = Table::kDefaults;
    if (first == "limit" && second == "default") table = Table::kLimits;
    if (first == "flag" && absl::StartsWith(second, "environment")) table = Table::kOtlp;
    if (table == Table::kNone || !absl::StartsWith(first, "`--")) continue;
    ++rows;
    std::vector<const FlagDoc*> row_flags;
    for (absl::string_view name : absl::StrSplit(first, '`', absl::SkipEmpty())) {
      if (!absl::ConsumePrefix(&name, "--")) continue;
      name = name.substr(0, name.find(' '));
      const FlagDoc* flag = Find(flags, name);
      EXPECT_NE(flag, nullptr) << "README lists --" << name << ", which --help does not";
      if (flag == nullptr) continue;
      listed.insert(flag->name);
      if (!flag->default_value.empty()) row_flags.push_back(flag);
    }
    std::string cell = StripBackticks(second);
    std::string meaning = StripBackticks(cells[cells.size() - 2]);
    for (const FlagDoc* flag : row_flags) {
      switch (table) {
        case Table::kDefaults:
          EXPECT_EQ(cell, flag->default_value) << "README's default of --" << flag->name;
          break;
        case Table::kLimits:
          EXPECT_TRUE(absl::StartsWith(cell, flag->default_value) &&
                      (cell.size() == flag->default_value.size() ||
                       !absl::ascii_isalnum(cell[flag->default_value.size()])))
              << "README's limit --" << flag->name << ": '" << cell << "', --help: '"
              << flag->default_value << "'";
          break;
        case Table::kOtlp:
          if (size_t at = meaning.find("(default "); at != std::string::npos) {
            EXPECT_EQ(meaning.substr(at), absl::StrCat("(default ", flag->default_value, ")"))
                << "README's default of --" << flag->name;
          }
          break;
        case Table::kNone:
          break;
      }
    }
    if (table == Table::kDefaults && row_flags.empty()) {
      EXPECT_EQ(cell, "") << "README gives a default --help does not: " << line;
    }
  }
  EXPECT_GT(rows, 40u) << "README's flag tables were not found";
  for (const FlagDoc& flag : flags) {
    EXPECT_TRUE(listed.count(flag.name)) << "README's flag tables lack --" << flag.name;
  }
}

}  // namespace flag_docs
}  // namespace
}  // namespace ember
