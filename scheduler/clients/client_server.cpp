// ClientServer (client_server.h): accepting, reading and dropping clients; a first message
// goes to the Registrar or the ControlDesk, a hook's later messages to the ProcessTable and
// the Preemptor.
#include "scheduler/clients/client_server.h"

#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "protocol/clock.h"
#include "scheduler/clients/message_decoder.h"
#include "scheduler/clients/replies.h"
#include "scheduler/os/os_fds.h"
#include "scheduler/os/process_handle.h"

namespace cuslice {
namespace {

// A hook drains its kicks in one go; a client that sends faster than the daemon reads gets
// this many read per wake-up, so that it cannot keep the loop from everybody else.
constexpr int kMessagesPerWakeup = 64;

void watch(int epoll_fd, int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) throw_errno("epoll_ctl");
}

}  // namespace

ClientServer::ClientServer(ClientSockets sockets, int epoll_fd, Registrar& registrar, ControlDesk& desk,
                           Preemptor& preemptor, ProcessTable& processes, UsageLedger& ledger, RefusalLog& refusals,
                           DaemonControl& daemon)
    : sockets_(std::move(sockets)),
      epoll_fd_(epoll_fd),
      registrar_(registrar),
      desk_(desk),
      preemptor_(preemptor),
      processes_(processes),
      ledger_(ledger),
      refusals_(refusals),
      daemon_(daemon) {}

ClientServer::~ClientServer() { shut_down(); }

void ClientServer::listen() {
  // Each tenant socket connection costs two descriptors (the socket, its process's pidfd).
  rlimit limit{};
  const rlim_t have = getrlimit(RLIMIT_NOFILE, &limit) == 0 ? limit.rlim_cur : 1024;
  const rlim_t usable = std::min<rlim_t>(have, rlim_t{1} << 24);
  const rlim_t left = usable > kReservedDescriptors ? (usable - kReservedDescriptors) / 2 : 0;
  max_tenant_connections_ = std::max(kMinTenantConnections, static_cast<int>(left));
  control_listen_fd_ = listen_on(sockets_.control_socket_path, SocketAccess::kOwner);
  watch(epoll_fd_, control_listen_fd_, EPOLLIN);
  listen_fd_ = listen_on(sockets_.socket_path, SocketAccess::kEveryone);
  watch(epoll_fd_, listen_fd_, EPOLLIN);
}

void ClientServer::shut_down() {
  for (const auto& [fd, client] : clients_) {
    close(fd);
    if (client.pidfd >= 0) close(client.pidfd);
  }
  clients_.clear();
  by_pidfd_.clear();
  for (int* fd : {&listen_fd_, &control_listen_fd_}) {
    if (*fd < 0) continue;
    close(*fd);
    *fd = -1;
    unlink((fd == &listen_fd_ ? sockets_.socket_path : sockets_.control_socket_path).c_str());
  }
}

void ClientServer::pause_accepting(int listen_fd, const std::string& why) {
  // The connection stays queued; the listening socket stays ready. Stop watching it until
  // tick(), so that the loop does not spin on it. Only that socket: the control socket is
  // not paused because the tenant socket's connections took the descriptors.
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd, nullptr);
  (listen_fd == listen_fd_ ? tenant_paused_ : control_paused_) = true;
  if (!fd_limit_reported_) {
    spdlog::warn("{} ({} connections open): new connections on {} wait until some close", why, clients_.size(),
                 listen_fd == listen_fd_ ? sockets_.socket_path : sockets_.control_socket_path);
    fd_limit_reported_ = true;
  }
}

void ClientServer::accept_clients(int listen_fd) {
  for (;;) {
    // Every user's connections together stop short of the descriptor limit, so that the
    // control socket, the tenants' regions and the metrics always have theirs.
    if (listen_fd == listen_fd_ && tenant_connections_ >= max_tenant_connections_) {
      pause_accepting(listen_fd, std::to_string(tenant_connections_) +
                                     " tenant socket connections, the most for all users together");
      return;
    }
    const int fd = accept_next(listen_fd);
    if (fd < 0) return;
    admit_connection(listen_fd, fd);
  }
}

int ClientServer::accept_next(int listen_fd) {
  const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      pause_accepting(listen_fd, std::string("accept: ") + std::strerror(errno));
    } else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
      spdlog::warn("accept: {}", std::strerror(errno));
    }
    return -1;
  }
  if (fd_limit_reported_) {
    spdlog::info("accepting connections again ({} open)", clients_.size() + 1);
    fd_limit_reported_ = false;
  }
  return fd;
}

void ClientServer::refuse_connection(int fd, uid_t uid, bool control) {
  // A hook that gets no answer cannot tell a full scheduler from a broken one; told "full",
  // it waits and, still without room, fails rather than run unscheduled.
  const std::string why = control ? std::to_string(control_connections_) + " control connections open, the most there may be"
                                  : std::to_string(per_uid_[uid].connections) + " connections of uid " +
                                        std::to_string(uid) + " open, the most one user may have";
  if (!control) {
    wire::RegisterReply reply;
    reply.status = wire::RegisterStatus::kFull;
    send_register_reply(fd, reply, why);
  }
  close(fd);
  refusals_.log(uid, "refused a connection: " + why);
}

void ClientServer::admit_connection(int listen_fd, int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    close(fd);
    return;
  }
  const bool control = listen_fd == control_listen_fd_;
  // Control connections (root and the scheduler's user only) are counted apart: no tenant's
  // connections keep `cuslice reload` or the plugins out.
  if (control ? control_connections_ >= kMaxControlConnections
              : per_uid_[cred.uid].connections >= kMaxConnectionsPerUid) {
    refuse_connection(fd, cred.uid, control);
    return;
  }
  Client client;
  // Who connected, now: a message that comes later may come from a child the socket was
  // handed to, or after the pid went to another process.
  if (!control && !watch_peer_process(fd, cred.pid, client)) {
    close(fd);  // it exited already: nobody to register
    return;
  }
  if (control) {
    ++control_connections_;
  } else {
    ++per_uid_[cred.uid].connections;
    ++tenant_connections_;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  client.pid = cred.pid;
  client.uid = cred.uid;
  client.gid = cred.gid;
  client.control = control;
  client.connected = std::chrono::nanoseconds(now_ns());
  clients_[fd] = client;
  daemon_.connections_changed();
}

bool ClientServer::watch_peer_process(int fd, pid_t pid, Client& client) {
  std::optional<PeerProcess> peer = identify_peer(fd, pid);
  if (!peer) return false;
  client.pidfd = peer->pidfd;
  client.start_time = peer->start_time;
  client.cgroup = std::move(peer->cgroup);
  epoll_event exit_ev{};
  exit_ev.events = EPOLLIN;
  exit_ev.data.fd = client.pidfd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, client.pidfd, &exit_ev);
  by_pidfd_[client.pidfd] = fd;
  return true;
}

void ClientServer::resume_accepting() {
  for (const int fd : {listen_fd_, control_listen_fd_}) {
    bool& paused = fd == listen_fd_ ? tenant_paused_ : control_paused_;
    if (!paused || (fd == listen_fd_ && tenant_connections_ >= max_tenant_connections_)) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) == 0 || errno == EEXIST) paused = false;
  }
}

void ClientServer::tick() {
  close_silent_clients();
  if (tenant_paused_ || control_paused_) resume_accepting();
}

void ClientServer::close_silent_clients() {
  const std::chrono::nanoseconds now{now_ns()};
  std::vector<int> silent;
  for (const auto& [fd, client] : clients_)
    if (client.kind == Kind::kNew && now - client.connected > kFirstMessageTimeout) silent.push_back(fd);
  for (const int fd : silent) {
    const Client& client = clients_.at(fd);
    refusals_.log(client.uid, "closed a connection (pid " + std::to_string(client.pid) + ") that sent nothing for " +
                                  std::to_string(kFirstMessageTimeout.count()) + " s");
    drop_client(fd);
  }
}

void ClientServer::on_readable(int fd) {
  // A pidfd is readable only once its process exited (a stale event of a number reused
  // within one batch is not).
  if (auto exited = by_pidfd_.find(fd); exited != by_pidfd_.end() && !pidfd_alive(fd)) {
    const int connection = exited->second;
    if (const auto c = clients_.find(connection); c != clients_.end() && c->second.kind == Kind::kHook)
      spdlog::info("pid {} exited: its registration ends, whoever holds its connection", c->second.pid);
    drop_client(connection);
    daemon_.step();
    return;
  }
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  if (it->second.kind == Kind::kNew) {
    on_first_message(fd, it->second);
    return;
  }
  on_hook_messages(fd, it->second);
  daemon_.step();
}

void ClientServer::on_hook_messages(int fd, Client& client) {
  // A hook's messages are kicks, once the workload it runs in, memory requests and claims of
  // what the checkpoint cannot move (for this connection's own process only); a lease
  // sends none (a kick from a command that inherited it is harmless). EOF means the process
  // (and, for a lease, every process that inherited the connection) is gone.
  alignas(wire::WorkloadMessage) unsigned char buf[sizeof(wire::WorkloadMessage) + 1];
  for (int i = 0; i < kMessagesPerWakeup; ++i) {
    const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      const HookMessage m = decode_hook_message(buf, static_cast<size_t>(n));
      if (m.kind == HookMessage::Kind::kDrop) {
        spdlog::warn("pid {} (uid {}): {}: closing its connection", client.pid, client.uid, m.why);
        drop_client(fd);
        return;
      }
      if (client.kind != Kind::kHook) continue;
      const auto slot = static_cast<uint32_t>(client.slot);
      if (m.kind == HookMessage::Kind::kWorkload)
        processes_.set_workload(slot, {m.pod_namespace, m.pod_name, m.container_name});
      if (m.kind == HookMessage::Kind::kMemory)
        if (const ProcessRecord* process = processes_.at(slot)) preemptor_.on_memory_request(*process, m.memory);
      if (m.kind == HookMessage::Kind::kClaim) {
        processes_.add_checkpoint_claims(slot, m.claim);
        const ProcessRecord* process = processes_.at(slot);
        if ((m.claim & shm::kUsesMps) != 0 && process != nullptr && !process->mps) daemon_.foreign_mps(process->tenant);
      }
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    drop_client(fd);
    return;
  }
}

void ClientServer::on_first_message(int fd, Client& client) {
  // Either request fits, with a byte to spare to notice a longer one; SOCK_SEQPACKET
  // delivers one whole message per recv (a longer one is cut, and n says so).
  unsigned char bytes[std::max({sizeof(wire::RegisterRequest), sizeof(wire::ControlRequest),
                                sizeof(wire::PluginRequest)}) +
                      1];
  const ssize_t n = recv(fd, bytes, sizeof bytes, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    drop_client(fd);
    return;
  }
  const FirstMessage m = decode_first_message(bytes, static_cast<size_t>(n));
  const Requester who{client.pid, client.uid, client.control};
  switch (m.kind) {
    case FirstMessage::Kind::kRegister:
      if (client.control) {
        // Hooks are given the tenant socket only; the control socket is for `cuslice` and
        // the device plugin, and keeping it so keeps its connections few and known.
        wire::RegisterReply reply;
        reply.status = wire::RegisterStatus::kRefused;
        send_register_reply(fd, reply, "processes register on the tenant socket (" + sockets_.socket_path +
                                            "), not on the control socket");
        break;
      }
      register_client(fd, client, m.reg);
      return;
    case FirstMessage::Kind::kControl:
      if (ControlDesk::Outcome o = desk_.answer_control(fd, who, m.control); o.after == ControlDesk::After::kKeepAsLease) {
        client.kind = Kind::kLease;
        client.lease = std::move(o.tenant);
        ++leases_[client.lease];
        return;
      }
      break;
    case FirstMessage::Kind::kPlugin:
      desk_.answer_plugin(fd, who, m.plugin);
      break;
    case FirstMessage::Kind::kRefuseRegister: {
      wire::RegisterReply reply;
      reply.status = m.register_status;
      send_register_reply(fd, reply, m.why);
      refusals_.log(client.uid, "refused pid " + std::to_string(client.pid) + ": " + m.why);
      break;
    }
    case FirstMessage::Kind::kRefuseControl: {
      wire::ControlReply reply;
      reply.status = m.control_status;
      reply.daemon_pid = getpid();
      fill_message(reply.message, {m.why});
      send_control_reply(fd, reply);
      break;
    }
    case FirstMessage::Kind::kDrop:
      refusals_.log(client.uid, "closed a connection (pid " + std::to_string(client.pid) +
                                    ") whose first message is not of this protocol");
      break;
  }
  drop_client(fd);
}

void ClientServer::register_client(int fd, Client& client, const wire::RegisterRequest& req) {
  wire::RegisterReply reply;
  if (req.version != wire::kVersion || req.size != sizeof req) {
    reply.status = wire::RegisterStatus::kVersionMismatch;
    send_register_reply(fd, reply, "protocol version " + std::to_string(req.version) +
                                       " is not supported (daemon speaks " + std::to_string(wire::kVersion) + ")");
    drop_client(fd);
    return;
  }
  // Refused, not "full": a hook told "full" runs ungated until it may register, and the
  // processes past a user's limit must not escape the scheduler that way.
  UidUsage& usage = per_uid_[client.uid];
  if (usage.processes >= kMaxProcessesPerUid) {
    reply.status = wire::RegisterStatus::kRefused;
    const std::string why = "uid " + std::to_string(client.uid) + " already has " + std::to_string(usage.processes) +
                            " registered processes, the most one user may have";
    send_register_reply(fd, reply, why);
    refusals_.log(client.uid, "refused pid " + std::to_string(client.pid) + ": " + why);
    drop_client(fd);
    return;
  }
  const Admission a = registrar_.admit({client.pid, client.uid, client.gid, client.start_time, client.cgroup}, req);
  reply.status = a.status;
  if (a.status != wire::RegisterStatus::kOk) {
    if (a.status == wire::RegisterStatus::kRefused)
      refusals_.log(client.uid, "refused pid " + std::to_string(client.pid) + ": " + a.message);
    send_register_reply(fd, reply, a.message);
    drop_client(fd);
    return;
  }
  client.kind = Kind::kHook;
  client.slot = static_cast<int>(a.slot);
  ++usage.processes;
  reply.slot = a.slot;
  reply.tenant = a.tenant;
  reply.flags = a.flags;
  reply.slot_generation = a.slot_generation;
  reply.segment_generation = a.segment_generation;
  std::strncpy(reply.shm_name, a.shm_name.c_str(), sizeof reply.shm_name - 1);
  send_register_reply(fd, reply, "", a.region_fd, a.segment_fd);
}

void ClientServer::release_tenant_connection(const Client& client) {
  const uid_t uid = client.uid;
  UidUsage& usage = per_uid_[uid];
  --usage.connections;
  --tenant_connections_;
  if (client.slot >= 0) {
    const auto slot = static_cast<uint32_t>(client.slot);
    spdlog::info("pid {} left (slot {})", client.pid, slot);
    preemptor_.forget_memory_waits_of(slot);
    if (registrar_.release(slot)) daemon_.tenant_released();
    --usage.processes;
    ledger_.publish_usage();  // the memory it gave back shows at once
  }
  // A uid's counts and refusal report go with its last connection; a flood starts anew.
  if (usage.connections == 0) {
    per_uid_.erase(uid);
    refusals_.forget_if_quiet(uid);
  }
}

void ClientServer::drop_client(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  if (it->second.control) --control_connections_;
  else release_tenant_connection(it->second);
  // A tenant `cuslice run` added goes with the last command that ensured it.
  if (it->second.kind == Kind::kLease && --leases_[it->second.lease] == 0) {
    leases_.erase(it->second.lease);
    daemon_.lease_ended(it->second.lease);
  }
  if (const int pidfd = it->second.pidfd; pidfd >= 0) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, pidfd, nullptr);
    by_pidfd_.erase(pidfd);
    close(pidfd);
  }
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  clients_.erase(it);
  daemon_.connections_changed();
}

}  // namespace cuslice
