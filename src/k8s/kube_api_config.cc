// Resolving the API server, credentials and node name of the pod watcher.
#include "k8s/kube_api_config.h"

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ember {
namespace {

std::optional<std::string> NonEmpty(
    absl::FunctionRef<std::optional<std::string>(const char*)> getenv, const char* name) {
  std::optional<std::string> value = getenv(name);
  if (!value) return std::nullopt;
  std::string trimmed(absl::StripAsciiWhitespace(*value));
  if (trimmed.empty()) return std::nullopt;
  return trimmed;
}

absl::StatusOr<std::string> ServerFromEnvironment(
    absl::FunctionRef<std::optional<std::string>(const char*)> getenv) {
  std::optional<std::string> host = NonEmpty(getenv, "KUBERNETES_SERVICE_HOST");
  if (!host) {
    return absl::FailedPreconditionError(
        "Kubernetes: KUBERNETES_SERVICE_HOST is unset, so the agent is not running in a pod; pass "
        "--kube-api-server (e.g. https://10.96.0.1:443) to watch pods from outside the cluster");
  }
  std::optional<std::string> port = NonEmpty(getenv, "KUBERNETES_SERVICE_PORT");
  if (!port) {
    return absl::FailedPreconditionError(
        "Kubernetes: KUBERNETES_SERVICE_HOST is set but KUBERNETES_SERVICE_PORT is not; set both "
        "or pass --kube-api-server");
  }
  uint32_t number = 0;
  if (!absl::SimpleAtoi(*port, &number) || number == 0 || number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("Kubernetes: KUBERNETES_SERVICE_PORT '", *port,
                                                   "' is not a port number (1-65535)"));
  }
  // An IPv6 literal is bracketed in a URL (RFC 3986), as client-go's rest.InClusterConfig does.
  bool bracket = absl::StrContains(*host, ':') && !absl::StartsWith(*host, "[");
  return absl::StrCat("https://", bracket ? "[" : "", *host, bracket ? "]" : "", ":", number);
}

}  // namespace

absl::StatusOr<KubeApiConfig> ResolveKubeApiConfig(
    const KubeApiFlags& flags, absl::FunctionRef<std::optional<std::string>(const char*)> getenv) {
  KubeApiConfig config;
  if (flags.server) {
    config.server = *flags.server;
  } else {
    absl::StatusOr<std::string> server = ServerFromEnvironment(getenv);
    if (!server.ok()) return server.status();
    config.server = *std::move(server);
  }
  if (flags.token_file) config.token_file = *flags.token_file;
  if (flags.ca_file) config.ca_file = *flags.ca_file;
  if (flags.node_name) {
    config.node_name = *flags.node_name;
  } else if (std::optional<std::string> node = NonEmpty(getenv, "NODE_NAME")) {
    config.node_name = *node;
  } else {
    return absl::FailedPreconditionError(
        "Kubernetes: NODE_NAME is unset; give the agent's container the env var NODE_NAME from "
        "the downward API (valueFrom.fieldRef.fieldPath: spec.nodeName), or pass --node-name");
  }
  if (absl::Status valid = ValidateKubeApiConfig(config); !valid.ok()) return valid;
  return config;
}

absl::StatusOr<KubeApiConfig> InClusterConfig(
    absl::FunctionRef<std::optional<std::string>(const char*)> getenv) {
  return ResolveKubeApiConfig(KubeApiFlags{}, getenv);
}

absl::Status ValidateKubeApiConfig(const KubeApiConfig& config) {
  std::string scheme = absl::AsciiStrToLower(config.server.substr(0, config.server.find("://")));
  if (!absl::StrContains(config.server, "://") || (scheme != "https" && scheme != "http") ||
      config.server.size() <= scheme.size() + 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("Kubernetes: API server '", config.server,
                     "' is not an http(s) URL; expected e.g. https://10.96.0.1:443"));
  }
  if (absl::StrContains(config.server, "?") || absl::StrContains(config.server, "#")) {
    return absl::InvalidArgumentError(absl::StrCat("Kubernetes: API server '", config.server,
                                                   "' cannot hold a query or fragment"));
  }
  if (config.node_name.empty()) {
    return absl::InvalidArgumentError(
        "Kubernetes: the node name is empty; set NODE_NAME or pass --node-name");
  }
  if (config.connect_timeout <= absl::ZeroDuration() ||
      config.request_timeout <= absl::ZeroDuration() || config.watch_timeout < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        "Kubernetes: timeouts must be positive (and the watch timeout at least one second)");
  }
  if (config.backoff_min <= absl::ZeroDuration() || config.backoff_max < config.backoff_min) {
    return absl::InvalidArgumentError(
        "Kubernetes: the retry backoff needs 0 < backoff_min <= backoff_max");
  }
  if (config.list_page_size < 1) {
    return absl::InvalidArgumentError("Kubernetes: the LIST page size must be at least 1");
  }
  return absl::OkStatus();
}

}  // namespace ember
