// Talking to cuslice-scheduler over its Unix sockets, as the `cuslice` tool does: one
// control request, one reply (socket_protocol.h). Read-only requests (describe, workloads)
// go to the tenant socket, which every user may reach; reload and ensure-tenant to the
// control socket (control_socket.h), which only root and the scheduler's user may. Hooks
// register through hook/link/client.h instead; this is only for the tool.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "protocol/socket_protocol.h"
#include "scheduler/segment/workload.h"

namespace cuslice::cli {

// The sockets `cuslice` tries, in order; the first whose scheduler answers is the one used.
//   - --socket if given, else $CUSLICE_SOCKET: that one only (the user chose it);
//   - else the node's scheduler at /run/cuslice/cuslice.sock, then, for a user other than
//     root, the user's own at <user_socket_dir()>/cuslice.sock (runtime_dir.h): where
//     `cuslice run` starts one when the node has none.
// Each one's control socket is --control-socket if given, else $CUSLICE_CONTROL_SOCKET, else
// its default (control_socket.h): /run/cuslice-control/cuslice.sock for the node's, and the
// private directory's sibling <user_socket_dir()>-control for the user's own.
struct SocketChoice {
  std::vector<std::string> candidates;  // never empty
  bool chosen = false;                  // from --socket or $CUSLICE_SOCKET
  // The user's private directory, when the last candidate is the user's own socket: it is
  // checked before that socket is trusted, and only when the node's does not answer.
  std::optional<std::filesystem::path> private_dir;
  std::optional<std::string> control_chosen;  // from --control-socket or $CUSLICE_CONTROL_SOCKET

  // Whether candidate `i` can be tried: always, except the user's own when its directory
  // does not exist and `create` is false. Creates that directory and its control sibling
  // when `create`; throws Error when either is not safe (runtime_dir.h).
  bool ready(size_t i, bool create) const;
  // The control socket of candidate `i`.
  std::string control(size_t i) const;
  // "/run/cuslice/cuslice.sock or /tmp/cuslice-1000/cuslice.sock", for messages.
  std::string describe() const;
};
SocketChoice socket_choice(const std::optional<std::string>& flag,
                           const std::optional<std::string>& control_flag = std::nullopt);

// The validator of every --socket flag (CLI11: empty when good, else why not): a path the
// kernel can bind, made absolute, since a command may change directory before its hook
// reads CUSLICE_SOCKET.
std::string normalise_socket_flag(std::string& path);

// A reload re-reads and checks a file; even on a loaded machine that is well under this.
inline constexpr int kReplyTimeoutMs = 10'000;

// One connection to the daemon. Move-only; closes on destruction unless released.
class SchedulerConnection {
 public:
  // Connects to `path`; nullopt when nobody answers (no socket file, or nobody listening).
  // Throws Error on anything else (path too long, permission denied: with `denied_hint` as
  // the hint when given).
  static std::optional<SchedulerConnection> connect(const std::string& path, const char* denied_hint = nullptr);

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
  // Sends `request` and waits up to `timeout_ms` for the reply to arrive; throws Error.
  void send_and_wait(const wire::ControlRequest& request, int timeout_ms);
  int fd_ = -1;
};

// Connects and sends one request; nullopt when nobody answers.
std::optional<wire::ControlReply> ask_scheduler(const std::string& path, wire::ControlCommand command,
                                                int timeout_ms = kReplyTimeoutMs, const char* denied_hint = nullptr);

// A scheduler's control socket: a connection, or nullopt with why not (nobody answers
// there, or it does not let this user in).
std::optional<SchedulerConnection> connect_control(const std::string& path, std::string& why);

}  // namespace cuslice::cli
