// Command-line flags of ember-agent. A bad value is reported as one line naming the flag.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "k8s/kube_api_config.h"
#include "k8s/pod_watch_setup.h"
#include "otlp/exporter_config.h"
#include "spdlog/common.h"

namespace ember {

inline constexpr uint32_t kMaxStackSnapshotBytes = 65536;
inline constexpr uint32_t kMaxBpfUnwindRows = 1u << 24;

struct Options {
  absl::Duration duration = absl::ZeroDuration();  // zero: until SIGINT or SIGTERM
  std::vector<uint32_t> pids;                      // empty: every process
  int sampling_hz = 19;
  // See UsageText; the BPF scratch buffer bounds it (EMBER_MAX_SNAPSHOT_BYTES).
  uint32_t stack_snapshot_bytes = 16384;
  // Rows of the in-BPF stack walk's table (docs/bpf-unwinding.md); 0: no walk in BPF.
  uint32_t bpf_unwind_rows = 1u << 20;
  absl::Duration export_interval = absl::Seconds(10);
  // How often, at most, the kernel's symbols are read again while frames land above the kernel
  // image (BPF programs loaded since); /proc/modules changing rereads them at once regardless.
  absl::Duration kernel_symbols_recheck = absl::Minutes(5);
  std::string output_dir = "ember-profiles";
  // --output-dir was given: with an OTLP endpoint, local files are written only then.
  bool output_dir_given = false;
  spdlog::level::level_enum log_level = spdlog::level::info;
  ExporterFlags otlp;  // resolved with the environment by ResolveExporterConfig
  // Pod metadata from the Kubernetes API server; kAuto: on when KUBERNETES_SERVICE_HOST is set
  // (the agent runs in a pod).
  using Kubernetes = KubernetesMode;
  Kubernetes kubernetes = Kubernetes::kAuto;
  KubeApiFlags kube;  // resolved with the environment by ResolveKubeApiConfig
  // Where the status endpoint (/metrics, /healthz, /readyz) listens: checked by
  // ParseListenAddress; empty: no endpoint.
  std::string metrics_address = "127.0.0.1:9464";
  // Resource limits (README, "Bounded resources"); each has a metric that counts when it is hit.
  size_t max_processes = 4096;                          // process table entries
  size_t max_symbol_cache_bytes = size_t{256} << 20;    // ELF modules (3/4) and frames (1/4)
  size_t max_perf_map_bytes = size_t{64} << 20;         // per process
  size_t max_perf_map_total_bytes = size_t{256} << 20;  // every process's perf maps together
  size_t max_mappings_per_process = 4096;               // executable mappings kept per process
  size_t max_mapping_bytes = size_t{64} << 20;          // every process's kept mappings together
  size_t max_cfi_cache_bytes = size_t{64} << 20;        // call-frame rows of every file
  size_t otlp_max_queue_bytes = size_t{64} << 20;       // serialized requests waiting to be sent
  size_t otlp_max_request_bytes = size_t{4} << 20;      // one request, serialized
  size_t max_pods = 4096;                               // Kubernetes pods cached
  // Separate debug files fetched by build id when none is on the local disk: the servers
  // (space-separated URLs; nullopt: $DEBUGINFOD_URLS; empty: none), the cache they are kept in,
  // its size (also the largest file taken) and how long a fetch may take.
  std::optional<std::string> debuginfod_urls;
  std::string debuginfod_cache_dir = "/var/cache/ember/debuginfod";
  size_t debuginfod_cache_bytes = size_t{1} << 30;
  absl::Duration debuginfod_timeout = absl::Seconds(30);
  int debuginfod_max_fetches = 2;  // at once
  bool profile_self = false;       // sample the agent's own threads too
  bool help = false;
  bool version = false;
};

// "4096", "64KiB", "256MiB", "1GiB" (also K, M, G; binary multiples) into bytes; false when the
// text is none of those or overflows.
bool ParseByteSize(absl::string_view text, size_t* bytes);

// args excludes the program name. The error message starts with the flag it is about.
absl::StatusOr<Options> ParseOptions(std::span<const absl::string_view> args);

// The --help text: every flag with its help and its default, printed from a default-constructed
// Options.
std::string UsageText();

// One flag as --help shows it.
struct FlagDoc {
  std::string name;           // "sampling-hz"
  std::string arg;            // "N"; "" for a switch
  std::string help;           // without the default
  std::string default_value;  // as --help prints it after "default "; "" when none is shown
};

// Every flag --help lists, in its order.
std::vector<FlagDoc> DocumentedFlags();

// Every flag ParseOptions accepts ("-h" aside), by name.
std::vector<std::string> ParsedFlagNames();

}  // namespace ember
