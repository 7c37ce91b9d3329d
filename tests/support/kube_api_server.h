// A Kubernetes API server for tests, on 127.0.0.1 over HTTPS (libmicrohttpd; a CA and server
// certificate made with the openssl CLI), speaking the pod LIST and WATCH protocol: a store of
// pods with a resourceVersion counter, PodList pages with continue tokens, fieldSelector
// spec.nodeName, chunked newline-delimited watch events replayed from the requested
// resourceVersion. Tests script the rest: bookmarks, ERROR 410, HTTP failures, malformed lines,
// clean ends and dropped connections. It records every request. Every wait is bounded.
#pragma once

#include <microhttpd.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace ember::testing {

struct KubeApiRequest {
  std::string method;
  std::string path;                                  // without the query
  std::map<std::string, std::string> query;          // decoded
  std::string authorization;                         // the header as sent ("" when none)
  bool watch = false;                                // watch=1 or watch=true
  int status = 0;                                    // what was answered
  std::string Query(const std::string& name) const;  // "" when absent
};

enum class KubeRequestKind { kList, kWatch };

// A pod object for the store: v1 Pod JSON with one container "app" whose containerID is
// "containerd://" + TestContainerId(uid), scheduled on `node`.
nlohmann::json TestPod(const std::string& uid, const std::string& name, const std::string& node,
                       const std::string& ns = "default");
// A 64-hex-digit container id derived from `uid`.
std::string TestContainerId(const std::string& uid);

class KubeApiServer {
 public:
  // nullptr when the certificates or the daemon could not be made (reported to the running test).
  static std::unique_ptr<KubeApiServer> Start();
  ~KubeApiServer();  // ends the streams, stops the daemon
  KubeApiServer(const KubeApiServer&) = delete;
  KubeApiServer& operator=(const KubeApiServer&) = delete;

  std::string url() const;                                 // "https://127.0.0.1:<port>"
  const std::string& ca_file() const { return ca_file_; }  // trusts the server certificate

  // The store. Each change takes the next resourceVersion (returned), sets it on the object, and
  // goes to the open watch streams of the pod's node as ADDED, MODIFIED or DELETED.
  std::string AddPod(nlohmann::json pod);
  std::string UpdatePod(nlohmann::json pod);
  std::string DeletePod(const std::string& uid);
  std::string resource_version() const;

  // To every open watch stream.
  std::string SendBookmark();  // takes a new resourceVersion, returned
  void SendExpired();          // ERROR event with a 410 Expired Status
  // The bytes as they are, then "\n" unless `newline` is false (a line split across chunks).
  void SendRaw(const std::string& bytes, bool newline = true);
  // A watch event line as the server writes it, without its "\n".
  static std::string EventLine(const std::string& type, nlohmann::json pod);
  void EndWatches();   // a clean end of the chunked body (the server's timeoutSeconds)
  void DropWatches();  // closes the connections mid-body

  // The next `count` requests of `kind` get `status` with `body` ("" for a v1 Status). A 200
  // with a body answers a LIST with that body instead of the PodList.
  void FailNext(KubeRequestKind kind, int status, int count = 1, const std::string& body = "");
  // Pages hold at most this many pods, fewer than the client's limit asks (0: the limit only).
  void set_page_size(int pods);
  // Requests without "Authorization: Bearer <token>" get 401 ("" accepts anything).
  void set_required_token(const std::string& token);

  std::vector<KubeApiRequest> requests() const;
  // Waits until `count` requests of `kind` have been answered (for a watch: its stream opened,
  // or its failure answered), or `timeout` passes.
  bool WaitForRequests(KubeRequestKind kind, size_t count,
                       absl::Duration timeout = absl::Seconds(10)) const;
  size_t CountRequests(KubeRequestKind kind) const;

 private:
  struct Stream {
    std::string node;  // "" for every node
    std::string pending;
    bool end = false;
    bool drop = false;
  };
  struct StreamContext {
    KubeApiServer* server;
    std::shared_ptr<Stream> stream;
  };
  struct Event {
    uint64_t version;
    std::string node;
    std::string line;
  };
  struct Reply {
    int status;
    std::string body;
  };

  KubeApiServer() = default;
  static MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url,
                              const char* method, const char* version, const char* upload_data,
                              size_t* upload_data_size, void** con_cls);
  static ssize_t ReadStream(void* cls, uint64_t pos, char* buf, size_t max);
  static void FreeStream(void* cls);
  MHD_Result Answer(MHD_Connection* connection, KubeApiRequest request);
  MHD_Result AnswerList(MHD_Connection* connection, KubeApiRequest& request,
                        const std::string& node);
  MHD_Result AnswerWatch(MHD_Connection* connection, KubeApiRequest& request,
                         const std::string& node);
  MHD_Result Send(MHD_Connection* connection, KubeApiRequest& request, int status,
                  const std::string& body);
  std::string Change(const char* type, nlohmann::json object, bool erase);
  void Broadcast(const std::string& node, const std::string& line);

  std::string ca_file_;
  std::string server_key_;
  std::string server_cert_;
  MHD_Daemon* daemon_ = nullptr;
  uint16_t port_ = 0;

  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  bool stopping_ = false;
  uint64_t version_ = 1000;
  std::map<std::string, nlohmann::json> pods_;  // by uid, sorted as the pages are
  std::vector<Event> history_;
  std::vector<std::shared_ptr<Stream>> streams_;
  std::map<KubeRequestKind, std::deque<Reply>> replies_;
  int page_size_ = 0;
  std::string required_token_;
  std::vector<KubeApiRequest> requests_;
};

}  // namespace ember::testing
