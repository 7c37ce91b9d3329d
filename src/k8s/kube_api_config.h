// Where the pod watcher finds the Kubernetes API server and how it authenticates: resolved once at
// start-up from the agent's --kube-* flags and the in-cluster environment (the service account
// files and KUBERNETES_SERVICE_HOST/PORT that every pod gets; NODE_NAME from the downward API).
#pragma once

#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ember {

inline constexpr char kServiceAccountTokenFile[] =
    "/var/run/secrets/kubernetes.io/serviceaccount/token";
inline constexpr char kServiceAccountCaFile[] =
    "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

struct KubeApiConfig {
  // Base URL without a trailing path, e.g. "https://10.96.0.1:443" or "https://[fd00::1]:443".
  // http:// only when asked for explicitly (kubectl proxy on loopback).
  std::string server;
  // Read before every request: projected service account tokens rotate. "" sends no
  // Authorization header (kubectl proxy).
  std::string token_file = kServiceAccountTokenFile;
  // PEM roots the server certificate must chain to; "" uses the system roots. TLS is always
  // verified for https.
  std::string ca_file = kServiceAccountCaFile;
  // Only the pods scheduled here are listed and watched (fieldSelector spec.nodeName).
  std::string node_name;

  absl::Duration connect_timeout = absl::Seconds(10);
  // One LIST page, or any answer that is not a watch stream.
  absl::Duration request_timeout = absl::Seconds(60);
  // Asked of the server as timeoutSeconds (plus up to a quarter of jitter, so that the agents of
  // a cluster do not re-watch in step); the client gives up after this plus request_timeout.
  absl::Duration watch_timeout = absl::Seconds(300);
  // Retries after a failure wait between half and all of a delay that starts at backoff_min and
  // doubles up to backoff_max; a success resets it.
  absl::Duration backoff_min = absl::Milliseconds(500);
  absl::Duration backoff_max = absl::Seconds(30);
  int list_page_size = 500;  // LIST limit=; pages are followed with metadata.continue
};

// The agent's flags; each one set wins over the environment.
struct KubeApiFlags {
  std::optional<std::string> server = {};      // --kube-api-server
  std::optional<std::string> token_file = {};  // --kube-token-file ("" for none)
  std::optional<std::string> ca_file = {};     // --kube-ca-file ("" for the system roots)
  std::optional<std::string> node_name = {};   // --node-name
};

// Resolves the flags over the environment: the server from KUBERNETES_SERVICE_HOST and
// KUBERNETES_SERVICE_PORT (https, IPv6 hosts bracketed), the node from NODE_NAME, the service
// account token and CA files at their standard paths. Errors are one line naming the variable or
// flag to set. Does not touch the files: PodWatcher::Create checks them.
absl::StatusOr<KubeApiConfig> ResolveKubeApiConfig(
    const KubeApiFlags& flags, absl::FunctionRef<std::optional<std::string>(const char*)> getenv);

// The configuration of an agent running in a pod, from the environment only.
absl::StatusOr<KubeApiConfig> InClusterConfig(
    absl::FunctionRef<std::optional<std::string>(const char*)> getenv);

// Checks what a caller may have set by hand: an http(s) server URL, a node name, positive
// durations, backoff_min <= backoff_max, a page size of at least 1.
absl::Status ValidateKubeApiConfig(const KubeApiConfig& config);

}  // namespace ember
