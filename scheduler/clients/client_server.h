// The daemon's clients: the connections on its two sockets, from accept to EOF.
//
//   tenant socket   -> every local user: hooks register here (Registrar), then send kicks,
//                      their workload and memory requests (handed to the Preemptor)
//   control socket  -> root and the daemon's user: `cuslice` and the device plugin
//                      (ControlDesk); a `cuslice run` that added a tenant keeps its
//                      connection open as a lease while its command lives
//
// Every client is untrusted: what it sends is decoded by message_decoder.h, a connection that
// stays silent past kFirstMessageTimeout is closed, and what one uid may hold is bounded
// (kMaxProcessesPerUid, kMaxConnectionsPerUid). A tenant-socket connection is its process's
// (process_handle.h): a pidfd, start time and cgroup taken at accept, and the connection is
// closed, its registration ended, when that process exits, even where a child still holds
// the socket. What all users hold together is bounded too: the tenant socket's connections
// stop short of the descriptor limit. A listening socket that reaches its limit is taken out
// of epoll until tick() puts it back; the other one is not.
//
// Owns the listening sockets, the client connections and the per-uid counts. Registers its
// descriptors in the daemon's epoll set; asks the daemon for a scheduling step after a
// client's messages (DaemonControl); never touches the token, the policies or the tenant
// table directly.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "protocol/socket_protocol.h"
#include "scheduler/clients/control_desk.h"
#include "scheduler/clients/daemon_control.h"
#include "scheduler/clients/refusal_log.h"
#include "scheduler/clients/registrar.h"
#include "scheduler/preemption/preemptor.h"
#include "scheduler/scheduling/usage_ledger.h"
#include "scheduler/segment/process_table.h"

namespace cuslice {

struct ClientSockets {
  std::string socket_path;          // the tenant socket: hooks register here
  std::string control_socket_path;  // reload, ensure-tenant, the device plugin (control_socket.h)
};

class ClientServer {
 public:
  // A connection must send its first message this soon, or it is closed: a client that
  // connects and stays silent would otherwise hold a descriptor forever.
  static constexpr std::chrono::seconds kFirstMessageTimeout{5};
  // What one uid may hold at once. Slots: a quarter of the segment's, so that one user
  // cannot leave the others none; connections: its processes, their leases and requests.
  static constexpr int kMaxProcessesPerUid = static_cast<int>(shm::kMaxProcesses) / 4;
  static constexpr int kMaxConnectionsPerUid = 2 * kMaxProcessesPerUid;
  // The control socket is root's and the scheduler's user's alone: a bound that only keeps a
  // runaway script from taking every descriptor.
  static constexpr int kMaxControlConnections = 256;
  // Descriptors kept from the tenant socket's connections, all users together: the control
  // socket's, the metrics endpoint's (2048), the regions, timers and NVML. The tenant socket
  // stops accepting (its connections queue, and a hook that finds the queue full fails its
  // CUDA initialisation rather than run unscheduled) before the daemon runs out.
  static constexpr unsigned kReservedDescriptors = 2048 + 512;
  static constexpr int kMinTenantConnections = 64;

  ClientServer(ClientSockets sockets, int epoll_fd, Registrar& registrar, ControlDesk& desk, Preemptor& preemptor,
               ProcessTable& processes, UsageLedger& ledger, RefusalLog& refusals, DaemonControl& daemon);
  ~ClientServer();
  ClientServer(const ClientServer&) = delete;
  ClientServer& operator=(const ClientServer&) = delete;

  // Opens the control socket, then the tenant socket (whoever finds the tenant socket
  // answering finds the control socket too), and watches both. The caller holds their locks.
  void listen();
  // Closes every connection and both sockets, and removes the socket files: before the
  // caller drops the sockets' locks.
  void shut_down();

  bool is_listener(int fd) const { return fd >= 0 && (fd == listen_fd_ || fd == control_listen_fd_); }
  void accept_clients(int listen_fd);
  // A client's descriptor is readable (or closed), or a client's process exited (its pidfd);
  // an unknown descriptor is ignored.
  void on_readable(int fd);
  // A few times a second: closes silent connections, resumes accepting after the limit.
  void tick();
  bool idle() const { return clients_.empty(); }

 private:
  enum class Kind {
    kNew,    // connected, first message not read yet
    kHook,   // registered process (owns `slot`)
    kLease,  // `cuslice run` that ensured a tenant: kept open while its command lives
  };
  struct Client {
    Kind kind = Kind::kNew;
    int slot = -1;  // kHook only
    pid_t pid = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    bool control = false;                   // connected through the control socket
    std::chrono::nanoseconds connected{0};  // monotonic, for kFirstMessageTimeout
    std::string lease;                      // kLease only: the tenant `cuslice run` ensured
    // Tenant socket only (a lease outlives `cuslice run` in its command): the process that
    // connected, watched in epoll; its exit ends the connection.
    int pidfd = -1;
    uint64_t start_time = 0;
    std::string cgroup;
  };
  struct UidUsage {
    int connections = 0;
    int processes = 0;
  };

  void pause_accepting(int listen_fd, const std::string& why);
  // accept_clients()'s steps. The next queued connection, or -1 when none can be taken now
  // (accepting paused where descriptors ran out).
  int accept_next(int listen_fd);
  // A connection checked against its user's limit and watched, or closed.
  void admit_connection(int listen_fd, int fd);
  // Past a cap: a tenant-socket connection is told "full" (the hook then waits, and fails
  // rather than run unscheduled); then closed, and the refusal logged.
  void refuse_connection(int fd, uid_t uid, bool control);
  // A tenant socket client's process, identified and watched for its exit; false when it
  // already exited.
  bool watch_peer_process(int fd, pid_t pid, Client& client);
  void resume_accepting();
  void close_silent_clients();
  void on_first_message(int fd, Client& client);
  void on_hook_messages(int fd, Client& client);
  void register_client(int fd, Client& client, const wire::RegisterRequest& request);
  void drop_client(int fd);
  // A tenant-socket connection's counts, and its process's slot, given back.
  void release_tenant_connection(const Client& client);

  ClientSockets sockets_;
  int epoll_fd_;
  Registrar& registrar_;
  ControlDesk& desk_;
  Preemptor& preemptor_;
  ProcessTable& processes_;
  UsageLedger& ledger_;
  RefusalLog& refusals_;
  DaemonControl& daemon_;
  int listen_fd_ = -1;
  int control_listen_fd_ = -1;
  bool tenant_paused_ = false;
  bool control_paused_ = false;
  int tenant_connections_ = 0;      // open on the tenant socket, all users together
  int control_connections_ = 0;     // open on the control socket
  int max_tenant_connections_ = 0;  // set by listen() from the descriptor limit
  bool fd_limit_reported_ = false;  // logged once until accepting works again
  std::unordered_map<int, Client> clients_;
  std::unordered_map<int, int> by_pidfd_;  // a client's pidfd -> its connection
  std::unordered_map<uid_t, UidUsage> per_uid_;
  std::unordered_map<std::string, int> leases_;  // open leases by tenant
};

}  // namespace cuslice
