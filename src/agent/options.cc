// Parser for ember-agent's flags: --flag=value and --flag value forms.
#include "agent/options.h"

#include <functional>
#include <limits>
#include <map>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "status/listen_address.h"

namespace ember {
namespace {

absl::Status FlagError(absl::string_view flag, absl::string_view expected, absl::string_view got) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, ": expected ", expected, ", got '", got, "'"));
}

// "30s", "1m30s", "500ms"; a bare number means seconds.
absl::Status ParseDurationFlag(absl::string_view flag, absl::string_view value, absl::Duration min,
                               absl::Duration* out) {
  constexpr absl::string_view kExpected = "a duration such as 30s, 5m or 1h30m";
  absl::Duration d;
  double seconds = 0;
  if (absl::SimpleAtod(value, &seconds)) {
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(value, &d)) {
    return FlagError(flag, kExpected, value);
  }
  if (d < min || d == absl::InfiniteDuration()) {
    return FlagError(flag, absl::StrCat(kExpected, " of at least ", absl::FormatDuration(min)),
                     value);
  }
  *out = d;
  return absl::OkStatus();
}

// A whole number from min to max, or a byte size from min to max.
absl::Status ParseCountFlag(absl::string_view flag, absl::string_view value, size_t min, size_t max,
                            size_t* out) {
  size_t n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < min || n > max) {
    return FlagError(flag, absl::StrCat("a whole number from ", min, " to ", max), value);
  }
  *out = n;
  return absl::OkStatus();
}

absl::Status ParseBytesFlag(absl::string_view flag, absl::string_view value, size_t min,
                            size_t* out) {
  constexpr size_t kMax = size_t{1} << 40;
  size_t n = 0;
  if (!ParseByteSize(value, &n) || n < min || n > kMax) {
    return FlagError(flag,
                     absl::StrCat("a size in bytes from ", min,
                                  " to 1TiB, such as 65536, 512KiB, 64MiB or 1GiB"),
                     value);
  }
  *out = n;
  return absl::OkStatus();
}

const std::map<absl::string_view, spdlog::level::level_enum>& LogLevels() {
  static const auto* levels = new std::map<absl::string_view, spdlog::level::level_enum>{
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},   {"off", spdlog::level::off}};
  return *levels;
}

absl::Status ParseLogLevel(absl::string_view value, spdlog::level::level_enum* out) {
  auto it = LogLevels().find(value);
  if (it == LogLevels().end()) {
    return FlagError("log-level", "one of trace, debug, info, warn, error, off", value);
  }
  *out = it->second;
  return absl::OkStatus();
}

}  // namespace

bool ParseByteSize(absl::string_view text, size_t* bytes) {
  size_t digits = 0;
  while (digits < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  uint64_t n = 0;
  if (digits == 0 || !absl::SimpleAtoi(text.substr(0, digits), &n)) return false;
  static const std::map<absl::string_view, int> kShifts = {
      {"", 0},    {"B", 0},    {"K", 10}, {"Ki", 10}, {"KiB", 10}, {"M", 20},
      {"Mi", 20}, {"MiB", 20}, {"G", 30}, {"Gi", 30}, {"GiB", 30}};
  auto shift = kShifts.find(text.substr(digits));
  if (shift == kShifts.end()) return false;
  if (n > (std::numeric_limits<uint64_t>::max() >> shift->second)) return false;
  n <<= shift->second;
  if (n > std::numeric_limits<size_t>::max()) return false;
  *bytes = static_cast<size_t>(n);
  return true;
}

namespace {

using Setter = std::function<absl::Status(absl::string_view)>;

struct FlagParsers {
  std::map<absl::string_view, Setter> with_value;
  std::map<absl::string_view, bool*> switches;
};

// The parsers write into `options`, and --kubernetes and --no-kubernetes into the two bools.
FlagParsers MakeFlagParsers(Options& options, bool* kubernetes_on, bool* kubernetes_off) {
  FlagParsers parsers;
  parsers.with_value = {
      {"duration",
       [&](absl::string_view v) {
         return ParseDurationFlag("duration", v, absl::Milliseconds(1), &options.duration);
       }},
      {"export-interval",
       [&](absl::string_view v) {
         return ParseDurationFlag("export-interval", v, absl::Seconds(1), &options.export_interval);
       }},
      {"kernel-symbols-recheck",
       [&](absl::string_view v) {
         return ParseDurationFlag("kernel-symbols-recheck", v, absl::Seconds(1),
                                  &options.kernel_symbols_recheck);
       }},
      {"pid",
       [&](absl::string_view v) {
         uint32_t pid = 0;
         if (!absl::SimpleAtoi(v, &pid) || pid == 0 || pid > (1u << 22)) {
           return FlagError("pid", "a process id (a positive whole number)", v);
         }
         options.pids.push_back(pid);
         return absl::OkStatus();
       }},
      {"sampling-hz",
       [&](absl::string_view v) {
         int hz = 0;
         if (!absl::SimpleAtoi(v, &hz) || hz < 1 || hz > 1000) {
           return FlagError("sampling-hz", "a whole number from 1 to 1000", v);
         }
         options.sampling_hz = hz;
         return absl::OkStatus();
       }},
      {"stack-snapshot-bytes",
       [&](absl::string_view v) {
         uint32_t bytes = 0;
         if (!absl::SimpleAtoi(v, &bytes) || bytes > kMaxStackSnapshotBytes) {
           return FlagError("stack-snapshot-bytes",
                            absl::StrCat("a whole number from 0 to ", kMaxStackSnapshotBytes), v);
         }
         options.stack_snapshot_bytes = bytes;
         return absl::OkStatus();
       }},
      {"bpf-unwind-rows",
       [&](absl::string_view v) {
         size_t rows = 0;
         RETURN_IF_ERROR(ParseCountFlag("bpf-unwind-rows", v, 0, kMaxBpfUnwindRows, &rows));
         options.bpf_unwind_rows = static_cast<uint32_t>(rows);
         return absl::OkStatus();
       }},
      {"output-dir",
       [&](absl::string_view v) {
         if (v.empty()) return FlagError("output-dir", "a directory path", v);
         options.output_dir = std::string(v);
         options.output_dir_given = true;
         return absl::OkStatus();
       }},
      {"log-level", [&](absl::string_view v) { return ParseLogLevel(v, &options.log_level); }},
      {"metrics-address",
       [&](absl::string_view v) {
         if (!v.empty()) {
           absl::StatusOr<ListenAddress> address = ParseListenAddress(v);
           // Its message reads "expected ..., got '...'", as FlagError's do.
           if (!address.ok()) {
             return absl::InvalidArgumentError(
                 absl::StrCat("--metrics-address: ", address.status().message()));
           }
         }
         options.metrics_address = std::string(v);
         return absl::OkStatus();
       }},
      {"max-processes",
       [&](absl::string_view v) {
         return ParseCountFlag("max-processes", v, 1, 1u << 22, &options.max_processes);
       }},
      {"max-symbol-cache-bytes",
       [&](absl::string_view v) {
         return ParseBytesFlag("max-symbol-cache-bytes", v, size_t{1} << 20,
                               &options.max_symbol_cache_bytes);
       }},
      {"max-cfi-cache-bytes",
       [&](absl::string_view v) {
         return ParseBytesFlag("max-cfi-cache-bytes", v, size_t{1} << 20,
                               &options.max_cfi_cache_bytes);
       }},
      {"max-perf-map-bytes",
       [&](absl::string_view v) {
         return ParseBytesFlag("max-perf-map-bytes", v, size_t{4} << 10,
                               &options.max_perf_map_bytes);
       }},
      {"max-perf-map-total-bytes",
       [&](absl::string_view v) {
         return ParseBytesFlag("max-perf-map-total-bytes", v, size_t{4} << 10,
                               &options.max_perf_map_total_bytes);
       }},
      {"max-mappings-per-process",
       [&](absl::string_view v) {
         return ParseCountFlag("max-mappings-per-process", v, 16, 1u << 20,
                               &options.max_mappings_per_process);
       }},
      {"max-mapping-bytes",
       [&](absl::string_view v) {
         return ParseBytesFlag("max-mapping-bytes", v, size_t{1} << 20, &options.max_mapping_bytes);
       }},
      {"otlp-max-queue-bytes",
       [&](absl::string_view v) {
         return ParseBytesFlag("otlp-max-queue-bytes", v, size_t{64} << 10,
                               &options.otlp_max_queue_bytes);
       }},
      {"otlp-max-request-bytes",
       [&](absl::string_view v) {
         return ParseBytesFlag("otlp-max-request-bytes", v, size_t{64} << 10,
                               &options.otlp_max_request_bytes);
       }},
      {"max-pods",
       [&](absl::string_view v) {
         return ParseCountFlag("max-pods", v, 1, 1u << 20, &options.max_pods);
       }},
      // The --otlp-* values are checked with the environment's by ResolveExporterConfig. A
      // header's value may be a secret, so none of them is echoed back here.
      {"otlp-endpoint",
       [&](absl::string_view v) {
         options.otlp.endpoint = std::string(v);
         return absl::OkStatus();
       }},
      {"otlp-protocol",
       [&](absl::string_view v) {
         options.otlp.protocol = std::string(v);
         return absl::OkStatus();
       }},
      {"otlp-header",
       [&](absl::string_view v) {
         options.otlp.headers.emplace_back(v);
         return absl::OkStatus();
       }},
      {"otlp-ca-file",
       [&](absl::string_view v) {
         options.otlp.ca_file = std::string(v);
         return absl::OkStatus();
       }},
      {"otlp-client-cert",
       [&](absl::string_view v) {
         options.otlp.client_cert_file = std::string(v);
         return absl::OkStatus();
       }},
      {"otlp-client-key",
       [&](absl::string_view v) {
         options.otlp.client_key_file = std::string(v);
         return absl::OkStatus();
       }},
      // Kubernetes: checked with the environment by ResolveKubeApiConfig.
      {"kube-api-server",
       [&](absl::string_view v) {
         options.kube.server = std::string(v);
         return absl::OkStatus();
       }},
      {"kube-token-file",
       [&](absl::string_view v) {
         options.kube.token_file = std::string(v);
         return absl::OkStatus();
       }},
      {"kube-ca-file",
       [&](absl::string_view v) {
         options.kube.ca_file = std::string(v);
         return absl::OkStatus();
       }},
      {"node-name",
       [&](absl::string_view v) {
         if (v.empty()) return FlagError("node-name", "a Kubernetes node name", v);
         options.kube.node_name = std::string(v);
         return absl::OkStatus();
       }},
      {"debuginfod-urls",
       [&](absl::string_view v) {
         for (absl::string_view url : absl::StrSplit(v, ' ', absl::SkipEmpty())) {
           if (!absl::StartsWith(url, "http://") && !absl::StartsWith(url, "https://")) {
             return FlagError("debuginfod-urls",
                              "space-separated http:// or https:// URLs, or \"\" for none", v);
           }
         }
         options.debuginfod_urls = std::string(v);
         return absl::OkStatus();
       }},
      {"debuginfod-cache-dir",
       [&](absl::string_view v) {
         if (v.empty() || v[0] != '/') {
           return FlagError("debuginfod-cache-dir", "an absolute directory path", v);
         }
         options.debuginfod_cache_dir = std::string(v);
         return absl::OkStatus();
       }},
      {"debuginfod-cache-bytes",
       [&](absl::string_view v) {
         return ParseBytesFlag("debuginfod-cache-bytes", v, size_t{1} << 20,
                               &options.debuginfod_cache_bytes);
       }},
      {"debuginfod-timeout",
       [&](absl::string_view v) {
         RETURN_IF_ERROR(ParseDurationFlag("debuginfod-timeout", v, absl::Seconds(1),
                                           &options.debuginfod_timeout));
         return absl::OkStatus();
       }},
      {"debuginfod-max-fetches",
       [&](absl::string_view v) {
         size_t n = 0;
         RETURN_IF_ERROR(ParseCountFlag("debuginfod-max-fetches", v, 1, 16, &n));
         options.debuginfod_max_fetches = static_cast<int>(n);
         return absl::OkStatus();
       }},
      {"otlp-timeout",
       [&](absl::string_view v) {
         absl::Duration timeout;
         RETURN_IF_ERROR(ParseDurationFlag("otlp-timeout", v, absl::Milliseconds(1), &timeout));
         options.otlp.timeout = timeout;
         return absl::OkStatus();
       }},
  };
  parsers.switches = {{"help", &options.help},
                      {"version", &options.version},
                      {"otlp-insecure", &options.otlp.insecure},
                      {"profile-self", &options.profile_self},
                      {"kubernetes", kubernetes_on},
                      {"no-kubernetes", kubernetes_off}};
  return parsers;
}

}  // namespace

absl::StatusOr<Options> ParseOptions(std::span<const absl::string_view> args) {
  Options options;
  bool kubernetes_on = false;
  bool kubernetes_off = false;
  const FlagParsers parsers = MakeFlagParsers(options, &kubernetes_on, &kubernetes_off);
  const auto& with_value = parsers.with_value;
  const auto& switches = parsers.switches;

  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "-h") arg = "--help";
    if (arg.substr(0, 2) != "--") {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (flags start with --; see --help)"));
    }
    absl::string_view name = arg.substr(2);
    std::optional<absl::string_view> value;
    if (size_t eq = name.find('='); eq != absl::string_view::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (auto it = switches.find(name); it != switches.end()) {
      if (value) return FlagError(name, "no value", *value);
      *it->second = true;
      continue;
    }
    auto it = with_value.find(name);
    if (it == with_value.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, ": missing value"));
      }
      value = args[++i];
    }
    if (absl::Status status = it->second(*value); !status.ok()) return status;
  }
  if (kubernetes_on && kubernetes_off) {
    return absl::InvalidArgumentError("--kubernetes: not with --no-kubernetes");
  }
  // One map may fill its own limit before the shared budget sheds it: a total below that would
  // shed every map at every read.
  if (options.max_perf_map_total_bytes < options.max_perf_map_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-perf-map-total-bytes: expected at least --max-perf-map-bytes (",
        options.max_perf_map_bytes, " bytes), got ", options.max_perf_map_total_bytes, " bytes"));
  }
  if (kubernetes_on) options.kubernetes = Options::Kubernetes::kOn;
  if (kubernetes_off) options.kubernetes = Options::Kubernetes::kOff;
  return options;
}

namespace {

// The text of a default: a count as a number, a size with the largest binary unit that divides it.
std::string Count(size_t n) { return absl::StrCat(n); }

std::string Bytes(size_t n) {
  for (auto [shift, unit] : {std::pair{30, "GiB"}, std::pair{20, "MiB"}, std::pair{10, "KiB"}}) {
    if (n != 0 && n % (size_t{1} << shift) == 0) return absl::StrCat(n >> shift, unit);
  }
  return absl::StrCat(n);
}

std::string Duration(absl::Duration d) { return absl::FormatDuration(d); }

// A flag's default, read from a default-constructed Options; "" shows none.
using DefaultText = std::string (*)(const Options&);

struct FlagSpec {
  absl::string_view name;
  absl::string_view arg;
  absl::string_view help;
  DefaultText default_text = nullptr;
};

struct FlagSection {
  absl::string_view heading;  // "" for none
  std::vector<FlagSpec> flags;
};

const std::vector<FlagSection>& FlagSections() {
  static const auto* sections = new std::vector<FlagSection>{
      {"Flags:",
       {
           {"duration", "D", "stop after D, e.g. 30s or 5m",
            [](const Options& o) {
              return o.duration == absl::ZeroDuration() ? std::string("until SIGINT/SIGTERM")
                                                        : Duration(o.duration);
            }},
           {"pid", "PID", "profile only this process; repeat for more",
            [](const Options& o) {
              return o.pids.empty() ? std::string("every process") : absl::StrJoin(o.pids, ",");
            }},
           {"profile-self", "",
            "sample the agent's own threads too, not only count their CPU in /metrics",
            [](const Options& o) { return std::string(o.profile_self ? "on" : "off"); }},
           {"sampling-hz", "N", "samples per second per CPU, 1 to 1000",
            [](const Options& o) { return Count(o.sampling_hz); }},
           {"stack-snapshot-bytes", "N",
            "user stack bytes copied per sample for DWARF unwinding of code without frame "
            "pointers, 0 to 65536; 0 walks frame pointers only",
            [](const Options& o) { return Count(o.stack_snapshot_bytes); }},
           {"bpf-unwind-rows", "N",
            "call-frame rows (16 bytes each, in kernel memory) the BPF program holds to walk user "
            "stacks without frame pointers itself, 0 to 16777216; 0 leaves every such walk to the "
            "agent, from the snapshot",
            [](const Options& o) { return Count(o.bpf_unwind_rows); }},
           {"export-interval", "D", "length of each profile, at least 1s",
            [](const Options& o) { return Duration(o.export_interval); }},
           {"kernel-symbols-recheck", "D",
            "how often, at most, kernel symbols are read again while frames land above the kernel "
            "image (BPF programs loaded since), at least 1s",
            [](const Options& o) { return Duration(o.kernel_symbols_recheck); }},
           {"output-dir", "DIR",
            "where pprof files and flamegraph.html go; with an OTLP endpoint, local files are "
            "written only when this is given",
            [](const Options& o) {
              return absl::StartsWith(o.output_dir, "/") ? o.output_dir
                                                         : absl::StrCat("./", o.output_dir);
            }},
           {"log-level", "L", "trace, debug, info, warn, error or off",
            [](const Options& o) {
              for (const auto& [name, level] : LogLevels()) {
                if (level == o.log_level) return std::string(name);
              }
              return std::string(spdlog::level::to_string_view(o.log_level).data());
            }},
           {"metrics-address", "A",
            "where /metrics (Prometheus), /healthz and /readyz listen: IPv4:port or [IPv6]:port; "
            "0.0.0.0:9464 for every address, \"\" for none",
            [](const Options& o) { return o.metrics_address; }},
       }},
      {"Limits (when one is reached, the least recently used entries are evicted and counted in "
       "/metrics):",
       {
           {"max-processes", "N", "processes tracked at once, 1 to 4194304",
            [](const Options& o) { return Count(o.max_processes); }},
           {"max-symbol-cache-bytes", "B",
            "symbols, DWARF line data and symbolized frames kept, at least 1MiB; sizes take KiB, "
            "MiB, GiB suffixes",
            [](const Options& o) { return Bytes(o.max_symbol_cache_bytes); }},
           {"max-cfi-cache-bytes", "B",
            "call-frame rows kept for DWARF unwinding, every file together, at least 1MiB",
            [](const Options& o) { return Bytes(o.max_cfi_cache_bytes); }},
           {"max-perf-map-bytes", "B", "JIT names read from one process's perf map, at least 4KiB",
            [](const Options& o) { return Bytes(o.max_perf_map_bytes); }},
           {"max-perf-map-total-bytes", "B",
            "JIT names read from every process's perf map together, at least "
            "--max-perf-map-bytes; the largest maps lose their oldest half first",
            [](const Options& o) { return Bytes(o.max_perf_map_total_bytes); }},
           {"max-mappings-per-process", "N",
            "executable mappings kept per process, 16 to 1048576: the program's own, then other "
            "files', then anonymous ones",
            [](const Options& o) { return Count(o.max_mappings_per_process); }},
           {"max-mapping-bytes", "B",
            "executable mappings kept, every process together, at least 1MiB; the least recently "
            "sampled processes' go first, read again when sampled",
            [](const Options& o) { return Bytes(o.max_mapping_bytes); }},
           {"max-pods", "N", "Kubernetes pods cached, 1 to 1048576",
            [](const Options& o) { return Count(o.max_pods); }},
           {"otlp-max-queue-bytes", "B", "intervals waiting for the OTLP endpoint, at least 64KiB",
            [](const Options& o) { return Bytes(o.otlp_max_queue_bytes); }},
           {"otlp-max-request-bytes", "B",
            "largest OTLP request: a bigger interval goes as several, by process, at least 64KiB; "
            "4MiB is a Collector's and Pyroscope's gRPC limit",
            [](const Options& o) { return Bytes(o.otlp_max_request_bytes); }},
       }},
      {"Separate debug files from debuginfod servers (for binaries without a local debug file):",
       {
           {"debuginfod-urls", "U",
            "space-separated server URLs to ask by build id (\"\" for none). Fetched on worker "
            "threads: frames are named once it arrives",
            [](const Options& o) {
              return o.debuginfod_urls ? *o.debuginfod_urls : std::string("$DEBUGINFOD_URLS");
            }},
           {"debuginfod-cache-dir", "DIR", "where fetched files are kept",
            [](const Options& o) { return o.debuginfod_cache_dir; }},
           {"debuginfod-cache-bytes", "B",
            "files kept there, least recently used deleted first; also the largest file taken, at "
            "least 1MiB",
            [](const Options& o) { return Bytes(o.debuginfod_cache_bytes); }},
           {"debuginfod-timeout", "D",
            "no first bytes within D, or no whole file within twice D, gives up; at least 1s",
            [](const Options& o) { return Duration(o.debuginfod_timeout); }},
           {"debuginfod-max-fetches", "N", "fetches at once, 1 to 16",
            [](const Options& o) { return Count(o.debuginfod_max_fetches); }},
       }},
      {"OTLP export (each also read from the standard OTEL_EXPORTER_OTLP_[PROFILES_]* variables; "
       "flags win):",
       {
           {"otlp-endpoint", "URL",
            "send every interval to this OpenTelemetry Collector or Pyroscope: gRPC host:port or "
            "https://host:port",
            [](const Options& o) {
              return o.otlp.endpoint ? *o.otlp.endpoint : std::string("none: no export");
            }},
           {"otlp-protocol", "P", "grpc, or http/protobuf posting to /v1development/profiles",
            [](const Options& o) {
              if (o.otlp.protocol) return *o.otlp.protocol;
              return std::string(
                  ExporterConfig{}.protocol == OtlpProtocol::kGrpc ? "grpc" : "http/protobuf");
            }},
           {"otlp-header", "K=V", "a request header (repeatable; values are never logged)"},
           {"otlp-insecure", "", "plaintext instead of TLS"},
           {"otlp-ca-file", "F",
            "PEM roots to verify the endpoint with instead of the system ones"},
           {"otlp-client-cert", "F",
            "client certificate for mutual TLS (with --otlp-client-key F)"},
           {"otlp-client-key", "F", "the client certificate's key (with --otlp-client-cert F)"},
           {"otlp-timeout", "D", "deadline of each request",
            [](const Options& o) {
              return Duration(o.otlp.timeout.value_or(ExporterConfig{}.timeout));
            }},
       }},
      {"Kubernetes pod metadata (k8s.pod.name, k8s.deployment.name, service.name, ... of each "
       "container):",
       {
           {"kubernetes", "",
            "watch this node's pods through the API server (a pod is told by "
            "KUBERNETES_SERVICE_HOST)",
            [](const Options& o) {
              switch (o.kubernetes) {
                case Options::Kubernetes::kOn:
                  return std::string("on");
                case Options::Kubernetes::kOff:
                  return std::string("off");
                case Options::Kubernetes::kAuto:
                  break;
              }
              return std::string("on in a pod");
            }},
           {"no-kubernetes", "", "do not, even in a pod"},
           {"node-name", "N", "the node whose pods to watch",
            [](const Options& o) { return o.kube.node_name.value_or("$NODE_NAME"); }},
           {"kube-api-server", "URL", "the API server",
            [](const Options& o) {
              return o.kube.server.value_or(
                  "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT");
            }},
           {"kube-token-file", "F", "bearer token, re-read for every request; \"\" for none",
            [](const Options& o) {
              return o.kube.token_file.value_or("the pod's service-account token");
            }},
           {"kube-ca-file", "F", "PEM roots for the API server; \"\" for the system roots",
            [](const Options& o) {
              return o.kube.ca_file.value_or("the service account's ca.crt");
            }},
       }},
      {"",
       {
           {"help", "", "show this text"},
           {"version", "", "print the version"},
       }},
  };
  return *sections;
}

FlagDoc Document(const FlagSpec& spec, const Options& defaults) {
  return {.name = std::string(spec.name),
          .arg = std::string(spec.arg),
          .help = std::string(spec.help),
          .default_value = spec.default_text ? spec.default_text(defaults) : ""};
}

// "  --name ARG" in a 24-column left side, the help and its default wrapped to 100 columns.
void AppendFlag(const FlagDoc& flag, std::string* out) {
  constexpr size_t kIndent = 24;
  constexpr size_t kWidth = 100;
  std::string left = absl::StrCat("  --", flag.name, flag.arg.empty() ? "" : " ", flag.arg);
  std::string text = flag.help;
  if (!flag.default_value.empty()) absl::StrAppend(&text, " (default ", flag.default_value, ")");
  std::string line = left;
  if (line.size() >= kIndent) {
    absl::StrAppend(out, line, "\n");
    line.clear();
  }
  line.resize(kIndent, ' ');
  bool line_empty = true;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line_empty && line.size() + 1 + word.size() > kWidth) {
      absl::StrAppend(out, line, "\n");
      line.assign(kIndent, ' ');
      line_empty = true;
    }
    absl::StrAppend(&line, line_empty ? "" : " ", word);
    line_empty = false;
  }
  absl::StrAppend(out, line, "\n");
}

}  // namespace

std::vector<FlagDoc> DocumentedFlags() {
  const Options defaults;
  std::vector<FlagDoc> flags;
  for (const FlagSection& section : FlagSections()) {
    for (const FlagSpec& spec : section.flags) flags.push_back(Document(spec, defaults));
  }
  return flags;
}

std::vector<std::string> ParsedFlagNames() {
  Options options;
  bool on = false;
  bool off = false;
  FlagParsers parsers = MakeFlagParsers(options, &on, &off);
  std::vector<std::string> names;
  for (const auto& [name, setter] : parsers.with_value) names.emplace_back(name);
  for (const auto& [name, target] : parsers.switches) names.emplace_back(name);
  return names;
}

std::string UsageText() {
  std::string text = R"(Usage: ember-agent [flags]

Samples the CPU stacks of every process on this machine (or only --pid ones) with eBPF and writes
one pprof file per export interval, plus a flame graph of the whole run, to --output-dir.
Needs root: BPF and perf events, and reading every process's maps, binaries and kernel symbols.
)";
  const Options defaults;
  for (const FlagSection& section : FlagSections()) {
    absl::StrAppend(&text, "\n", section.heading, section.heading.empty() ? "" : "\n");
    for (const FlagSpec& spec : section.flags) AppendFlag(Document(spec, defaults), &text);
  }
  return text;
}

}  // namespace ember
