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

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <system_error>

#include "ephemeral_tenants.h"
#include "futex.h"
#include "metrics_exposition.h"
#include "process_info.h"
#include "segment_snapshot.h"
#include "tenant_assignment.h"

namespace cuslice {
namespace {

using Nanos = TokenPolicy::Nanos;

// How often achieved shares are published, and the window they cover.
constexpr Nanos kShareWindow = ShareWindow::kSpan;
constexpr Nanos kShareSamplePeriod = kShareWindow / (ShareWindow::kSamples - 1);
constexpr double kPpmPerPercent = 10'000.0;

Nanos monotonic_now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::chrono::seconds(ts.tv_sec) + Nanos(ts.tv_nsec);
}

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

Config load_or_throw(const DaemonOptions& options) {
  if (options.ephemeral) return Config{};  // tenants arrive from `cuslice run`
  const std::string& path = options.config_path;
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
  // Queued work is kept short by the hook; a holder that does not drain within a slice (or
  // 20 ms, if the slice is longer) is not waited for longer than that.
  p.drain_timeout = std::min<std::chrono::nanoseconds>(config.scheduler.quantum, std::chrono::milliseconds(20));
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

// A periodic (interval > 0) or one-shot timerfd in epoll; returns the fd.
int make_timer() {
  const int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (fd < 0) throw_errno("timerfd_create");
  return fd;
}

void set_timer(int fd, Nanos first, Nanos interval) {
  itimerspec spec{};
  spec.it_value.tv_sec = first.count() / 1'000'000'000;
  spec.it_value.tv_nsec = first.count() % 1'000'000'000;
  spec.it_interval.tv_sec = interval.count() / 1'000'000'000;
  spec.it_interval.tv_nsec = interval.count() % 1'000'000'000;
  timerfd_settime(fd, 0, &spec, nullptr);
}

void drain_timer(int fd) {
  uint64_t expirations;
  while (read(fd, &expirations, sizeof expirations) > 0) {
  }
}

Nanos seconds(double s) { return Nanos(static_cast<int64_t>(std::llround(s * 1e9))); }

// Who may change the daemon's configuration: root, or whoever runs the daemon (the user
// whose `cuslice run` auto-started it). Everybody else may only register and describe.
bool may_control(uid_t peer) { return peer == 0 || peer == geteuid(); }

}  // namespace

Daemon::Daemon(DaemonOptions options)
    : options_(std::move(options)),
      config_(load_or_throw(options_)),
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
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (signal_fd_ < 0 || epoll_fd_ < 0) throw_errno("signalfd/epoll");
  timer_fd_ = make_timer();
  stats_fd_ = make_timer();
  set_timer(stats_fd_, kShareSamplePeriod, kShareSamplePeriod);
  for (int fd : {listen_fd_, signal_fd_, timer_fd_, stats_fd_}) add_to_epoll(fd, EPOLLIN);

  // sd_watchdog_enabled() also checks WATCHDOG_PID, so a child that inherited the
  // variables does not ping on our behalf.
  uint64_t watchdog_usec = 0;
  if (sd_watchdog_enabled(0, &watchdog_usec) > 0 && watchdog_usec > 0) {
    watchdog_fd_ = make_timer();
    const Nanos half = std::chrono::microseconds(watchdog_usec) / 2;
    set_timer(watchdog_fd_, half, half);
    add_to_epoll(watchdog_fd_, EPOLLIN);
    spdlog::info("pinging the systemd watchdog every {} ms", half.count() / 1'000'000);
  }
  if (options_.exit_when_idle_seconds) {
    idle_fd_ = make_timer();
    add_to_epoll(idle_fd_, EPOLLIN);
    set_timer(idle_fd_, seconds(std::max(*options_.exit_when_idle_seconds, kFirstClientGrace)), Nanos(0));
    idle_armed_ = true;
  }

  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) policies_.emplace_back(policy_params_, tenant_params_);
  apply_config(config_);
  segment_->quantum_ns = static_cast<uint64_t>(config_.scheduler.quantum.count());
  segment_->share_window_ns = static_cast<uint64_t>(kShareWindow.count());
  segment_->daemon_pid = getpid();
  segment_->flags = options_.ephemeral ? shm::Segment::kEphemeral : 0;

  if (const auto port = options_.metrics_port ? options_.metrics_port : config_.scheduler.metrics_port)
    start_metrics(*port);

  segment_->state.store(static_cast<uint32_t>(shm::DaemonState::kRunning), std::memory_order_release);
  if (options_.ephemeral) {
    spdlog::info("serving on {} (shared memory {}), tenants from `cuslice run`", options_.socket_path,
                 options_.shm_name);
  } else {
    spdlog::info("serving {} tenants on {} (shared memory {})", config_.tenants.size(), options_.socket_path,
                 options_.shm_name);
  }
}

Daemon::~Daemon() {
  metrics_.reset();
  for (const auto& [fd, client] : clients_) close(fd);
  for (int fd : {listen_fd_, epoll_fd_, signal_fd_, timer_fd_, stats_fd_, watchdog_fd_, idle_fd_})
    if (fd >= 0) close(fd);
  unlink(options_.socket_path.c_str());
}

void Daemon::add_to_epoll(int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) throw_errno("epoll_ctl");
}

void Daemon::start_metrics(uint16_t port) {
  metrics_ = std::make_unique<MetricsServer>(
      options_.metrics_address, port, [this] { return render_metrics(take_snapshot(*segment_), workloads()); },
      [this] {
        return segment_->state.load(std::memory_order_acquire) ==
               static_cast<uint32_t>(shm::DaemonState::kRunning);
      });
  add_to_epoll(metrics_->fd(), EPOLLIN);
  spdlog::info("serving metrics on http://{}:{}/metrics", options_.metrics_address, metrics_->port());
}

// A free entry given to a new tenant starts from zero: counters left by the tenant that
// had the entry before must not be billed to this one.
void Daemon::claim_tenant_entry(uint32_t index, const std::string& name) {
  shm::Tenant& t = segment_->tenants[index];
  std::memset(t.name, 0, sizeof t.name);
  std::strncpy(t.name, name.c_str(), sizeof t.name - 1);
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    shm::TenantGpu& tg = t.gpu[g];
    for (std::atomic<uint64_t>* counter :
         {&tg.memory_used, &tg.gpu_time_ns, &tg.wait_ns, &tg.oom_refusals, &tg.token_grants})
      counter->store(0, std::memory_order_relaxed);
    tg.achieved_share_ppm.store(0, std::memory_order_relaxed);
    gpu_time_seen_[index][g] = 0;
    // The counter starts at zero now: time reported before the first periodic sample
    // counts toward the share too.
    share_windows_[index][g].reset();
    share_windows_[index][g].sample(monotonic_now(), 0);
  }
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
    if (t.state.load() == shm::Tenant::kFree) claim_tenant_entry(static_cast<uint32_t>(index), tc.name);
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
    t.share_ppm.store(static_cast<uint32_t>(std::lround(shares[i] * kPpmPerPercent)), std::memory_order_relaxed);
    t.limit_ppm.store(static_cast<uint32_t>(std::lround(tc.limit_percent * kPpmPerPercent)), std::memory_order_relaxed);
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

Daemon::ReloadOutcome Daemon::reload() {
  ReloadOutcome outcome;
  if (options_.ephemeral) {
    outcome.errors.push_back("started with --ephemeral: tenants come from `cuslice run`, there is no file to reload");
    spdlog::warn("{}", outcome.errors.back());
    return outcome;
  }
  ConfigResult result = load_config_file(options_.config_path);
  if (!result.ok()) {
    for (const ConfigError& e : result.errors) {
      spdlog::error("{}", e.to_string());
      outcome.errors.push_back(e.to_string());
    }
    spdlog::error("reload of {} refused: keeping the running configuration", options_.config_path);
    return outcome;
  }
  if (result.config.scheduler.metrics_port != config_.scheduler.metrics_port)
    spdlog::warn("scheduler.metrics_port changed: it takes effect when the scheduler restarts");
  config_ = std::move(result.config);
  policy_params_ = policy_params(config_);
  apply_config(config_);
  segment_->quantum_ns = static_cast<uint64_t>(config_.scheduler.quantum.count());
  spdlog::info("reloaded {}: {} tenants", options_.config_path, config_.tenants.size());
  schedule();
  outcome.ok = true;
  return outcome;
}

Daemon::ReloadOutcome Daemon::reload_notifying_systemd() {
  sd_notify(0, "RELOADING=1");
  ReloadOutcome outcome = reload();
  sd_notify(0, "READY=1");
  return outcome;
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
    clients_[fd] = Client{ClientKind::kNew, -1, cred.pid, cred.uid, cred.gid, {}};
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
  unsigned char bytes[std::max(sizeof(wire::RegisterRequest), sizeof(wire::ControlRequest)) + 1];
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
    reply.status = wire::ControlStatus::kOk;
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
  client.kind = ClientKind::kHook;
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
  update_idle_timer();
}

void Daemon::update_idle_timer() {
  if (idle_fd_ < 0) return;
  const bool idle = clients_.empty();
  if (idle == idle_armed_) return;
  set_timer(idle_fd_, idle ? seconds(*options_.exit_when_idle_seconds) : Nanos(0), Nanos(0));
  idle_armed_ = idle;
  if (idle) spdlog::info("no client left: exiting in {} s unless one connects", *options_.exit_when_idle_seconds);
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
      // Busy is set by a holder that launched and cleared when its work drained; a process
      // that also waits for the token still has that work running.
      activity[g][t].queued |= busy;
      if (waits) waiting[g] |= uint64_t{1} << t;
    }
  }
  Nanos wake = TokenPolicy::kNever;
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    shm::GpuState& gs = segment_->gpus[g];
    // Drop the bits of tenants that no longer wait. A waiter raises its slot's count before
    // its bit, so a bit dropped here whose tenant has a waiter now (one that came after the
    // scan above) is raised again: a lost bit would keep a holder's release from kicking
    // the daemon, and the waiter would wait for a timer (seen on the H100 as seconds).
    const uint64_t dropped = gs.waiting_tenants.fetch_and(waiting[g], std::memory_order_seq_cst) & ~waiting[g];
    if (dropped != 0) restore_waiting(g, dropped);
    TokenPolicy& policy = policies_[g];
    // A hook that outranked the holder may have taken the token itself (token_policy.h,
    // rule 6). The daemon's store is a compare-exchange from what it saw, so such a take is
    // never overwritten: it is adopted, and the step runs again.
    uint32_t seen = gs.holder.load(std::memory_order_acquire);
    TokenPolicy::Decision d;
    for (;;) {
      if (seen != policy.holder() && seen < shm::kMaxTenants && tenant_params_[seen].present) {
        policy.adopt(seen, now);
        gs.handoffs.fetch_add(1, std::memory_order_relaxed);
        segment_->tenants[seen].gpu[g].token_grants.fetch_add(1, std::memory_order_relaxed);
        spdlog::debug("gpu {}: {} took the token", g, segment_->tenants[seen].name);
      }
      d = policy.step(now, activity[g]);
      publish_preemption(g, d.holder);
      if (seen == d.holder) break;
      if (gs.holder.compare_exchange_strong(seen, d.holder, std::memory_order_acq_rel)) {
        gs.grant_seq.fetch_add(1, std::memory_order_release);
        gs.handoffs.fetch_add(1, std::memory_order_relaxed);
        if (d.holder != kNoHolder)
          segment_->tenants[d.holder].gpu[g].token_grants.fetch_add(1, std::memory_order_relaxed);
        futex_wake_all(&gs.grant_seq);
        spdlog::debug("gpu {}: token -> {}", g,
                      d.holder == kNoHolder ? "(none)" : segment_->tenants[d.holder].name);
        break;
      }
    }
    wake = std::min(wake, d.wake_at);
    if (d.holder != held_[g].tenant) held_[g] = {d.holder, now, now};
    // Debug: a holder that others have waited behind for long, and what its processes show.
    if (spdlog::should_log(spdlog::level::debug) && d.holder != kNoHolder && (waiting[g] & ~(uint64_t{1} << d.holder)) &&
        now - held_[g].since >= std::chrono::milliseconds(200) && now - held_[g].logged >= std::chrono::milliseconds(200)) {
      held_[g].logged = now;
      std::string procs;
      for (const auto& [fd, client] : clients_) {
        if (client.slot < 0) continue;
        const shm::ProcessSlot& ps = segment_->processes[client.slot];
        if (ps.tenant.load(std::memory_order_relaxed) != d.holder) continue;
        const uint32_t f = ps.gpu_flags[g].load(std::memory_order_relaxed);
        procs += fmt::format(" pid {} (busy {}, waiters {})", client.pid, (f & shm::ProcessSlot::kBusy) != 0,
                             f & shm::ProcessSlot::kWaitersMask);
      }
      spdlog::debug("gpu {}: {} has held the token {} ms while others wait:{}", g, segment_->tenants[d.holder].name,
                    std::chrono::duration_cast<std::chrono::milliseconds>(now - held_[g].since).count(), procs);
    }
  }
  arm_timer(wake);
}

void Daemon::restore_waiting(uint32_t g, uint64_t dropped) {
  shm::GpuState& gs = segment_->gpus[g];
  for (const auto& [fd, client] : clients_) {
    if (client.slot < 0) continue;
    const shm::ProcessSlot& ps = segment_->processes[client.slot];
    const uint32_t t = ps.tenant.load(std::memory_order_relaxed);
    if (t >= shm::kMaxTenants || !(dropped & (uint64_t{1} << t))) continue;
    if (ps.gpu_flags[g].load(std::memory_order_seq_cst) & shm::ProcessSlot::kWaitersMask)
      gs.waiting_tenants.fetch_or(uint64_t{1} << t, std::memory_order_seq_cst);
  }
}

void Daemon::publish_preemption(uint32_t g, uint32_t holder) {
  shm::GpuState& gs = segment_->gpus[g];
  const TokenPolicy& policy = policies_[g];
  // Who may take the token without asking: a tenant that outranks whoever has work on the
  // GPU (the holder, or the tenant draining); nobody while the GPU is free, where the
  // policy's own choice among the waiting tenants must stand.
  const uint32_t owner = holder != kNoHolder ? holder : policy.draining();
  const uint32_t floor = owner != kNoHolder && owner < tenant_params_.size()
                             ? static_cast<uint32_t>(tenant_params_[owner].priority) + 1
                             : shm::kNoPreempt;
  if (gs.preempt_priority.load(std::memory_order_relaxed) != floor)
    gs.preempt_priority.store(floor, std::memory_order_release);
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (!tenant_params_[t].present) continue;
    std::atomic<uint32_t>& flags = segment_->tenants[t].gpu[g].flags;
    const uint32_t want = policy.capped(t) ? shm::TenantGpu::kCapped : 0;
    if (flags.load(std::memory_order_relaxed) != want) flags.store(want, std::memory_order_relaxed);
  }
}

TenantWorkloads Daemon::workloads() const {
  TenantWorkloads out;
  std::map<std::string, int> seen;  // processes per tenant so far
  for (const auto& [fd, client] : clients_) {
    if (client.kind != ClientKind::kHook || client.slot < 0) continue;
    const uint32_t t = segment_->processes[client.slot].tenant.load(std::memory_order_relaxed);
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
  return out;
}

void Daemon::publish_shares() {
  const Nanos now = monotonic_now();
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (!tenant_params_[t].present) continue;
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      shm::TenantGpu& tg = segment_->tenants[t].gpu[g];
      const uint32_t ppm = share_windows_[t][g].sample(now, tg.gpu_time_ns.load(std::memory_order_relaxed));
      tg.achieved_share_ppm.store(ppm, std::memory_order_relaxed);
    }
  }
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
    gs.preempt_priority.store(shm::kNoPreempt, std::memory_order_release);
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
    const int n = epoll_wait(epoll_fd_, events, 64, metrics_ ? metrics_->timeout_ms() : -1);
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
      } else if (fd == stats_fd_) {
        drain_timer(stats_fd_);
        publish_shares();
      } else if (fd == watchdog_fd_) {
        drain_timer(watchdog_fd_);
        sd_notify(0, "WATCHDOG=1");
      } else if (fd == idle_fd_) {
        drain_timer(idle_fd_);
        if (clients_.empty()) {
          spdlog::info("idle for the grace period: exiting");
          stop();
          return 0;
        }
      } else if (metrics_ && fd == metrics_->fd()) {
        // Served below.
      } else if (fd == signal_fd_) {
        signalfd_siginfo info;
        while (read(signal_fd_, &info, sizeof info) == sizeof info) {
          if (info.ssi_signo == SIGHUP) {
            reload_notifying_systemd();
          } else {
            stop();
            return 0;
          }
        }
      } else {
        on_client_readable(fd);
      }
    }
    // Cheap when nothing is ready; also expires stalled scrapers when epoll timed out.
    if (metrics_) metrics_->run();
  }
}

}  // namespace cuslice
