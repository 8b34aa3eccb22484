// Talking to cuslice-scheduler over its Unix socket, as the `cuslice` tool does: one
// control request, one reply (socket_protocol.h). Hooks register through protocol/client.h
// instead; this is only for the tool.
#pragma once

#include <optional>
#include <string>

#include "metrics_exposition.h"
#include "socket_protocol.h"

namespace cuslice::cli {

// --socket if given, else $CUSLICE_SOCKET, else the default path: where hooks look too.
std::string resolve_socket_path(const std::optional<std::string>& flag);

// A reload re-reads and checks a file; even on a loaded machine that is well under this.
inline constexpr int kReplyTimeoutMs = 10'000;

// One connection to the daemon. Move-only; closes on destruction unless released.
class SchedulerConnection {
 public:
  // Connects to `path`; nullopt when nobody answers (no socket file, or nobody listening).
  // Throws Error on anything else (path too long, permission denied).
  static std::optional<SchedulerConnection> connect(const std::string& path);

  SchedulerConnection(SchedulerConnection&& other) noexcept;
  SchedulerConnection& operator=(SchedulerConnection&&) = delete;
  ~SchedulerConnection();

  // Sends `request` and waits up to `timeout_ms` for the reply; throws Error on failure.
  wire::ControlReply request(const wire::ControlRequest& request, int timeout_ms = kReplyTimeoutMs);

  // kWorkloads: each tenant's Kubernetes workload, by tenant name; empty from a daemon that
  // does not know the request. Throws Error like request().
  TenantWorkloads workloads(int timeout_ms = kReplyTimeoutMs);

  // Gives up ownership and makes the descriptor survive exec: the lease `cuslice run`
  // passes on to its command (the daemon counts the command alive while it stays open).
  int release_as_lease();

 private:
  explicit SchedulerConnection(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Connects and sends one request; nullopt when nobody answers.
std::optional<wire::ControlReply> ask_scheduler(const std::string& path, wire::ControlCommand command,
                                                int timeout_ms = kReplyTimeoutMs);

}  // namespace cuslice::cli
