// The Kubernetes API server's REST API, through libcurl: one request per call, JSON bodies,
// the bearer token or client certificate of the KubeConfig, and a bound on every call. A
// watch streams the server's events, one JSON object a line, until the server ends it, the
// caller's `keep_going` says stop, or the connection fails.
//
// Thread-safe: no state is shared between calls (curl_global_init is the program's, once, in
// main). Retrying is the caller's: a call reports what happened, once.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "dra_plugin/kube_config.h"

namespace cuslice::dra {

struct ApiResponse {
  long status = 0;        // HTTP status; 0 when no answer came
  std::string body;
  std::string error;      // why no answer came (connection refused, timeout, TLS)
  bool ok() const { return error.empty() && status >= 200 && status < 300; }
  // For logs: the status and the server's message, or the transport error.
  std::string describe() const;
};

class ApiClient {
 public:
  explicit ApiClient(KubeConfig config, std::chrono::milliseconds timeout = std::chrono::seconds(10))
      : config_(std::move(config)), timeout_(timeout) {}

  ApiResponse get(const std::string& path) const { return call("GET", path, ""); }
  ApiResponse post(const std::string& path, const std::string& body) const { return call("POST", path, body); }
  ApiResponse put(const std::string& path, const std::string& body) const { return call("PUT", path, body); }
  ApiResponse remove(const std::string& path) const { return call("DELETE", path, ""); }

  // GET `path` (with watch=true in it) and hand each line to `on_line` as it arrives, for at
  // most `limit`; stops early once `keep_going` returns false (asked about once a second).
  ApiResponse watch(const std::string& path, const std::function<void(const std::string&)>& on_line,
                    const std::function<bool()>& keep_going, std::chrono::seconds limit) const;

 private:
  ApiResponse call(const std::string& method, const std::string& path, const std::string& body) const;
  ApiResponse watch_or_call(const std::string& method, const std::string& path, const std::string& body,
                            const std::function<void(const std::string&)>* on_line,
                            const std::function<bool()>* keep_going, std::chrono::milliseconds limit) const;

  KubeConfig config_;
  std::chrono::milliseconds timeout_;
};

}  // namespace cuslice::dra
