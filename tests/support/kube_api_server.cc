// The test API server: libmicrohttpd with a thread per connection, so a watch stream's content
// callback can wait (in short slices, for stop) for what the test sends next.
#include "support/kube_api_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/subprocess.h"
#include "support/test_certificates.h"

namespace ember::testing {
namespace {

using json = nlohmann::json;

json StatusObject(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", reason},
          {"code", code}};
}

std::string StatusBody(int status) {
  switch (status) {
    case 401:
      return StatusObject(401, "Unauthorized", "Unauthorized").dump();
    case 403:
      return StatusObject(403, "Forbidden",
                          "pods is forbidden: User \"system:serviceaccount:ember:ember\" cannot "
                          "list resource \"pods\" in API group \"\" at the cluster scope")
          .dump();
    case 410:
      return StatusObject(410, "Expired", "too old resource version").dump();
    default:
      return StatusObject(status, "InternalError",
                          "an error on the server has prevented the "
                          "request from succeeding")
          .dump();
  }
}

std::string NodeOf(const json& pod) {
  auto spec = pod.find("spec");
  if (spec == pod.end() || !spec->is_object()) return "";
  return spec->value("nodeName", std::string());
}

MHD_Result CollectArgument(void* cls, MHD_ValueKind kind, const char* key, const char* value) {
  static_cast<std::map<std::string, std::string>*>(cls)->emplace(key, value ? value : "");
  return MHD_YES;
}

}  // namespace

std::string KubeApiRequest::Query(const std::string& name) const {
  auto found = query.find(name);
  return found == query.end() ? "" : found->second;
}

std::string TestContainerId(const std::string& uid) {
  // Two rounds of a 64-bit FNV-1a over the uid, as hex, four times over: 64 digits.
  std::string id;
  uint64_t hash = 1469598103934665603ull;
  for (int round = 0; id.size() < 64; ++round) {
    for (char c : uid + std::to_string(round))
      hash = (hash ^ static_cast<uint8_t>(c)) * 1099511628211ull;
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
    id += hex;
  }
  return id.substr(0, 64);
}

json TestPod(const std::string& uid, const std::string& name, const std::string& node,
             const std::string& ns) {
  return {{"metadata", {{"uid", uid}, {"name", name}, {"namespace", ns}}},
          {"spec", {{"nodeName", node}, {"containers", {{{"name", "app"}}}}}},
          {"status",
           {{"phase", "Running"},
            {"containerStatuses",
             {{{"name", "app"}, {"containerID", "containerd://" + TestContainerId(uid)}}}}}}};
}

std::unique_ptr<KubeApiServer> KubeApiServer::Start() {
  const TestCertificates* certificates = GetTestCertificates();
  if (certificates == nullptr) return nullptr;
  if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
    ADD_FAILURE() << "libmicrohttpd was built without TLS";
    return nullptr;
  }
  std::unique_ptr<KubeApiServer> server(new KubeApiServer());
  server->ca_file_ = certificates->ca_cert;
  // libmicrohttpd takes the PEM text itself.
  server->server_cert_ = ReadFile(certificates->server_cert);
  server->server_key_ = ReadFile(certificates->server_key);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = 0;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  server->daemon_ = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_TLS, 0, nullptr,
      nullptr, &KubeApiServer::OnRequest, server.get(), MHD_OPTION_SOCK_ADDR,
      reinterpret_cast<const sockaddr*>(&address), MHD_OPTION_HTTPS_MEM_KEY,
      server->server_key_.c_str(), MHD_OPTION_HTTPS_MEM_CERT, server->server_cert_.c_str(),
      MHD_OPTION_CONNECTION_TIMEOUT, 60u, MHD_OPTION_END);
  if (server->daemon_ == nullptr) {
    ADD_FAILURE() << "MHD_start_daemon failed";
    return nullptr;
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(server->daemon_, MHD_DAEMON_INFO_BIND_PORT);
  server->port_ = info != nullptr ? info->port : 0;
  if (server->port_ == 0) {
    ADD_FAILURE() << "the test API server has no port";
    return nullptr;
  }
  return server;
}

KubeApiServer::~KubeApiServer() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
}

std::string KubeApiServer::url() const { return absl::StrCat("https://127.0.0.1:", port_); }

std::string KubeApiServer::resource_version() const {
  std::lock_guard lock(mu_);
  return std::to_string(version_);
}

std::string KubeApiServer::Change(const char* type, json object, bool erase) {
  std::lock_guard lock(mu_);
  std::string version = std::to_string(++version_);
  object["metadata"]["resourceVersion"] = version;
  std::string uid = object["metadata"].value("uid", std::string());
  std::string node = NodeOf(object);
  if (erase) {
    pods_.erase(uid);
  } else {
    pods_[uid] = object;
  }
  // Watch events carry kind and apiVersion; list items do not.
  object["kind"] = "Pod";
  object["apiVersion"] = "v1";
  std::string line = json{{"type", type}, {"object", object}}.dump() + "\n";
  history_.push_back({version_, node, line});
  for (const std::shared_ptr<Stream>& stream : streams_) {
    if (stream->node.empty() || stream->node == node) stream->pending += line;
  }
  changed_.notify_all();
  return version;
}

std::string KubeApiServer::AddPod(json pod) { return Change("ADDED", std::move(pod), false); }
std::string KubeApiServer::UpdatePod(json pod) { return Change("MODIFIED", std::move(pod), false); }
std::string KubeApiServer::DeletePod(const std::string& uid) {
  json pod;
  {
    std::lock_guard lock(mu_);
    auto found = pods_.find(uid);
    if (found == pods_.end()) {
      ADD_FAILURE() << "DeletePod: no pod " << uid;
      return "";
    }
    pod = found->second;
  }
  return Change("DELETED", std::move(pod), true);
}

void KubeApiServer::Broadcast(const std::string& node, const std::string& line) {
  std::lock_guard lock(mu_);
  for (const std::shared_ptr<Stream>& stream : streams_) {
    if (node.empty() || stream->node.empty() || stream->node == node) stream->pending += line;
  }
  changed_.notify_all();
}

std::string KubeApiServer::SendBookmark() {
  std::string version;
  {
    std::lock_guard lock(mu_);
    version = std::to_string(++version_);
  }
  Broadcast(
      "",
      json{{"type", "BOOKMARK"},
           {"object",
            {{"kind", "Pod"}, {"apiVersion", "v1"}, {"metadata", {{"resourceVersion", version}}}}}}
              .dump() +
          "\n");
  return version;
}

void KubeApiServer::SendExpired() {
  Broadcast("", json{{"type", "ERROR"},
                     {"object", StatusObject(410, "Expired", "too old resource version")}}
                        .dump() +
                    "\n");
}

void KubeApiServer::SendRaw(const std::string& bytes, bool newline) {
  Broadcast("", newline ? bytes + "\n" : bytes);
}

std::string KubeApiServer::EventLine(const std::string& type, json pod) {
  pod["kind"] = "Pod";
  pod["apiVersion"] = "v1";
  return json{{"type", type}, {"object", std::move(pod)}}.dump();
}

void KubeApiServer::EndWatches() {
  std::lock_guard lock(mu_);
  for (const std::shared_ptr<Stream>& stream : streams_) stream->end = true;
  changed_.notify_all();
}

void KubeApiServer::DropWatches() {
  std::lock_guard lock(mu_);
  for (const std::shared_ptr<Stream>& stream : streams_) stream->drop = true;
  changed_.notify_all();
}

void KubeApiServer::FailNext(KubeRequestKind kind, int status, int count, const std::string& body) {
  std::lock_guard lock(mu_);
  for (int i = 0; i < count; ++i) replies_[kind].push_back({status, body});
}

void KubeApiServer::set_page_size(int pods) {
  std::lock_guard lock(mu_);
  page_size_ = pods;
}

void KubeApiServer::set_required_token(const std::string& token) {
  std::lock_guard lock(mu_);
  required_token_ = token;
}

std::vector<KubeApiRequest> KubeApiServer::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

size_t KubeApiServer::CountRequests(KubeRequestKind kind) const {
  std::lock_guard lock(mu_);
  return std::count_if(requests_.begin(), requests_.end(), [kind](const KubeApiRequest& r) {
    return r.watch == (kind == KubeRequestKind::kWatch);
  });
}

bool KubeApiServer::WaitForRequests(KubeRequestKind kind, size_t count,
                                    absl::Duration timeout) const {
  std::unique_lock lock(mu_);
  return changed_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] {
    return static_cast<size_t>(
               std::count_if(requests_.begin(), requests_.end(), [kind](const KubeApiRequest& r) {
                 return r.watch == (kind == KubeRequestKind::kWatch);
               })) >= count;
  });
}

MHD_Result KubeApiServer::OnRequest(void* cls, MHD_Connection* connection, const char* url,
                                    const char* method, const char* version,
                                    const char* upload_data, size_t* upload_data_size,
                                    void** con_cls) {
  // The first call only announces the headers; answer on the second.
  static int headers_seen;
  if (*con_cls == nullptr) {
    *con_cls = &headers_seen;
    return MHD_YES;
  }
  if (*upload_data_size != 0) {
    *upload_data_size = 0;  // no body is expected; ignore one
    return MHD_YES;
  }
  KubeApiRequest request;
  request.method = method;
  request.path = url;
  MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, &CollectArgument, &request.query);
  const char* authorization =
      MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  request.authorization = authorization ? authorization : "";
  std::string watch = request.Query("watch");
  request.watch = watch == "1" || watch == "true";
  return static_cast<KubeApiServer*>(cls)->Answer(connection, std::move(request));
}

MHD_Result KubeApiServer::Send(MHD_Connection* connection, KubeApiRequest& request, int status,
                               const std::string& body) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
  MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  request.status = status;
  {
    std::lock_guard lock(mu_);
    requests_.push_back(request);
  }
  changed_.notify_all();
  return queued;
}

MHD_Result KubeApiServer::Answer(MHD_Connection* connection, KubeApiRequest request) {
  if (request.method != "GET" || request.path != "/api/v1/pods") {
    return Send(connection, request, 404, StatusObject(404, "NotFound", "not found").dump());
  }
  std::optional<Reply> scripted;
  std::string required_token;
  {
    std::lock_guard lock(mu_);
    required_token = required_token_;
    std::deque<Reply>& queue =
        replies_[request.watch ? KubeRequestKind::kWatch : KubeRequestKind::kList];
    if (!queue.empty()) {
      scripted = queue.front();
      queue.pop_front();
    }
  }
  if (!required_token.empty() && request.authorization != "Bearer " + required_token) {
    return Send(connection, request, 401, StatusBody(401));
  }
  if (scripted) {
    return Send(connection, request, scripted->status,
                scripted->body.empty() ? StatusBody(scripted->status) : scripted->body);
  }
  std::string selector_text = request.Query("fieldSelector");
  absl::string_view selector = selector_text;
  std::string node;
  if (!selector.empty()) {
    if (!absl::ConsumePrefix(&selector, "spec.nodeName=") || selector.empty()) {
      return Send(connection, request, 400,
                  StatusObject(400, "BadRequest", "unsupported field selector").dump());
    }
    node = std::string(selector);
  }
  return request.watch ? AnswerWatch(connection, request, node)
                       : AnswerList(connection, request, node);
}

MHD_Result KubeApiServer::AnswerList(MHD_Connection* connection, KubeApiRequest& request,
                                     const std::string& node) {
  size_t limit = 0;
  if (std::string text = request.Query("limit"); !text.empty() && !absl::SimpleAtoi(text, &limit)) {
    return Send(connection, request, 400, StatusObject(400, "BadRequest", "bad limit").dump());
  }
  size_t offset = 0;
  std::string list_version;
  if (std::string token = request.Query("continue"); !token.empty()) {
    // Continue tokens are base64 of a small JSON object, as the real ones are.
    std::string decoded;
    json state;
    if (absl::Base64Unescape(token, &decoded)) state = json::parse(decoded, nullptr, false);
    if (!state.is_object() || !state["offset"].is_number_unsigned() || !state["rv"].is_string()) {
      return Send(connection, request, 400,
                  StatusObject(400, "BadRequest", "bad continue token").dump());
    }
    offset = state["offset"].get<size_t>();
    list_version = state["rv"].get<std::string>();
  }
  json list = {{"kind", "PodList"}, {"apiVersion", "v1"}, {"items", json::array()}};
  {
    std::lock_guard lock(mu_);
    if (list_version.empty()) list_version = std::to_string(version_);
    if (page_size_ > 0) limit = limit == 0 ? page_size_ : std::min<size_t>(limit, page_size_);
    size_t index = 0;
    size_t next = 0;
    for (const auto& [uid, pod] : pods_) {
      if (!node.empty() && NodeOf(pod) != node) continue;
      if (index++ < offset) continue;
      if (limit > 0 && list["items"].size() == limit) {
        next = index - 1;
        break;
      }
      list["items"].push_back(pod);
    }
    list["metadata"] = {{"resourceVersion", list_version}};
    if (next > 0) {
      list["metadata"]["continue"] =
          absl::Base64Escape(json{{"offset", next}, {"rv", list_version}, {"pad", "?"}}.dump());
    }
  }
  return Send(connection, request, 200, list.dump());
}

MHD_Result KubeApiServer::AnswerWatch(MHD_Connection* connection, KubeApiRequest& request,
                                      const std::string& node) {
  auto stream = std::make_shared<Stream>();
  stream->node = node;
  uint64_t from = 0;
  absl::SimpleAtoi(request.Query("resourceVersion"), &from);
  auto* context = new StreamContext{this, stream};
  MHD_Response* response = MHD_create_response_from_callback(
      MHD_SIZE_UNKNOWN, 16 << 10, &KubeApiServer::ReadStream, context, &KubeApiServer::FreeStream);
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
  request.status = 200;
  {
    // The replay and registration under one lock: no change falls between them.
    std::lock_guard lock(mu_);
    if (from > 0) {
      for (const Event& event : history_) {
        if (event.version > from && (node.empty() || event.node == node)) {
          stream->pending += event.line;
        }
      }
    }
    streams_.push_back(stream);
    requests_.push_back(request);
  }
  changed_.notify_all();
  MHD_Result queued = MHD_queue_response(connection, 200, response);
  MHD_destroy_response(response);
  return queued;
}

ssize_t KubeApiServer::ReadStream(void* cls, uint64_t pos, char* buf, size_t max) {
  auto* context = static_cast<StreamContext*>(cls);
  KubeApiServer* server = context->server;
  Stream& stream = *context->stream;
  std::unique_lock lock(server->mu_);
  // Waits in slices (bounded by the server's stop) until there is something to do.
  while (!server->stopping_ && !stream.drop && stream.pending.empty() && !stream.end) {
    server->changed_.wait_for(lock, std::chrono::milliseconds(100));
  }
  if (server->stopping_ || stream.drop) return MHD_CONTENT_READER_END_WITH_ERROR;
  if (!stream.pending.empty()) {
    size_t bytes = std::min(max, stream.pending.size());
    std::memcpy(buf, stream.pending.data(), bytes);
    stream.pending.erase(0, bytes);
    return static_cast<ssize_t>(bytes);
  }
  return MHD_CONTENT_READER_END_OF_STREAM;
}

void KubeApiServer::FreeStream(void* cls) {
  auto* context = static_cast<StreamContext*>(cls);
  {
    std::lock_guard lock(context->server->mu_);
    auto& streams = context->server->streams_;
    streams.erase(std::remove(streams.begin(), streams.end(), context->stream), streams.end());
  }
  delete context;
}

}  // namespace ember::testing
