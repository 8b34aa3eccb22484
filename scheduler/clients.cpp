// The daemon's clients: the connections on its two sockets, from accept to EOF. A hook's
// first message registers it (a tenant by the assignment rules, a process slot in the
// segment, and the tenant's region handed over with the reply: only here, only to a process
// accepted into that tenant); `cuslice`'s is a control request (describe, reload,
// ensure-tenant), answered here; the device plugin's requests are answered in
// plugin_control.cpp. Every decision about who may do what on which socket belongs in this
// file (socket_protocol.h, "Two sockets"): Client::control, may_control() and
// control_socket_only() are what plugin_control.cpp applies too. Calls the tenant table (reload, apply_config) and one
// scheduling step after a client's kick; never the token itself.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "clock.h"
#include "daemon.h"
#include "ephemeral_tenants.h"
#include "message_decoder.h"
#include "process_info.h"
#include "tenant_assignment.h"

namespace cuslice {
namespace {

// With `region` >= 0, the reply carries that descriptor (SCM_RIGHTS): the tenant region.
void send_reply(int fd, wire::RegisterReply reply, const std::string& message, int region = -1) {
  std::strncpy(reply.message, message.c_str(), sizeof reply.message - 1);
  iovec iov{&reply, sizeof reply};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (region >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &region, sizeof region);
  }
  if (sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(sizeof reply))
    spdlog::warn("could not send a registration reply: {}", std::strerror(errno));
}

void send_control_reply(int fd, const wire::ControlReply& reply) {
  if (send(fd, &reply, sizeof reply, MSG_NOSIGNAL | MSG_DONTWAIT) != sizeof reply)
    spdlog::warn("could not send a control reply: {}", std::strerror(errno));
}

// Lines joined by '\n'; when they do not all fit, as many as fit and a last line "...".
void fill_message(char (&message)[sizeof wire::ControlReply::message], const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) {
    if (text.size() + line.size() + 1 + 4 >= sizeof message) {
      text += "...\n";
      break;
    }
    text += line + "\n";
  }
  std::strncpy(message, text.c_str(), sizeof message - 1);
}

// A hook drains its kicks in one go; a client that sends faster than the daemon reads gets
// this many read per wake-up, so that it cannot keep the loop from everybody else.
constexpr int kMessagesPerWakeup = 64;

}  // namespace

void Daemon::log_refusal(uid_t uid, const std::string& why) {
  UidUsage& u = per_uid_[uid];
  const std::chrono::nanoseconds now{now_ns()};
  if (u.refusal_logged.count() != 0 && now - u.refusal_logged < kRefusalLogInterval) {
    ++u.refusals_unlogged;
    return;
  }
  if (u.refusals_unlogged > 0) {
    spdlog::warn("uid {}: {} ({} more refusals since the last report)", uid, why, u.refusals_unlogged);
  } else {
    spdlog::warn("uid {}: {}", uid, why);
  }
  u.refusals_unlogged = 0;
  u.refusal_logged = now;
}

bool Daemon::may_control(uid_t peer) { return peer == 0 || peer == geteuid(); }

std::string Daemon::control_socket_only(const std::string& what) const {
  return what + " is accepted only on the scheduler's control socket (" + options_.control_socket_path +
         "), not on the socket tenants share";
}

void Daemon::accept_clients(int listen_fd) {
  for (;;) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The connection stays queued; the listening socket stays ready. Stop watching both
        // until the stats timer, so that the loop does not spin on them.
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, control_listen_fd_, nullptr);
        accept_paused_ = true;
        if (!fd_limit_reported_) {
          spdlog::warn("accept: {} ({} connections open): new connections wait until some close",
                       std::strerror(errno), clients_.size());
          fd_limit_reported_ = true;
        }
      } else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
        spdlog::warn("accept: {}", std::strerror(errno));
      }
      return;
    }
    if (fd_limit_reported_) {
      spdlog::info("accepting connections again ({} open)", clients_.size() + 1);
      fd_limit_reported_ = false;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      close(fd);
      continue;
    }
    UidUsage& usage = per_uid_[cred.uid];
    if (usage.connections >= kMaxConnectionsPerUid) {
      close(fd);
      log_refusal(cred.uid, "refused a connection: " + std::to_string(usage.connections) +
                                " open, the most one user may have");
      continue;
    }
    ++usage.connections;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    Client client;
    client.pid = cred.pid;
    client.uid = cred.uid;
    client.gid = cred.gid;
    client.control = listen_fd == control_listen_fd_;
    client.connected = std::chrono::nanoseconds(now_ns());
    clients_[fd] = client;
    update_idle_timer();
  }
}

void Daemon::resume_accepting() {
  bool resumed = true;
  for (const int fd : {listen_fd_, control_listen_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0 && errno != EEXIST) resumed = false;
  }
  if (resumed) accept_paused_ = false;
}

void Daemon::close_silent_clients() {
  const std::chrono::nanoseconds now{now_ns()};
  std::vector<int> silent;
  for (const auto& [fd, client] : clients_)
    if (client.kind == ClientKind::kNew && now - client.connected > kFirstMessageTimeout) silent.push_back(fd);
  for (const int fd : silent) {
    const Client& client = clients_.at(fd);
    log_refusal(client.uid, "closed a connection (pid " + std::to_string(client.pid) + ") that sent nothing for " +
                                std::to_string(kFirstMessageTimeout.count()) + " s");
    drop_client(fd);
  }
}

void Daemon::on_client_readable(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  if (it->second.kind == ClientKind::kNew) {
    on_first_message(fd, it->second);
    return;
  }
  // A hook's messages are kicks, once the workload it runs in, and memory requests; a lease
  // sends none (a kick from a command that inherited it is harmless). EOF means the process
  // (and, for a lease, every process that inherited the connection) is gone.
  alignas(wire::WorkloadMessage) unsigned char buf[sizeof(wire::WorkloadMessage) + 1];
  for (int i = 0; i < kMessagesPerWakeup; ++i) {
    const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      const HookMessage m = decode_hook_message(buf, static_cast<size_t>(n));
      if (m.kind == HookMessage::Kind::kDrop) {
        spdlog::warn("pid {} (uid {}): {}: closing its connection", it->second.pid, it->second.uid, m.why);
        drop_client(fd);
        break;
      }
      if (it->second.kind == ClientKind::kHook && m.kind == HookMessage::Kind::kWorkload) {
        it->second.workload = {m.pod_namespace, m.pod_name, m.container_name};
      }
      if (it->second.kind == ClientKind::kHook && m.kind == HookMessage::Kind::kMemory)
        on_memory_request(it->second, m.memory);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    drop_client(fd);
    break;
  }
  schedule();
}

void Daemon::on_first_message(int fd, Client& client) {
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
  switch (m.kind) {
    case FirstMessage::Kind::kRegister:
      if (client.control) {
        // Hooks are given the tenant socket only; the control socket is for `cuslice` and
        // the device plugin, and keeping it so keeps its connections few and known.
        wire::RegisterReply reply;
        reply.status = wire::RegisterStatus::kRefused;
        send_reply(fd, reply, "processes register on the tenant socket (" + options_.socket_path +
                                  "), not on the control socket");
        break;
      }
      register_client(fd, client, m.reg);
      return;
    case FirstMessage::Kind::kControl:
      answer_control(fd, client, m.control);
      return;
    case FirstMessage::Kind::kPlugin:
      answer_plugin(fd, client, m.plugin);
      return;
    case FirstMessage::Kind::kRefuseRegister: {
      wire::RegisterReply reply;
      reply.status = m.register_status;
      send_reply(fd, reply, m.why);
      log_refusal(client.uid, "refused pid " + std::to_string(client.pid) + ": " + m.why);
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
      log_refusal(client.uid, "closed a connection (pid " + std::to_string(client.pid) +
                                  ") whose first message is not of this protocol");
      break;
  }
  drop_client(fd);
}

void Daemon::answer_control(int fd, Client& client, const wire::ControlRequest& req) {
  wire::ControlReply reply;
  reply.daemon_pid = getpid();
  reply.flags = options_.ephemeral ? shm::Segment::kEphemeral : 0;
  std::strncpy(reply.shm_name, segment_.name().c_str(), sizeof reply.shm_name - 1);
  std::strncpy(reply.config_path, options_.config_path.c_str(), sizeof reply.config_path - 1);
  bool keep = false;
  if (req.version != wire::kControlVersion || req.size != sizeof req) {
    reply.status = wire::ControlStatus::kVersionMismatch;
    fill_message(reply.message, {"control protocol version " + std::to_string(req.version) +
                                 " is not supported (daemon speaks " + std::to_string(wire::kControlVersion) + ")"});
  } else if (req.command == wire::ControlCommand::kDescribe) {
    // `cuslice status` describes, then reads the segment: give it the counters of now.
    publish_usage();
    reply.status = wire::ControlStatus::kOk;
  } else if (req.command == wire::ControlCommand::kWorkloads) {
    answer_workloads(fd);  // a reply of its own
    return;
  } else if (req.command == wire::ControlCommand::kPreemption) {
    reply.status = wire::ControlStatus::kOk;
    fill_message(reply.message, preemption_report());
  } else if (req.command != wire::ControlCommand::kReload && req.command != wire::ControlCommand::kEnsureTenant) {
    reply.status = wire::ControlStatus::kBadRequest;
    fill_message(reply.message, {"unknown control command"});
  } else if (req.command == wire::ControlCommand::kEnsureTenant && !options_.ephemeral) {
    // Before the uid check: `cuslice run` asks every daemon, and learns here to leave a
    // daemon with a file alone.
    reply.status = wire::ControlStatus::kUnsupported;
    fill_message(reply.message, {"this scheduler runs from " + options_.config_path +
                                 ": tenants are added there, not by `cuslice run`"});
  } else if (!client.control) {
    // Whoever asks: root in a container that was given the tenant socket is uid 0 here.
    reply.status = wire::ControlStatus::kForbidden;
    fill_message(reply.message, {control_socket_only(req.command == wire::ControlCommand::kReload ? "reload"
                                                                                                   : "adding a tenant")});
    log_refusal(client.uid, "refused a control request of pid " + std::to_string(client.pid) +
                                " on the tenant socket");
  } else if (!may_control(client.uid)) {
    reply.status = wire::ControlStatus::kForbidden;
    fill_message(reply.message, {"uid " + std::to_string(client.uid) + " may not change this scheduler (only root and uid " +
                                 std::to_string(geteuid()) + ")"});
  } else if (req.command == wire::ControlCommand::kReload) {
    const ReloadOutcome outcome = reload_notifying_systemd();
    reply.status = outcome.ok ? wire::ControlStatus::kOk
                   : options_.ephemeral ? wire::ControlStatus::kUnsupported
                                        : wire::ControlStatus::kFailed;
    fill_message(reply.message, outcome.ok ? std::vector<std::string>{"reloaded " + options_.config_path}
                                           : outcome.errors);
  } else {
    const EnsureOutcome outcome = ensure_tenant(config_, req.tenant);
    if (outcome.added) {
      apply_config(config_);
      schedule();
    }
    reply.status = outcome.ok ? wire::ControlStatus::kOk : wire::ControlStatus::kFailed;
    fill_message(reply.message, {outcome.message});
    spdlog::log(outcome.ok ? spdlog::level::info : spdlog::level::warn, "pid {}: {}", client.pid, outcome.message);
    keep = outcome.ok;
  }
  reply.tenants = static_cast<uint32_t>(config_.tenants.size());
  send_control_reply(fd, reply);
  if (keep) {
    client.kind = ClientKind::kLease;
  } else {
    drop_client(fd);
  }
}

void Daemon::register_client(int fd, Client& client, const wire::RegisterRequest& request) {
  wire::RegisterRequest req = request;
  wire::RegisterReply reply;
  if (req.version != wire::kVersion || req.size != sizeof req) {
    reply.status = wire::RegisterStatus::kVersionMismatch;
    send_reply(fd, reply, "protocol version " + std::to_string(req.version) + " is not supported (daemon speaks " +
                              std::to_string(wire::kVersion) + ")");
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
    send_reply(fd, reply, why);
    log_refusal(client.uid, "refused pid " + std::to_string(client.pid) + ": " + why);
    drop_client(fd);
    return;
  }
  // The decoder checked the name's form and bounded the declared charges.
  req.tenant[sizeof req.tenant - 1] = '\0';
  const PeerIdentity peer{client.pid, client.uid, client.gid, process_cgroup(client.pid)};
  // A device plugin tenant is joined with its credential from its pod only (plugin_tenants.h).
  const PluginJoin join = plugin_tenants_.check_join(req.tenant, peer.cgroup);
  const Assignment assignment = join.plugin ? Assignment{join.ok ? 0 : -1, join.reason}
                                            : assign_tenant(config_, peer, req.tenant);
  if (assignment.tenant < 0) {
    log_refusal(client.uid, "refused pid " + std::to_string(client.pid) + ": " + assignment.reason);
    reply.status = wire::RegisterStatus::kRefused;
    send_reply(fd, reply, assignment.reason);
    drop_client(fd);
    return;
  }
  const std::string& name = join.plugin ? join.tenant : config_.tenants[assignment.tenant].name;
  uint32_t tenant = shm::kNoTenant;
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t)
    if (segment_->tenants[t].state.load() == shm::Tenant::kActive && name == segment_->tenants[t].name) tenant = t;
  uint32_t slot = shm::kMaxProcesses;
  for (uint32_t s = 0; s < shm::kMaxProcesses && slot == shm::kMaxProcesses; ++s)
    if (segment_->processes[s].state.load() == shm::ProcessSlot::kFree) slot = s;
  std::string problem = tenant == shm::kNoTenant              ? "tenant table full"
                        : slot == shm::kMaxProcesses           ? "all process slots are in use"
                                                               : "";
  if (problem.empty() && regions_.get(tenant) == nullptr) {
    try {
      regions_.create(tenant);  // its creation failed when the tenant was added
    } catch (const std::system_error& e) {
      spdlog::error("tenant {}: {}", name, e.what());
      problem = "the scheduler cannot create the tenant's shared memory";
    }
  }
  if (!problem.empty()) {
    reply.status = wire::RegisterStatus::kFull;
    send_reply(fd, reply, problem);
    drop_client(fd);
    return;
  }

  shm::ProcessSlot& ps = segment_->processes[slot];
  shm::TenantRegion& region = *regions_.get(tenant);
  shm::ProcessUse& use = region.processes[slot];
  ps.tenant.store(tenant, std::memory_order_relaxed);
  ps.pid.store(client.pid, std::memory_order_relaxed);
  ps.start_time.store(process_start_time(client.pid).value_or(0), std::memory_order_relaxed);
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    ps.gpu_flags[g].store(0, std::memory_order_relaxed);
    use.gpu_flags[g].store(0, std::memory_order_relaxed);
    // A process registering again after a daemon restart brings the bytes it holds; no
    // claim holds more than the card.
    const uint64_t charged =
        config_.scheduler.gpu_memory ? std::min(req.charged[g], *config_.scheduler.gpu_memory) : req.charged[g];
    use.charged[g].store(charged, std::memory_order_relaxed);
    add_saturating(region.gpu[g].memory_used, charged);
  }
  // Nothing of the slot's previous process: the new one starts its requests from scratch.
  use.checkpoint_flags.store(0, std::memory_order_relaxed);
  ps.memory_decision.store(0, std::memory_order_relaxed);
  const uint64_t generation = ps.generation.fetch_add(1, std::memory_order_relaxed) + 1;
  ps.state.store(shm::ProcessSlot::kActive, std::memory_order_release);
  client.kind = ClientKind::kHook;
  client.slot = static_cast<int>(slot);
  client.tenant = tenant;
  ++usage.processes;
  ++tenant_processes_[tenant];
  if (join.plugin) plugin_tenants_.joined(name, peer.cgroup);

  reply.status = wire::RegisterStatus::kOk;
  reply.slot = slot;
  reply.tenant = tenant;
  reply.slot_generation = generation;
  reply.segment_generation = segment_->generation;
  std::strncpy(reply.shm_name, segment_.name().c_str(), sizeof reply.shm_name - 1);
  send_reply(fd, reply, "", regions_.fd(tenant));
  spdlog::info("pid {} (uid {}) joined tenant {} in slot {}", client.pid, client.uid, name, slot);
}

void Daemon::drop_client(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  UidUsage& usage = per_uid_[it->second.uid];
  --usage.connections;
  if (it->second.slot >= 0) {
    spdlog::info("pid {} left (slot {})", it->second.pid, it->second.slot);
    forget_memory_waits_of(static_cast<uint32_t>(it->second.slot));
    release_slot(static_cast<uint32_t>(it->second.slot), it->second.tenant);
    --usage.processes;
    publish_usage();  // the memory it gave back shows at once
  }
  // A uid's refusal log state goes with its last connection; a flood starts a new report.
  if (usage.connections == 0 && usage.refusals_unlogged == 0) per_uid_.erase(it->second.uid);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  clients_.erase(it);
  update_idle_timer();
}

void Daemon::release_slot(uint32_t slot, uint32_t tenant) {
  shm::ProcessSlot& ps = segment_->processes[slot];
  if (shm::TenantRegion* region = regions_.get(tenant)) {
    shm::ProcessUse& use = region->processes[slot];
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      // Whatever the record says, the counter only goes down to zero.
      sub_saturating(region->gpu[g].memory_used, use.charged[g].exchange(0, std::memory_order_acq_rel));
      use.gpu_flags[g].store(0, std::memory_order_relaxed);
    }
  }
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) ps.gpu_flags[g].store(0, std::memory_order_relaxed);
  ps.pid.store(0, std::memory_order_relaxed);
  ps.state.store(shm::ProcessSlot::kFree, std::memory_order_release);
  if (tenant >= shm::kMaxTenants || --tenant_processes_[tenant] > 0) return;
  // Last process gone: whatever is still counted was leaked by a process killed between
  // its two bookkeeping steps.
  if (shm::TenantRegion* region = regions_.get(tenant))
    for (shm::TenantGpuUse& g : region->gpu) g.memory_used.store(0, std::memory_order_relaxed);
  for (shm::TenantGpu& g : segment_->tenants[tenant].gpu) g.memory_used.store(0, std::memory_order_relaxed);
  if (segment_->tenants[tenant].state.load() == shm::Tenant::kRetired) {
    free_tenant_entry(tenant);
    for (TokenPolicy& p : policies_) p.reconfigure(policy_params_, tenant_params_);
  }
}

TenantWorkloads Daemon::workloads() const {
  TenantWorkloads out;
  std::map<std::string, int> seen;  // processes per tenant so far
  for (const auto& [fd, client] : clients_) {
    if (client.kind != ClientKind::kHook || client.slot < 0) continue;
    const uint32_t t = client.tenant;
    if (t >= shm::kMaxTenants) continue;
    const std::string name = segment_->tenants[t].name;
    Workload& w = out[name];
    if (seen[name]++ == 0) {
      w = client.workload;
      continue;
    }
    // A field stays only while every process of the tenant reported the same value.
    if (w.pod_namespace != client.workload.pod_namespace) w.pod_namespace.clear();
    if (w.pod_name != client.workload.pod_name) w.pod_name.clear();
    if (w.container_name != client.workload.container_name) w.container_name.clear();
  }
  for (auto& [name, w] : plugin_tenants_.workloads()) out[name] = std::move(w);
  return out;
}

void Daemon::answer_workloads(int fd) {
  auto list = std::make_unique<wire::WorkloadList>();
  for (const auto& [name, w] : workloads()) {
    if (list->count == shm::kMaxTenants) break;
    if (w.pod_namespace.empty() && w.pod_name.empty() && w.container_name.empty()) continue;
    wire::TenantWorkload& out = list->tenants[list->count++];
    std::strncpy(out.tenant, name.c_str(), sizeof out.tenant - 1);
    std::strncpy(out.pod_namespace, w.pod_namespace.c_str(), sizeof out.pod_namespace - 1);
    std::strncpy(out.pod_name, w.pod_name.c_str(), sizeof out.pod_name - 1);
    std::strncpy(out.container_name, w.container_name.c_str(), sizeof out.container_name - 1);
  }
  if (send(fd, list.get(), sizeof *list, MSG_NOSIGNAL | MSG_DONTWAIT) != sizeof *list)
    spdlog::warn("could not send the workloads: {}", std::strerror(errno));
  drop_client(fd);
}

}  // namespace cuslice
