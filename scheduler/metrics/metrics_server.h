// The daemon's HTTP endpoint: GET /metrics (Prometheus text) and GET /healthz, nothing else.
//
// Built on libmicrohttpd (Debian's libmicrohttpd-dev), on its own thread (epoll inside):
// whatever HTTP clients do, slow or many, the scheduler's thread never waits for them. The
// callbacks run on that thread; the daemon makes what they read safe to read there.
// Connections are bounded (kConnectionLimit) and one that sends nothing for
// kConnectionTimeoutSeconds is closed, so idle or slow clients cannot hold the endpoint.
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

  static constexpr unsigned kConnectionTimeoutSeconds = 5;
  static constexpr unsigned kConnectionLimit = 2048;

  // Listens on `address` (an IPv4 or IPv6 literal: 127.0.0.1, ::1, 0.0.0.0, ::) and `port`
  // (0: any free port, see port()), and starts serving; throws std::runtime_error when it
  // cannot.
  MetricsServer(const std::string& address, uint16_t port, Render render, Healthy healthy);
  // Stops the thread; no callback runs after it returns.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  uint16_t port() const { return port_; }
  std::string url() const;  // http://address:port, with [] around an IPv6 address

  // For libmicrohttpd's C callback.
  std::string body_for(const std::string& url, int& status, const char*& content_type) const;

 private:
  MHD_Daemon* daemon_ = nullptr;
  std::string address_;
  bool ipv6_ = false;
  uint16_t port_ = 0;
  Render render_;
  Healthy healthy_;
};

}  // namespace cuslice
