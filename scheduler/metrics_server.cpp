#include "metrics_server.h"

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

constexpr unsigned kConnectionTimeoutSeconds = 10;  // a stalled scraper is dropped after this
constexpr unsigned kConnectionLimit = 32;           // scrapers are few; refuse a flood

// libmicrohttpd's own messages go where the daemon's logs go, not straight to stderr.
void log_from_mhd(void* /*cls*/, const char* format, va_list args) {
  char line[512];
  std::vsnprintf(line, sizeof line, format, args);
  const size_t n = std::strlen(line);
  if (n > 0 && line[n - 1] == '\n') line[n - 1] = '\0';
  spdlog::warn("metrics: {}", line);
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
    : render_(std::move(render)), healthy_(std::move(healthy)) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1)
    throw std::runtime_error("metrics address " + address + " is not an IPv4 address");
  // No MHD_USE_INTERNAL_POLLING_THREAD: external mode, the daemon's loop drives it.
  // The logger comes first, or libmicrohttpd reports the other options on stderr itself.
  daemon_ = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_ERROR_LOG, port, nullptr, nullptr, &answer, this,
                             MHD_OPTION_EXTERNAL_LOGGER, &log_from_mhd, nullptr, MHD_OPTION_SOCK_ADDR,
                             reinterpret_cast<sockaddr*>(&addr), MHD_OPTION_CONNECTION_TIMEOUT,
                             kConnectionTimeoutSeconds, MHD_OPTION_CONNECTION_LIMIT, kConnectionLimit,
                             MHD_OPTION_END);
  if (daemon_ == nullptr)
    throw std::runtime_error("cannot serve metrics on " + address + ":" + std::to_string(port) +
                             " (port in use, or not allowed)");
  const MHD_DaemonInfo* info = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
  port_ = info ? info->port : port;
}

MetricsServer::~MetricsServer() { MHD_stop_daemon(daemon_); }

int MetricsServer::fd() const { return MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_EPOLL_FD)->epoll_fd; }

void MetricsServer::run() { MHD_run(daemon_); }

int MetricsServer::timeout_ms() const {
  MHD_UNSIGNED_LONG_LONG ms = 0;
  if (MHD_get_timeout(daemon_, &ms) != MHD_YES) return -1;
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

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
