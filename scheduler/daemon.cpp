#include "daemon.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "futex.h"
#include "process_info.h"
#include "socket_protocol.h"
#include "tenant_assignment.h"

namespace cuslice {
namespace {

using Nanos = TokenPolicy::Nanos;

Nanos monotonic_now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::chrono::seconds(ts.tv_sec) + Nanos(ts.tv_nsec);
}

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

Config load_or_throw(const std::string& path) {
  ConfigResult result = load_config_file(path);
  if (!result.ok()) {
    for (const ConfigError& e : result.errors) spdlog::error("{}", e.to_string());
    throw std::runtime_error("invalid configuration " + path);
  }
  return std::move(result.config);
}

PolicyParams policy_params(const Config& config) {
  PolicyParams p;
  p.quantum = config.scheduler.quantum;
  p.limit_window = config.scheduler.limit_window;
  // Queued work is kept short by the hook; a holder that does not drain within a slice is
  // not waited for longer than the slice itself.
  p.drain_timeout = config.scheduler.quantum;
  return p;
}

uint64_t make_generation() {
  return static_cast<uint64_t>(monotonic_now().count()) ^ (static_cast<uint64_t>(getpid()) << 40);
}

// Refuses to start beside a live daemon; removes the socket file a dead one left behind.
int listen_on(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) throw std::runtime_error("socket path too long: " + path);
  std::strcpy(addr.sun_path, path.c_str());

  const int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  const bool live = probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  if (probe >= 0) close(probe);
  if (live) throw std::runtime_error("another scheduler is already listening on " + path);
  unlink(path.c_str());
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);

  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw_errno("socket");
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw_errno("bind " + path);
  // Any local user's process may register; tenants are decided from kernel credentials.
  chmod(path.c_str(), 0666);
  if (listen(fd, 128) != 0) throw_errno("listen " + path);
  return fd;
}

void send_reply(int fd, wire::RegisterReply reply, const std::string& message) {
  std::strncpy(reply.message, message.c_str(), sizeof reply.message - 1);
  if (send(fd, &reply, sizeof reply, MSG_NOSIGNAL | MSG_DONTWAIT) != sizeof reply)
    spdlog::warn("could not send a registration reply: {}", std::strerror(errno));
}

}  // namespace

Daemon::Daemon(DaemonOptions options)
    : options_(std::move(options)),
      config_(load_or_throw(options_.config_path)),
      policy_params_(policy_params(config_)),
      listen_fd_(listen_on(options_.socket_path)),
      segment_(options_.shm_name, make_generation()),
      tenant_params_(shm::kMaxTenants) {
  // Connections queue until run(): nobody is answered before the segment is published.

  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGHUP, SIGTERM, SIGINT}) sigaddset(&signals, s);
  if (sigprocmask(SIG_BLOCK, &signals, nullptr) != 0) throw_errno("sigprocmask");
  signal(SIGPIPE, SIG_IGN);
  signal_fd_ = signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (signal_fd_ < 0 || timer_fd_ < 0 || epoll_fd_ < 0) throw_errno("signalfd/timerfd/epoll");
  for (int fd : {listen_fd_, signal_fd_, timer_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) throw_errno("epoll_ctl");
  }

  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) policies_.emplace_back(policy_params_, tenant_params_);
  apply_config(config_);
  segment_->quantum_ns = static_cast<uint64_t>(config_.scheduler.quantum.count());
  segment_->state.store(static_cast<uint32_t>(shm::DaemonState::kRunning), std::memory_order_release);
  spdlog::info("serving {} tenants on {} (shared memory {})", config_.tenants.size(),
               options_.socket_path, options_.shm_name);
}

Daemon::~Daemon() {
  for (const auto& [fd, client] : clients_) close(fd);
  for (int fd : {listen_fd_, epoll_fd_, signal_fd_, timer_fd_})
    if (fd >= 0) close(fd);
  unlink(options_.socket_path.c_str());
}

void Daemon::apply_config(const Config& config) {
  std::array<bool, shm::kMaxTenants> kept{};
  const std::vector<double> shares = config.effective_shares();
  for (size_t i = 0; i < config.tenants.size(); ++i) {
    const TenantConfig& tc = config.tenants[i];
    // Same name, same index: processes already registered keep their tenant.
    int index = -1;
    for (uint32_t t = 0; t < shm::kMaxTenants && index < 0; ++t)
      if (segment_->tenants[t].state.load() != shm::Tenant::kFree && tc.name == segment_->tenants[t].name)
        index = static_cast<int>(t);
    for (uint32_t t = 0; t < shm::kMaxTenants && index < 0; ++t)
      if (segment_->tenants[t].state.load() == shm::Tenant::kFree) index = static_cast<int>(t);
    if (index < 0) {
      spdlog::error("no room for tenant {}: removed tenants still have processes", tc.name);
      continue;
    }
    shm::Tenant& t = segment_->tenants[index];
    if (t.state.load() == shm::Tenant::kFree) {
      std::strncpy(t.name, tc.name.c_str(), sizeof t.name - 1);
    }
    uint64_t quota = shm::kUnlimited;
    uint32_t ppm = 0;
    if (tc.memory && tc.memory->kind == SizeSpec::Kind::kBytes) {
      quota = tc.memory->bytes;
    } else if (tc.memory && config.scheduler.gpu_memory) {
      quota = tc.memory->resolve(*config.scheduler.gpu_memory);
    } else if (tc.memory) {
      ppm = static_cast<uint32_t>(tc.memory->percent * 10000.0);
    }
    t.memory_quota.store(quota, std::memory_order_relaxed);
    t.memory_quota_ppm.store(ppm, std::memory_order_relaxed);
    t.priority.store(static_cast<uint32_t>(tc.priority), std::memory_order_relaxed);
    t.state.store(shm::Tenant::kActive, std::memory_order_release);
    tenant_params_[index] = {true, static_cast<int>(tc.priority), shares[i] / 100.0, tc.limit_percent / 100.0};
    kept[index] = true;
  }
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (kept[t] || segment_->tenants[t].state.load() == shm::Tenant::kFree) continue;
    if (tenant_processes_[t] > 0) {
      // Its processes keep running under the old parameters; nobody new may join.
      segment_->tenants[t].state.store(shm::Tenant::kRetired, std::memory_order_release);
      spdlog::info("tenant {} removed; kept until its {} processes exit", segment_->tenants[t].name,
                   tenant_processes_[t]);
    } else {
      segment_->tenants[t].state.store(shm::Tenant::kFree, std::memory_order_release);
      tenant_params_[t] = {};
    }
  }
  for (TokenPolicy& p : policies_) p.reconfigure(policy_params_, tenant_params_);
}

void Daemon::reload() {
  ConfigResult result = load_config_file(options_.config_path);
  if (!result.ok()) {
    for (const ConfigError& e : result.errors) spdlog::error("{}", e.to_string());
    spdlog::error("reload of {} refused: keeping the running configuration", options_.config_path);
    return;
  }
  config_ = std::move(result.config);
  policy_params_ = policy_params(config_);
  apply_config(config_);
  segment_->quantum_ns = static_cast<uint64_t>(config_.scheduler.quantum.count());
  spdlog::info("reloaded {}: {} tenants", options_.config_path, config_.tenants.size());
  schedule();
}

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
    clients_[fd] = Client{-1, cred.pid, cred.uid, cred.gid};
  }
}

void Daemon::on_client_readable(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  if (it->second.slot < 0) {
    register_client(fd, it->second);
    return;
  }
  // Registered: the only messages are kicks. Drain them; EOF means the process is gone.
  char buf[64];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    drop_client(fd);
    break;
  }
  schedule();
}

void Daemon::register_client(int fd, Client& client) {
  wire::RegisterRequest req;
  wire::RegisterReply reply;
  const ssize_t n = recv(fd, &req, sizeof req, MSG_DONTWAIT);
  if (n < 0 && errno == EAGAIN) return;
  if (n != static_cast<ssize_t>(sizeof req) || req.magic != wire::kMagic) {
    drop_client(fd);
    return;
  }
  if (req.version != wire::kVersion || req.size != sizeof req) {
    reply.status = wire::RegisterStatus::kVersionMismatch;
    send_reply(fd, reply, "protocol version " + std::to_string(req.version) + " is not supported (daemon speaks " +
                              std::to_string(wire::kVersion) + ")");
    drop_client(fd);
    return;
  }
  req.tenant[sizeof req.tenant - 1] = '\0';
  const PeerIdentity peer{client.pid, client.uid, client.gid, process_cgroup(client.pid)};
  const Assignment assignment = assign_tenant(config_, peer, req.tenant);
  if (assignment.tenant < 0) {
    spdlog::warn("refused pid {} (uid {}): {}", client.pid, client.uid, assignment.reason);
    reply.status = wire::RegisterStatus::kRefused;
    send_reply(fd, reply, assignment.reason);
    drop_client(fd);
    return;
  }
  const std::string& name = config_.tenants[assignment.tenant].name;
  uint32_t tenant = shm::kNoTenant;
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t)
    if (segment_->tenants[t].state.load() == shm::Tenant::kActive && name == segment_->tenants[t].name) tenant = t;
  uint32_t slot = shm::kMaxProcesses;
  for (uint32_t s = 0; s < shm::kMaxProcesses && slot == shm::kMaxProcesses; ++s)
    if (segment_->processes[s].state.load() == shm::ProcessSlot::kFree) slot = s;
  if (tenant == shm::kNoTenant || slot == shm::kMaxProcesses) {
    reply.status = wire::RegisterStatus::kFull;
    send_reply(fd, reply, tenant == shm::kNoTenant ? "tenant table full" : "all process slots are in use");
    drop_client(fd);
    return;
  }

  shm::ProcessSlot& ps = segment_->processes[slot];
  ps.tenant.store(tenant, std::memory_order_relaxed);
  ps.pid.store(client.pid, std::memory_order_relaxed);
  ps.start_time.store(process_start_time(client.pid).value_or(0), std::memory_order_relaxed);
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    ps.gpu_flags[g].store(0, std::memory_order_relaxed);
    // A process registering again after a daemon restart brings the bytes it holds.
    ps.charged[g].store(req.charged[g], std::memory_order_relaxed);
    segment_->tenants[tenant].gpu[g].memory_used.fetch_add(req.charged[g], std::memory_order_relaxed);
  }
  const uint64_t generation = ps.generation.fetch_add(1, std::memory_order_relaxed) + 1;
  ps.state.store(shm::ProcessSlot::kActive, std::memory_order_release);
  client.slot = static_cast<int>(slot);
  ++tenant_processes_[tenant];

  reply.status = wire::RegisterStatus::kOk;
  reply.slot = slot;
  reply.tenant = tenant;
  reply.slot_generation = generation;
  reply.segment_generation = segment_->generation;
  std::strncpy(reply.shm_name, segment_.name().c_str(), sizeof reply.shm_name - 1);
  send_reply(fd, reply, "");
  spdlog::info("pid {} (uid {}) joined tenant {} in slot {}", client.pid, client.uid, name, slot);
}

void Daemon::drop_client(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  if (it->second.slot >= 0) {
    spdlog::info("pid {} left (slot {})", it->second.pid, it->second.slot);
    release_slot(static_cast<uint32_t>(it->second.slot));
  }
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  clients_.erase(it);
}

void Daemon::release_slot(uint32_t slot) {
  shm::ProcessSlot& ps = segment_->processes[slot];
  const uint32_t tenant = ps.tenant.load(std::memory_order_relaxed);
  shm::Tenant& t = segment_->tenants[tenant];
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    const uint64_t charged = ps.charged[g].exchange(0, std::memory_order_acq_rel);
    uint64_t used = t.gpu[g].memory_used.load(std::memory_order_relaxed);
    while (!t.gpu[g].memory_used.compare_exchange_weak(used, used - std::min(used, charged))) {
    }
    ps.gpu_flags[g].store(0, std::memory_order_relaxed);
  }
  ps.pid.store(0, std::memory_order_relaxed);
  ps.state.store(shm::ProcessSlot::kFree, std::memory_order_release);
  if (--tenant_processes_[tenant] > 0) return;
  // Last process gone: whatever is still counted was leaked by a process killed between
  // its two bookkeeping steps.
  for (shm::TenantGpu& g : t.gpu) g.memory_used.store(0, std::memory_order_relaxed);
  if (t.state.load() == shm::Tenant::kRetired) {
    t.state.store(shm::Tenant::kFree, std::memory_order_release);
    tenant_params_[tenant] = {};
    for (TokenPolicy& p : policies_) p.reconfigure(policy_params_, tenant_params_);
  }
}

void Daemon::schedule() {
  const Nanos now = monotonic_now();
  // GPU time reported since the last step.
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (!tenant_params_[t].present) continue;
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      const uint64_t total = segment_->tenants[t].gpu[g].gpu_time_ns.load(std::memory_order_relaxed);
      const uint64_t delta = total - gpu_time_seen_[t][g];
      gpu_time_seen_[t][g] = total;
      if (delta > 0) policies_[g].charge(t, Nanos(delta), now);
    }
  }
  // Demand, from the slots of registered processes.
  std::vector<std::vector<TenantActivity>> activity(shm::kMaxGpus,
                                                    std::vector<TenantActivity>(shm::kMaxTenants));
  std::array<uint64_t, shm::kMaxGpus> waiting{};
  for (const auto& [fd, client] : clients_) {
    if (client.slot < 0) continue;
    const shm::ProcessSlot& ps = segment_->processes[client.slot];
    const uint32_t t = ps.tenant.load(std::memory_order_relaxed);
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      const uint32_t flags = ps.gpu_flags[g].load(std::memory_order_acquire);
      const bool waits = (flags & shm::ProcessSlot::kWaitersMask) != 0;
      const bool busy = (flags & shm::ProcessSlot::kBusy) != 0;
      activity[g][t].demand |= waits || busy;
      activity[g][t].queued |= busy && !waits;
      if (waits) waiting[g] |= uint64_t{1} << t;
    }
  }
  Nanos wake = TokenPolicy::kNever;
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    shm::GpuState& gs = segment_->gpus[g];
    // Drop bits of tenants that no longer wait; bits set since the scan above stay.
    gs.waiting_tenants.fetch_and(waiting[g] | ~gs.waiting_tenants.load(), std::memory_order_relaxed);
    const TokenPolicy::Decision d = policies_[g].step(now, activity[g]);
    wake = std::min(wake, d.wake_at);
    if (gs.holder.load(std::memory_order_relaxed) == d.holder) continue;
    gs.holder.store(d.holder, std::memory_order_release);
    gs.grant_seq.fetch_add(1, std::memory_order_release);
    gs.handoffs.fetch_add(1, std::memory_order_relaxed);
    futex_wake_all(&gs.grant_seq);
    spdlog::debug("gpu {}: token -> {}", g, d.holder == kNoHolder ? "(none)" : segment_->tenants[d.holder].name);
  }
  arm_timer(wake);
}

void Daemon::arm_timer(Nanos wake_at) {
  itimerspec spec{};
  if (wake_at != TokenPolicy::kNever) {
    // An absolute time already past still fires; 0 would disarm.
    const Nanos at = std::max(wake_at, Nanos(1));
    spec.it_value.tv_sec = at.count() / 1'000'000'000;
    spec.it_value.tv_nsec = at.count() % 1'000'000'000;
  }
  timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
}

void Daemon::stop() {
  sd_notify(0, "STOPPING=1");
  // Tell every hook, waiters first: they wake, see kStopped and run ungated.
  segment_->state.store(static_cast<uint32_t>(shm::DaemonState::kStopped), std::memory_order_release);
  for (shm::GpuState& gs : segment_->gpus) {
    gs.holder.store(shm::kNoTenant, std::memory_order_release);
    gs.grant_seq.fetch_add(1, std::memory_order_release);
    futex_wake_all(&gs.grant_seq);
  }
  spdlog::info("stopped");
}

int Daemon::run() {
  sd_notify(0, "READY=1");
  epoll_event events[64];
  for (;;) {
    const int n = epoll_wait(epoll_fd_, events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("epoll_wait");
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd_) {
        accept_clients();
      } else if (fd == timer_fd_) {
        uint64_t expirations;
        if (read(timer_fd_, &expirations, sizeof expirations) > 0) schedule();
      } else if (fd == signal_fd_) {
        signalfd_siginfo info;
        while (read(signal_fd_, &info, sizeof info) == sizeof info) {
          if (info.ssi_signo == SIGHUP) {
            sd_notify(0, "RELOADING=1");
            reload();
            sd_notify(0, "READY=1");
          } else {
            stop();
            return 0;
          }
        }
      } else {
        on_client_readable(fd);
      }
    }
  }
}

}  // namespace cuslice
