#include "scheduler/metrics/metrics_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>

#include <spdlog/spdlog.h>

#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace cuslice {
namespace {

// libmicrohttpd's own messages go where the daemon's logs go, not straight to stderr.
void log_from_mhd(void* /*cls*/, const char* format, va_list args) {
  char line[512];
  std::vsnprintf(line, sizeof line, format, args);
  const size_t n = std::strlen(line);
  if (n > 0 && line[n - 1] == '\n') line[n - 1] = '\0';
  spdlog::warn("metrics: {}", line);
}

std::string host_port(const std::string& address, bool ipv6, uint16_t port) {
  return (ipv6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

MHD_Result answer(void* cls, MHD_Connection* connection, const char* url, const char* method,
                  const char* /*version*/, const char* /*upload_data*/, size_t* upload_data_size,
                  void** /*con_cls*/) {
  const auto* server = static_cast<const MetricsServer*>(cls);
  int status = MHD_HTTP_OK;
  const char* content_type = "text/plain; charset=utf-8";
  std::string body;
  const bool head = std::strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
  if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 && !head) {
    status = MHD_HTTP_METHOD_NOT_ALLOWED;
    body = "only GET\n";
  } else if (*upload_data_size != 0) {
    status = MHD_HTTP_BAD_REQUEST;
    body = "no body expected\n";
    *upload_data_size = 0;
  } else {
    body = server->body_for(url, status, content_type);
  }
  MHD_Response* response = MHD_create_response_from_buffer(body.size(), body.data(), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  const MHD_Result queued = MHD_queue_response(connection, static_cast<unsigned>(status), response);
  MHD_destroy_response(response);
  return queued;
}

}  // namespace

MetricsServer::MetricsServer(const std::string& address, uint16_t port, Render render, Healthy healthy)
    : address_(address), render_(std::move(render)), healthy_(std::move(healthy)) {
  sockaddr_storage storage{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
  } else if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    ipv6_ = true;
  } else {
    throw std::runtime_error("metrics address " + address + " is not an IPv4 or IPv6 address");
  }
  // The logger comes first, or libmicrohttpd reports the other options on stderr itself.
  const unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG | (ipv6_ ? MHD_USE_IPv6 : 0);
  daemon_ = MHD_start_daemon(flags, port, nullptr, nullptr, &answer, this, MHD_OPTION_EXTERNAL_LOGGER, &log_from_mhd,
                             nullptr, MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&storage),
                             MHD_OPTION_CONNECTION_TIMEOUT, kConnectionTimeoutSeconds, MHD_OPTION_CONNECTION_LIMIT,
                             kConnectionLimit, MHD_OPTION_END);
  if (daemon_ == nullptr)
    throw std::runtime_error("cannot serve metrics on " + host_port(address, ipv6_, port) +
                             " (port in use, or not allowed)");
  const MHD_DaemonInfo* info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
  port_ = info ? info->port : port;
}

MetricsServer::~MetricsServer() { MHD_stop_daemon(daemon_); }

std::string MetricsServer::url() const { return "http://" + host_port(address_, ipv6_, port_); }

std::string MetricsServer::body_for(const std::string& url, int& status, const char*& content_type) const {
  if (url == "/metrics") {
    content_type = "text/plain; version=0.0.4; charset=utf-8";
    return render_();
  }
  if (url == "/healthz") {
    const bool ok = healthy_();
    status = ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
    return ok ? "ok\n" : "not serving\n";
  }
  status = MHD_HTTP_NOT_FOUND;
  return "not found: try /metrics or /healthz\n";
}

}  // namespace cuslice
