// The daemon's HTTP endpoint: GET /metrics (Prometheus text) and GET /healthz, nothing else.
//
// Built on libmicrohttpd (Debian's libmicrohttpd-dev), not prometheus-cpp's Exposer, for
// its "external epoll" mode: the server owns no thread. The daemon adds fd() to its own
// epoll set and calls run() when it is readable or timeout_ms() has passed, so requests are
// answered on the daemon's one thread and the callbacks read daemon state without locks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

struct MHD_Daemon;

namespace cuslice {

class MetricsServer {
 public:
  using Render = std::function<std::string()>;  // body of GET /metrics
  using Healthy = std::function<bool()>;        // GET /healthz: 200 when true, else 503

  // Listens on `address` (an IPv4 literal) and `port` (0: any free port, see port());
  // throws std::runtime_error when it cannot.
  MetricsServer(const std::string& address, uint16_t port, Render render, Healthy healthy);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int fd() const;
  // Serves whatever is ready; never blocks.
  void run();
  // How long the caller may wait for fd() before calling run() anyway (connection
  // timeouts); -1: as long as it likes.
  int timeout_ms() const;
  uint16_t port() const { return port_; }

  // For libmicrohttpd's C callback.
  std::string body_for(const std::string& url, int& status, const char*& content_type) const;

 private:
  MHD_Daemon* daemon_ = nullptr;
  uint16_t port_ = 0;
  Render render_;
  Healthy healthy_;
};

}  // namespace cuslice
