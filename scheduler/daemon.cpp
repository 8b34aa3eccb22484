// The daemon's life: construction (configuration, sockets, segment and tenant regions,
// signal and timer descriptors, metrics), the event loop that hands each ready descriptor to its owner, and
// the clean stop that lets every hook run ungated. Calls clients.cpp, tenant_table.cpp and
// scheduling.cpp; keeps no policy of its own.
#include "daemon.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "clock.h"
#include "futex.h"
#include "metrics_exposition.h"
#include "os_fds.h"
#include "segment_snapshot.h"
#include "tenant_table.h"

namespace cuslice {
namespace {

using Nanos = TokenPolicy::Nanos;

// How often achieved shares are published, and the window they cover.
constexpr Nanos kShareWindow = ShareWindow::kSpan;
constexpr Nanos kShareSamplePeriod = kShareWindow / (ShareWindow::kSamples - 1);

uint64_t make_generation() {
  return static_cast<uint64_t>(now_ns()) ^ (static_cast<uint64_t>(getpid()) << 40);
}

// Every client holds a descriptor: take all the hard limit allows (systemd's default soft
// limit is 1024, its hard limit far higher).
void raise_descriptor_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) spdlog::warn("cannot raise the descriptor limit: {}", std::strerror(errno));
}

}  // namespace

Daemon::Daemon(DaemonOptions options)
    : options_(std::move(options)),
      config_(load_daemon_config(options_)),
      policy_params_(policy_params(config_)),
      socket_lock_fd_(lock_socket_path(options_.socket_path, SocketAccess::kEveryone)),
      control_lock_fd_(lock_socket_path(options_.control_socket_path, SocketAccess::kOwner)),
      segment_(options_.shm_name, make_generation()),
      regions_(segment_->generation),
      tenant_params_(shm::kMaxTenants) {
  raise_descriptor_limit();

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
  for (int fd : {signal_fd_, timer_fd_, stats_fd_}) add_to_epoll(fd, EPOLLIN);

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

  if (options_.watch_config && !options_.ephemeral) {
    config_watch_ = std::make_unique<ConfigWatch>(options_.config_path);
    add_to_epoll(config_watch_->fd(), EPOLLIN);
  }

  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) policies_.emplace_back(policy_params_, tenant_params_);
  read_journal();  // before the configuration: a journal to adopt needs the checkpoint API
  apply_config(config_);
  adopt_journal();
  segment_->quantum_ns = static_cast<uint64_t>(config_.scheduler.quantum.count());
  segment_->share_window_ns = static_cast<uint64_t>(kShareWindow.count());
  segment_->daemon_pid = getpid();
  segment_->flags = options_.ephemeral ? shm::Segment::kEphemeral : 0;

  start_usage_watchdog();
  if (const auto port = options_.metrics_port ? options_.metrics_port : config_.scheduler.metrics_port)
    start_metrics(*port);

  segment_->state.store(static_cast<uint32_t>(shm::DaemonState::kRunning), std::memory_order_release);
  serving_.store(true, std::memory_order_release);
  arm_timer(Nanos{now_ns()});  // a first step: tenants left suspended may be resumed
  // Last: a client that can connect finds everything ready, metrics included (connections
  // queue until run()). The socket locks, taken first, already keep a second daemon out.
  // The control socket first: whoever finds the tenant socket answering (`cuslice run`
  // after starting a scheduler) finds the control socket too.
  control_listen_fd_ = listen_on(options_.control_socket_path, SocketAccess::kOwner);
  add_to_epoll(control_listen_fd_, EPOLLIN);
  listen_fd_ = listen_on(options_.socket_path, SocketAccess::kEveryone);
  add_to_epoll(listen_fd_, EPOLLIN);
  if (options_.ephemeral) {
    spdlog::info("serving on {} (control {}, shared memory {}), tenants from `cuslice run`", options_.socket_path,
                 options_.control_socket_path, options_.shm_name);
  } else {
    spdlog::info("serving {} tenants on {} (control {}, shared memory {})", config_.tenants.size(),
                 options_.socket_path, options_.control_socket_path, options_.shm_name);
  }
}

Daemon::~Daemon() {
  metrics_.reset();
  for (const auto& [fd, client] : clients_) close(fd);
  for (int fd : {listen_fd_, control_listen_fd_, epoll_fd_, signal_fd_, timer_fd_, stats_fd_, watchdog_fd_, idle_fd_})
    if (fd >= 0) close(fd);
  unlink(options_.socket_path.c_str());
  unlink(options_.control_socket_path.c_str());
  // Last: the sockets are gone before another daemon may take them.
  close(control_lock_fd_);
  close(socket_lock_fd_);
}

void Daemon::add_to_epoll(int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) throw_errno("epoll_ctl");
}

void Daemon::start_metrics(uint16_t port) {
  const std::string address =
      options_.metrics_address.value_or(config_.scheduler.metrics_address.value_or("127.0.0.1"));
  // Both callbacks run on the server's thread; the snapshot is taken under the daemon's
  // state lock, the text is made outside it.
  metrics_ = std::make_unique<MetricsServer>(
      address, port,
      [this] {
        SegmentSnapshot snapshot;
        TenantWorkloads workloads_now;
        {
          std::lock_guard<std::mutex> lock(state_mutex_);
          const Nanos now{now_ns()};
          if (now - metrics_published_ >= kMetricsPublishPeriod) {
            publish_usage();  // the counters of now, as `cuslice status` gets them
            metrics_published_ = now;
          }
          snapshot = take_snapshot(*segment_);
          workloads_now = workloads();
        }
        return render_metrics(snapshot, workloads_now);
      },
      [this] { return serving_.load(std::memory_order_acquire); });
  spdlog::info("serving metrics on {}/metrics", metrics_->url());
}

void Daemon::update_idle_timer() {
  if (idle_fd_ < 0) return;
  const bool idle = clients_.empty();
  if (idle == idle_armed_) return;
  set_timer(idle_fd_, idle ? seconds(*options_.exit_when_idle_seconds) : Nanos(0), Nanos(0));
  idle_armed_ = idle;
  if (idle) spdlog::info("no client left: exiting in {} s unless one connects", *options_.exit_when_idle_seconds);
}

void Daemon::stop() {
  sd_notify(0, "STOPPING=1");
  serving_.store(false, std::memory_order_release);
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
    std::lock_guard<std::mutex> lock(state_mutex_);  // released while epoll waits
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd_ || fd == control_listen_fd_) {
        accept_clients(fd);
      } else if (fd == timer_fd_) {
        uint64_t expirations;
        if (read(timer_fd_, &expirations, sizeof expirations) > 0) schedule();
      } else if (fd == stats_fd_) {
        drain_timer(stats_fd_);
        publish_usage();
        publish_shares();
        close_silent_clients();
        if (accept_paused_) resume_accepting();
      } else if (fd == usage_fd_) {
        check_usage();
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
      } else if (config_watch_ && fd == config_watch_->fd()) {
        if (config_watch_->changed()) {
          spdlog::info("{} changed: reloading", options_.config_path);
          reload_notifying_systemd();
        }
      } else if (suspender_ && fd == suspender_->event_fd()) {
        on_suspender_outcomes();
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
  }
}

}  // namespace cuslice
