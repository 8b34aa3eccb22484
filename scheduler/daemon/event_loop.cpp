// Daemon (daemon.h): the event loop, each ready descriptor handed to its owner, the stats
// tick, the policy timer and the idle timer.
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>

#include "protocol/clock.h"
#include "scheduler/daemon/daemon.h"
#include "scheduler/os/os_fds.h"

namespace cuslice {

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
    for (int i = 0; i < n; ++i)
      if (!dispatch(events[i].data.fd)) return 0;
    // Decisions once per wake-up, not once per message: a flood of kicks and requests costs
    // one step, and a signal in the same batch is not kept waiting behind many.
    if (step_due_) step_now();
  }
}

bool Daemon::dispatch(int fd) {
  if (clients_.is_listener(fd)) {
    clients_.accept_clients(fd);
  } else if (fd == timer_fd_) {
    uint64_t expirations;
    if (read(timer_fd_, &expirations, sizeof expirations) > 0) step();
  } else if (fd == stats_fd_) {
    drain_timer(stats_fd_);
    publish();
    clients_.tick();
    mps_.tick(Nanos{now_ns()});
    watch_mps();
  } else if (fd == usage_fd_) {
    usage_check_.on_reading();
  } else if (fd == watchdog_fd_) {
    drain_timer(watchdog_fd_);
    sd_notify(0, "WATCHDOG=1");
  } else if (fd == idle_fd_) {
    return on_idle_timer();
  } else if (config_watch_ && fd == config_watch_->fd()) {
    on_config_watch();
  } else if (fd == suspender_fd_) {
    preemptor_.on_suspender_outcomes();
    step();
  } else if (fd >= 0 && fd == mps_fd_) {
    // epoll forgets the pidfd when it is closed; the next start watches the new one.
    mps_.on_exit();
    mps_fd_ = -1;
  } else if (fd == signal_fd_) {
    return on_signals();
  } else {
    clients_.on_readable(fd);
  }
  return true;
}

bool Daemon::on_idle_timer() {
  drain_timer(idle_fd_);
  if (!clients_.idle()) return true;
  spdlog::info("idle for the grace period: exiting");
  stop();
  return false;
}

void Daemon::on_config_watch() {
  if (!config_watch_->changed()) return;
  spdlog::info("{} changed: reloading", options_.config_path);
  reload();
}

bool Daemon::on_signals() {
  signalfd_siginfo info;
  while (read(signal_fd_, &info, sizeof info) == sizeof info) {
    if (info.ssi_signo != SIGHUP) {
      stop();
      return false;
    }
    reload();
  }
  return true;
}

void Daemon::publish() {
  const Nanos now{now_ns()};
  ledger_.publish_usage();
  preemptor_.publish_suspended_time(now);
  scheduler_.publish_shares(now);
}

void Daemon::arm_timer(Nanos wake_at) {
  // An absolute time already past still fires; 0 would disarm.
  set_timer_at(timer_fd_, wake_at == TokenPolicy::kNever ? Nanos(0) : std::max(wake_at, Nanos(1)));
}

void Daemon::connections_changed() {
  if (idle_fd_ < 0) return;
  const bool idle = clients_.idle();
  if (idle == idle_armed_) return;
  set_timer(idle_fd_, idle ? seconds(*options_.exit_when_idle_seconds) : Nanos(0), Nanos(0));
  idle_armed_ = idle;
  if (idle) spdlog::info("no client left: exiting in {} s unless one connects", *options_.exit_when_idle_seconds);
}

}  // namespace cuslice
