// The list-then-watch loop of the pod watcher (the client-go reflector's protocol, for one
// resource and one node): requests, event lines, backoff and the one-line-per-change log.
#include "k8s/pod_watcher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/log_safe.h"
#include "k8s/kube_http.h"
#include "nlohmann/json.hpp"

namespace ember {
namespace {

using json = nlohmann::json;

// A LIST page of 500 pods is a few MiB; far more is a server gone wrong.
constexpr size_t kMaxListBody = 256 << 20;
// One watch event holds one Pod; etcd refuses objects over 1.5 MiB.
constexpr size_t kMaxWatchLine = 16 << 20;
// continue tokens that never end are a server gone wrong too.
constexpr int kMaxListPages = 10000;
// A watch that the server ends this quickly without a single event is waited out like a failure,
// so a server that closes every watch at once is not hammered.
constexpr absl::Duration kShortWatch = absl::Seconds(1);

// json::value throws when the field has another type: a server's odd answer must not.
std::string StringField(const json& object, const char* key) {
  if (!object.is_object()) return "";
  auto found = object.find(key);
  return found != object.end() && found->is_string() ? found->get<std::string>() : "";
}

std::string StringAt(const json& object, const char* outer, const char* inner) {
  if (!object.is_object()) return "";
  auto found = object.find(outer);
  if (found == object.end() || !found->is_object()) return "";
  auto value = found->find(inner);
  if (value == found->end() || !value->is_string()) return "";
  return value->get<std::string>();
}

// "HTTP 403: pods is forbidden: ..." from a non-2xx answer (its body is a v1 Status, usually).
std::string DescribeStatus(const KubeHttpResult& result) {
  std::string text = absl::StrCat("HTTP ", result.status);
  json status = json::parse(result.error_body, nullptr, /*allow_exceptions=*/false);
  if (std::string message = StringField(status, "message"); !message.empty()) {
    absl::StrAppend(&text, ": ", message);
  } else if (!result.error_body.empty()) {
    std::string body(absl::StripAsciiWhitespace(result.error_body.substr(0, 200)));
    bool printable = std::all_of(body.begin(), body.end(), [](char c) {
      return absl::ascii_isprint(c) || absl::ascii_isspace(c);
    });
    if (printable && !body.empty()) absl::StrAppend(&text, ": ", body);
  }
  return text;
}

}  // namespace

const char* KubeWatchErrorName(KubeWatchError kind) {
  switch (kind) {
    case KubeWatchError::kToken:
      return "token";
    case KubeWatchError::kTransport:
      return "transport";
    case KubeWatchError::kUnauthorized:
      return "unauthorized";
    case KubeWatchError::kHttp:
      return "http";
    case KubeWatchError::kBadList:
      return "bad_list";
    case KubeWatchError::kWatchError:
      return "watch_error";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<PodWatcher>> PodWatcher::Create(const KubeApiConfig& config,
                                                               PodIndex* index) {
  if (index == nullptr) return absl::InvalidArgumentError("PodWatcher: no index");
  if (absl::Status valid = ValidateKubeApiConfig(config); !valid.ok()) return valid;
  if (!config.token_file.empty()) {
    if (absl::StatusOr<std::string> token = ReadBearerToken(config.token_file); !token.ok()) {
      return token.status();
    }
  }
  absl::StatusOr<std::unique_ptr<KubeHttpClient>> http = KubeHttpClient::Create(config);
  if (!http.ok()) return http.status();
  return std::unique_ptr<PodWatcher>(new PodWatcher(config, index, *std::move(http)));
}

PodWatcher::PodWatcher(const KubeApiConfig& config, PodIndex* index,
                       std::unique_ptr<KubeHttpClient> http)
    : config_(config),
      index_(index),
      http_(std::move(http)),
      backoff_(config.backoff_min),
      random_(std::random_device{}()) {}

PodWatcher::~PodWatcher() { Stop(); }

void PodWatcher::Start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] { Run(); });
}

void PodWatcher::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  http_->Cancel();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

PodWatcherStats PodWatcher::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

bool PodWatcher::synced() const {
  std::lock_guard lock(mu_);
  return stats_.synced;
}

std::string PodWatcher::FieldSelector() const {
  return QueryEscape(absl::StrCat("spec.nodeName=", config_.node_name));
}

void PodWatcher::Run() {
  Step step = Step::kList;
  while (step != Step::kStop) {
    {
      std::lock_guard lock(mu_);
      if (stop_) break;
    }
    step = step == Step::kList ? List() : Watch();
  }
  spdlog::debug("Kubernetes: pod watcher of node {} stopped", config_.node_name);
}

bool PodWatcher::Backoff() {
  absl::Duration wait = backoff_ * std::uniform_real_distribution<double>(0.5, 1.0)(random_);
  backoff_ = std::min(backoff_ * 2, config_.backoff_max);
  std::unique_lock lock(mu_);
  return !wake_.wait_for(lock, absl::ToChronoNanoseconds(wait), [this] { return stop_; });
}

void PodWatcher::Succeeded() {
  backoff_ = config_.backoff_min;
  if (!logged_failure_.empty()) {
    spdlog::info("Kubernetes: the API server answers again; watching the pods of node {}",
                 config_.node_name);
    logged_failure_.clear();
  }
}

PodWatcher::Step PodWatcher::Fail(KubeWatchError kind, const std::string& what,
                                  const std::string& detail, long code, Step retry) {
  std::string message = absl::StrCat("Kubernetes: ", what, " failed: ", detail);
  {
    std::lock_guard lock(mu_);
    ++stats_.errors[static_cast<size_t>(kind)];
    stats_.last_error = message;
    stats_.last_error_time = absl::Now();
  }
  // The same failure again (same kind, request and status or curl code) is not news.
  std::string state = absl::StrCat(KubeWatchErrorName(kind), "/", what, "/", code);
  if (state != logged_failure_) {
    spdlog::warn("{}; keeping the last known pods and retrying with backoff (up to {})", message,
                 absl::FormatDuration(config_.backoff_max));
    logged_failure_ = std::move(state);
  } else {
    spdlog::debug("{}", message);
  }
  return Backoff() ? retry : Step::kStop;
}

PodWatcher::Step PodWatcher::List() {
  std::vector<PodInfo> pods;
  std::string next_page;
  std::string list_version;
  uint64_t rejected = 0;
  int pages = 0;
  const std::string what = absl::StrCat("LIST pods of node ", config_.node_name);
  do {
    std::string token;
    if (!config_.token_file.empty()) {
      absl::StatusOr<std::string> read = ReadBearerToken(config_.token_file);
      if (!read.ok()) {
        return Fail(KubeWatchError::kToken, what, std::string(read.status().message()), 0,
                    Step::kList);
      }
      token = *std::move(read);
    }
    std::string path = absl::StrCat("/api/v1/pods?fieldSelector=", FieldSelector(),
                                    "&limit=", config_.list_page_size);
    if (!next_page.empty()) absl::StrAppend(&path, "&continue=", QueryEscape(next_page));
    std::string body;
    KubeHttpResult result =
        http_->Get(path, token, config_.request_timeout, [&body](absl::string_view data) {
          if (body.size() + data.size() > kMaxListBody) return false;
          body.append(data.data(), data.size());
          return true;
        });
    token.clear();
    switch (result.outcome) {
      case KubeHttpResult::Outcome::kCancelled:
        return Step::kStop;
      case KubeHttpResult::Outcome::kAborted:
        return Fail(KubeWatchError::kBadList, what,
                    absl::StrCat("a page larger than ", kMaxListBody >> 20, " MiB"), 1,
                    Step::kList);
      case KubeHttpResult::Outcome::kTransportError:
        return Fail(KubeWatchError::kTransport, what, result.error, result.curl_code, Step::kList);
      case KubeHttpResult::Outcome::kCompleted:
        break;
    }
    if (result.status == 401 || result.status == 403) {
      return Fail(KubeWatchError::kUnauthorized, what, DescribeStatus(result), result.status,
                  Step::kList);
    }
    if (result.status < 200 || result.status >= 300) {
      // 410 too: an expired continue token. The list starts over after the backoff.
      return Fail(KubeWatchError::kHttp, what, DescribeStatus(result), result.status, Step::kList);
    }
    json list = json::parse(body, nullptr, /*allow_exceptions=*/false);
    body.clear();
    const json* items = nullptr;
    if (list.is_object()) {
      auto found = list.find("items");
      if (found != list.end() && (found->is_array() || found->is_null())) items = &*found;
    }
    std::string version = StringAt(list, "metadata", "resourceVersion");
    if (items == nullptr || version.empty()) {
      return Fail(KubeWatchError::kBadList, what,
                  list.is_discarded()
                      ? "the body is not JSON"
                      : "the body is not a PodList (items and metadata.resourceVersion)",
                  list.is_discarded() ? 2 : 3, Step::kList);
    }
    if (items->is_array()) {
      for (const json& item : *items) {
        absl::StatusOr<PodInfo> pod = ParsePod(item);
        if (pod.ok()) {
          pods.push_back(*std::move(pod));
        } else {
          ++rejected;
          spdlog::debug("Kubernetes: skipping a listed pod: {}", LogSafe(pod.status().message()));
        }
      }
    }
    list_version = std::move(version);
    next_page = StringAt(list, "metadata", "continue");
    if (++pages > kMaxListPages) {
      return Fail(KubeWatchError::kBadList, what,
                  absl::StrCat("more than ", kMaxListPages, " pages"), 4, Step::kList);
    }
  } while (!next_page.empty());

  size_t count = pods.size();
  index_->Replace(std::move(pods));
  resource_version_ = list_version;
  bool first;
  {
    std::lock_guard lock(mu_);
    first = !stats_.synced;
    ++stats_.lists;
    if (!first) ++stats_.relists;
    stats_.synced = true;
    stats_.rejected_pods += rejected;
    stats_.resource_version = list_version;
  }
  spdlog::info("Kubernetes: {} {} pods of node {} (resourceVersion {}{})",
               first ? "listed" : "relisted", count, config_.node_name, list_version,
               rejected > 0 ? absl::StrCat(", ", rejected, " unreadable ones skipped") : "");
  Succeeded();
  return Step::kWatch;
}

PodWatcher::Step PodWatcher::Watch() {
  const std::string what = absl::StrCat("WATCH pods of node ", config_.node_name);
  std::string token;
  if (!config_.token_file.empty()) {
    absl::StatusOr<std::string> read = ReadBearerToken(config_.token_file);
    if (!read.ok()) {
      return Fail(KubeWatchError::kToken, what, std::string(read.status().message()), 0,
                  Step::kWatch);
    }
    token = *std::move(read);
  }
  // Up to a quarter more than asked, so the agents of a cluster drift apart.
  int64_t timeout_seconds =
      static_cast<int64_t>(absl::ToDoubleSeconds(config_.watch_timeout) *
                           std::uniform_real_distribution<double>(1.0, 1.25)(random_));
  std::string path = absl::StrCat(
      "/api/v1/pods?watch=1&fieldSelector=", FieldSelector(),
      "&resourceVersion=", QueryEscape(resource_version_),
      "&allowWatchBookmarks=true&timeoutSeconds=", std::max<int64_t>(1, timeout_seconds));

  line_.clear();
  stream_events_ = 0;
  stream_malformed_logged_ = false;
  watch_failure_.clear();
  bool line_too_long = false;
  absl::Time start = absl::Now();
  KubeHttpResult result = http_->Get(
      path, token, absl::Seconds(timeout_seconds) + config_.request_timeout,
      [&](absl::string_view data) {
        while (!data.empty()) {
          size_t newline = data.find('\n');
          if (newline == absl::string_view::npos) {
            if (line_.size() + data.size() > kMaxWatchLine) {
              line_too_long = true;
              return false;
            }
            line_.append(data.data(), data.size());
            return true;
          }
          line_.append(data.data(), newline);
          data.remove_prefix(newline + 1);
          std::string line = std::move(line_);
          line_.clear();
          if (!OnWatchLine(line)) return false;
        }
        return true;
      },
      [this](long status) {
        if (status < 200 || status >= 300) return;
        std::lock_guard lock(mu_);
        stats_.watching = true;
        ++stats_.watches;
      });
  token.clear();
  {
    std::lock_guard lock(mu_);
    stats_.watching = false;
  }
  switch (result.outcome) {
    case KubeHttpResult::Outcome::kCancelled:
      return Step::kStop;
    case KubeHttpResult::Outcome::kAborted:
      if (line_too_long) {
        return Fail(KubeWatchError::kWatchError, what,
                    absl::StrCat("an event line longer than ", kMaxWatchLine >> 20, " MiB"), 1,
                    Step::kWatch);
      }
      if (!watch_failure_.empty()) {
        return Fail(KubeWatchError::kWatchError, what, watch_failure_, 0, Step::kWatch);
      }
      return Relist(start);  // the resourceVersion expired
    case KubeHttpResult::Outcome::kTransportError:
      return Fail(KubeWatchError::kTransport, what,
                  stream_events_ > 0 || result.status == 200
                      ? absl::StrCat("the stream broke: ", result.error)
                      : result.error,
                  result.curl_code, Step::kWatch);
    case KubeHttpResult::Outcome::kCompleted:
      break;
  }
  if (result.status == 410) {
    {
      std::lock_guard lock(mu_);
      ++stats_.expired;
    }
    spdlog::info("Kubernetes: resourceVersion {} has expired (HTTP 410); relisting",
                 LogSafe(resource_version_));
    return Relist(start);
  }
  if (result.status == 401 || result.status == 403) {
    return Fail(KubeWatchError::kUnauthorized, what, DescribeStatus(result), result.status,
                Step::kWatch);
  }
  if (result.status < 200 || result.status >= 300) {
    return Fail(KubeWatchError::kHttp, what, DescribeStatus(result), result.status, Step::kWatch);
  }
  // The server ended the stream (its timeoutSeconds): a last line may lack its newline.
  std::string rest(absl::StripAsciiWhitespace(line_));
  line_.clear();
  if (!rest.empty() && !OnWatchLine(rest)) {
    if (!watch_failure_.empty()) {
      return Fail(KubeWatchError::kWatchError, what, watch_failure_, 0, Step::kWatch);
    }
    return Relist(start);
  }
  {
    std::lock_guard lock(mu_);
    ++stats_.watch_restarts;
  }
  if (stream_events_ == 0 && absl::Now() - start < kShortWatch) {
    spdlog::debug("Kubernetes: the watch ended at once; waiting before the next one");
    return Backoff() ? Step::kWatch : Step::kStop;
  }
  Succeeded();
  return Step::kWatch;
}

PodWatcher::Step PodWatcher::Relist(absl::Time watch_start) {
  // A fresh list's version expiring at once, again and again, is a server gone wrong: not a
  // reason to relist in a tight loop.
  if (stream_events_ == 0 && absl::Now() - watch_start < kShortWatch) {
    return Backoff() ? Step::kList : Step::kStop;
  }
  return Step::kList;
}

bool PodWatcher::OnWatchLine(absl::string_view line) {
  line = absl::StripAsciiWhitespace(line);
  if (line.empty()) return true;
  json event = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  std::string type;
  const json* object = nullptr;
  if (event.is_object()) {
    auto found_type = event.find("type");
    auto found_object = event.find("object");
    if (found_type != event.end() && found_type->is_string() && found_object != event.end() &&
        found_object->is_object()) {
      type = found_type->get<std::string>();
      object = &*found_object;
    }
  }
  std::string version = object != nullptr ? StringAt(*object, "metadata", "resourceVersion") : "";
  bool known = type == "ADDED" || type == "MODIFIED" || type == "DELETED" ||
               (type == "BOOKMARK" && !version.empty()) || type == "ERROR";
  if (object == nullptr || !known) {
    bool log;
    {
      std::lock_guard lock(mu_);
      ++stats_.malformed_events;
      log = !stream_malformed_logged_;
    }
    stream_malformed_logged_ = true;
    if (log) {
      spdlog::warn("Kubernetes: skipping a watch line that is not a pod event: '{}'",
                   absl::CEscape(line.substr(0, 120)));
    }
    return true;
  }

  if (type == "ERROR") {
    int64_t code = 0;
    if (auto found = object->find("code"); found != object->end() && found->is_number_integer()) {
      code = found->get<int64_t>();
    }
    std::string reason = StringField(*object, "reason");
    std::string message = StringField(*object, "message");
    std::lock_guard lock(mu_);
    ++stats_.error_events;
    if (code == 410 || reason == "Expired" || reason == "Gone") {
      ++stats_.expired;
      spdlog::info("Kubernetes: resourceVersion {} has expired ({}); relisting",
                   LogSafe(resource_version_), message.empty() ? "410 Gone" : LogSafe(message));
    } else {
      std::string text = message.empty() ? reason : message;
      watch_failure_ = absl::StrCat("an ERROR event", code != 0 ? absl::StrCat(" ", code) : "",
                                    text.empty() ? " without a message" : absl::StrCat(": ", text));
    }
    return false;
  }

  uint64_t rejected = 0;
  if (type == "ADDED" || type == "MODIFIED") {
    absl::StatusOr<PodInfo> pod = ParsePod(*object);
    if (pod.ok()) {
      index_->Upsert(*std::move(pod));
    } else {
      rejected = 1;
      spdlog::debug("Kubernetes: skipping a watched pod: {}", LogSafe(pod.status().message()));
    }
  } else if (type == "DELETED") {
    std::string uid = StringAt(*object, "metadata", "uid");
    if (!uid.empty()) {
      index_->Remove(uid);
    } else {
      rejected = 1;
    }
  }
  if (!version.empty()) resource_version_ = version;
  {
    std::lock_guard lock(mu_);
    if (type == "ADDED") ++stats_.added;
    if (type == "MODIFIED") ++stats_.modified;
    if (type == "DELETED") ++stats_.deleted;
    if (type == "BOOKMARK") ++stats_.bookmarks;
    stats_.rejected_pods += rejected;
    stats_.resource_version = resource_version_;
  }
  if (++stream_events_ == 1) Succeeded();
  return true;
}

}  // namespace ember
