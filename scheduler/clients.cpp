// The daemon's clients: the connections on its socket, from accept to EOF. A hook's first
// message registers it (a tenant by the assignment rules, a process slot in the segment, and
// the tenant's region handed over with the reply: only here, only to a process accepted into
// that tenant); `cuslice`'s is a control request (describe, reload, ensure-tenant), answered
// here; the device plugin's requests are answered in plugin_control.cpp. Every decision
// about who may do what on the socket belongs in this file. Calls the tenant table (reload,
// apply_config) and one scheduling step after a client's kick; never the token itself.
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

#include "daemon.h"
#include "ephemeral_tenants.h"
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

// Who may change the daemon's configuration: root, or whoever runs the daemon (the user
// whose `cuslice run` auto-started it). Everybody else may only register and describe.
bool may_control(uid_t peer) { return peer == 0 || peer == geteuid(); }

}  // namespace

void Daemon::accept_clients() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EINTR) spdlog::warn("accept: {}", std::strerror(errno));
      return;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      close(fd);
      continue;
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    clients_[fd] = Client{ClientKind::kNew, -1, shm::kNoTenant, cred.pid, cred.uid, cred.gid, {}};
    update_idle_timer();
  }
}

void Daemon::on_client_readable(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  if (it->second.kind == ClientKind::kNew) {
    on_first_message(fd, it->second);
    return;
  }
  // A hook's messages are kicks and, once, the workload it runs in; a lease sends none.
  // Drain them; EOF means the process (and, for a lease, every process that inherited the
  // connection) is gone.
  alignas(wire::WorkloadMessage) char buf[sizeof(wire::WorkloadMessage) + 1];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(sizeof(wire::MemoryRequest)) && it->second.kind == ClientKind::kHook) {
      wire::MemoryRequest msg;
      std::memcpy(&msg, buf, sizeof msg);
      if (msg.magic == wire::kMemoryMagic && msg.size == sizeof msg && msg.version == wire::kVersion)
        on_memory_request(it->second, msg);
    }
    if (n == static_cast<ssize_t>(sizeof(wire::WorkloadMessage)) && it->second.kind == ClientKind::kHook) {
      wire::WorkloadMessage msg;
      std::memcpy(&msg, buf, sizeof msg);
      if (msg.magic == wire::kWorkloadMagic && msg.size == sizeof msg) {
        const auto text = [](const char* field, size_t size) { return std::string(field, strnlen(field, size)); };
        it->second.workload = {text(msg.pod_namespace, sizeof msg.pod_namespace),
                               text(msg.pod_name, sizeof msg.pod_name),
                               text(msg.container_name, sizeof msg.container_name)};
      }
    }
    if (n > 0) continue;
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    drop_client(fd);
    break;
  }
  schedule();
}

void Daemon::on_first_message(int fd, Client& client) {
  // Either message fits, with a byte to spare to notice a longer one; SOCK_SEQPACKET
  // delivers one whole message per recv (a longer one is cut, and n says so).
  unsigned char bytes[std::max({sizeof(wire::RegisterRequest), sizeof(wire::ControlRequest),
                                sizeof(wire::PluginRequest)}) +
                      1];
  const ssize_t n = recv(fd, bytes, sizeof bytes, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  uint32_t magic = 0;
  if (n >= static_cast<ssize_t>(sizeof magic)) std::memcpy(&magic, bytes, sizeof magic);
  if (magic == wire::kMagic && n == static_cast<ssize_t>(sizeof(wire::RegisterRequest))) {
    wire::RegisterRequest req;
    std::memcpy(&req, bytes, sizeof req);
    register_client(fd, client, req);
  } else if (magic == wire::kControlMagic && n >= static_cast<ssize_t>(offsetof(wire::ControlRequest, command))) {
    wire::ControlRequest req;
    // Header only from a message of another size: answer_control sees its version.
    std::memcpy(&req, bytes, n == static_cast<ssize_t>(sizeof req) ? sizeof req : offsetof(wire::ControlRequest, command));
    answer_control(fd, client, req);
  } else if (magic == wire::kPluginMagic && n >= static_cast<ssize_t>(offsetof(wire::PluginRequest, command))) {
    wire::PluginRequest req;
    std::memcpy(&req, bytes, n == static_cast<ssize_t>(sizeof req) ? sizeof req : offsetof(wire::PluginRequest, command));
    answer_plugin(fd, client, req);
  } else {
    drop_client(fd);
  }
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
  req.tenant[sizeof req.tenant - 1] = '\0';
  const PeerIdentity peer{client.pid, client.uid, client.gid, process_cgroup(client.pid)};
  // A device plugin tenant is joined with its credential from its pod only (plugin_tenants.h).
  const PluginJoin join = plugin_tenants_.check_join(req.tenant, peer.cgroup);
  const Assignment assignment = join.plugin ? Assignment{join.ok ? 0 : -1, join.reason}
                                            : assign_tenant(config_, peer, req.tenant);
  if (assignment.tenant < 0) {
    spdlog::warn("refused pid {} (uid {}): {}", client.pid, client.uid, assignment.reason);
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
    // A process registering again after a daemon restart brings the bytes it holds.
    use.charged[g].store(req.charged[g], std::memory_order_relaxed);
    add_saturating(region.gpu[g].memory_used, req.charged[g]);
  }
  // Nothing of the slot's previous process: the new one starts its requests from scratch.
  use.checkpoint_flags.store(0, std::memory_order_relaxed);
  ps.memory_decision.store(0, std::memory_order_relaxed);
  const uint64_t generation = ps.generation.fetch_add(1, std::memory_order_relaxed) + 1;
  ps.state.store(shm::ProcessSlot::kActive, std::memory_order_release);
  client.kind = ClientKind::kHook;
  client.slot = static_cast<int>(slot);
  client.tenant = tenant;
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
  if (it->second.slot >= 0) {
    spdlog::info("pid {} left (slot {})", it->second.pid, it->second.slot);
    forget_memory_waits_of(static_cast<uint32_t>(it->second.slot));
    release_slot(static_cast<uint32_t>(it->second.slot), it->second.tenant);
    publish_usage();  // the memory it gave back shows at once
  }
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
