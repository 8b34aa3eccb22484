// Daemon (daemon.h): construction (sockets' locks, segment, components, signal and timer
// descriptors, metrics, then the sockets), the wiring the components ask for through
// DaemonControl, and the clean stop that lets every hook run ungated. The loop itself is
// event_loop.cpp's.
#include "scheduler/daemon/daemon.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/segment_snapshot.h"
#include "protocol/clock.h"
#include "protocol/futex.h"
#include "scheduler/metrics/metrics_exposition.h"
#include "scheduler/os/os_fds.h"
#include "scheduler/tenants/tenant_workloads.h"

namespace cuslice {
namespace {

// A step arms the policy timer for the earlier of the two; "never" must mean the same.
static_assert(Preemptor::kNever == TokenPolicy::kNever);

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

// The lock in the control directory, once no daemon answers on the tenant socket (one with
// a control directory of its own would not hold this lock). Nothing a tenant can open takes
// part: the lock file is the daemon's user's alone, and only a listening daemon answers.
int exclude_other_daemons(const DaemonOptions& options) {
  refuse_if_answered(options.socket_path);
  return lock_control_directory(options.control_socket_path);
}

int make_epoll() {
  const int fd = epoll_create1(EPOLL_CLOEXEC);
  if (fd < 0) throw_errno("epoll_create1");
  return fd;
}

}  // namespace

Daemon::Daemon(DaemonOptions options)
    : options_(std::move(options)),
      control_lock_fd_(exclude_other_daemons(options_)),
      segment_(options_.shm_name, make_generation()),
      regions_(segment_->generation),
      tenants_({options_.config_path, options_.ephemeral},
               load_tenant_config({options_.config_path, options_.ephemeral}), segment_, regions_, processes_),
      mps_(segment_, tenants_.config().scheduler.spatial, options_.socket_path),
      scheduler_(segment_, regions_, processes_, tenants_),
      ledger_(segment_, regions_, processes_, tenants_, scheduler_.policies()),
      preemptor_({options_.cuda_library, options_.meminfo_path, options_.control_socket_path + ".suspended.json"}, segment_,
                 regions_, processes_, tenants_),
      usage_check_(segment_, regions_, processes_, tenants_),
      registrar_(segment_, regions_, tenants_, processes_),
      epoll_fd_(make_epoll()),
      desk_(options_.control_socket_path, segment_, tenants_, processes_, ledger_, preemptor_, refusals_, *this),
      clients_({options_.socket_path, options_.control_socket_path}, epoll_fd_, registrar_, desk_, preemptor_,
               processes_, ledger_, refusals_, *this) {
  raise_descriptor_limit();
  open_signals_and_timers();
  open_optional_watches();
  start_components();
  const Config& config = tenants_.config();
  if (const auto port = options_.metrics_port ? options_.metrics_port : config.scheduler.metrics_port)
    start_metrics(*port);
  segment_->state.store(static_cast<uint32_t>(shm::DaemonState::kRunning), std::memory_order_release);
  serving_.store(true, std::memory_order_release);
  arm_timer(Nanos{now_ns()});  // a first step: tenants left suspended may be resumed
  // Last: a client that can connect finds everything ready, metrics included (connections
  // queue until run()). The socket locks, taken first, already keep a second daemon out.
  clients_.listen();
  log_serving(config);
}

void Daemon::open_signals_and_timers() {
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGHUP, SIGTERM, SIGINT}) sigaddset(&signals, s);
  if (sigprocmask(SIG_BLOCK, &signals, nullptr) != 0) throw_errno("sigprocmask");
  signal(SIGPIPE, SIG_IGN);
  signal_fd_ = signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) throw_errno("signalfd");
  timer_fd_ = make_timer();
  stats_fd_ = make_timer();
  set_timer(stats_fd_, TokenScheduler::kShareSamplePeriod, TokenScheduler::kShareSamplePeriod);
  for (int fd : {signal_fd_, timer_fd_, stats_fd_}) watch(fd);
}

void Daemon::open_optional_watches() {
  // sd_watchdog_enabled() also checks WATCHDOG_PID, so a child that inherited the
  // variables does not ping on our behalf.
  uint64_t watchdog_usec = 0;
  if (sd_watchdog_enabled(0, &watchdog_usec) > 0 && watchdog_usec > 0) {
    watchdog_fd_ = make_timer();
    const Nanos half = std::chrono::microseconds(watchdog_usec) / 2;
    set_timer(watchdog_fd_, half, half);
    watch(watchdog_fd_);
    spdlog::info("pinging the systemd watchdog every {} ms", half.count() / 1'000'000);
  }
  if (options_.exit_when_idle_seconds) {
    idle_fd_ = make_timer();
    watch(idle_fd_);
    set_timer(idle_fd_, seconds(std::max(*options_.exit_when_idle_seconds, kFirstClientGrace)), Nanos(0));
    idle_armed_ = true;
  }
  if (options_.watch_config && !options_.ephemeral) {
    config_watch_ = std::make_unique<ConfigWatch>(options_.config_path);
    watch(config_watch_->fd());
  }
}

void Daemon::start_components() {
  // First: the card sizes, which the watchdog and preemption take from NVML, never a tenant.
  usage_fd_ = usage_check_.start();
  if (usage_fd_ >= 0) watch(usage_fd_);
  preemptor_.set_card_sizes(usage_check_.card_sizes());
  preemptor_.read_journal();  // before the configuration: a journal to adopt needs the checkpoint API
  apply_tenants();
  preemptor_.adopt_journal();
  // Before the sockets listen: the first spatial tenant's process finds the server there.
  mps_.start();
  watch_mps();
  segment_->share_window_ns = static_cast<uint64_t>(TokenScheduler::kShareWindow.count());
  segment_->daemon_pid = getpid();
  segment_->flags = options_.ephemeral ? shm::Segment::kEphemeral : 0;
}

void Daemon::log_serving(const Config& config) const {
  if (options_.ephemeral) {
    spdlog::info("serving on {} (control {}, shared memory {}), tenants from `cuslice run`", options_.socket_path,
                 options_.control_socket_path, options_.shm_name);
  } else {
    spdlog::info("serving {} tenants on {} (control {}, shared memory {})", config.tenants.size(),
                 options_.socket_path, options_.control_socket_path, options_.shm_name);
  }
}

Daemon::~Daemon() {
  metrics_.reset();
  clients_.shut_down();  // the sockets are gone before another daemon may take them
  for (int fd : {epoll_fd_, signal_fd_, timer_fd_, stats_fd_, watchdog_fd_, idle_fd_})
    if (fd >= 0) close(fd);
  close(control_lock_fd_);
}

void Daemon::watch(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) throw_errno("epoll_ctl");
}

void Daemon::apply_tenants() {
  const Nanos now{now_ns()};
  for (const uint32_t t : tenants_.apply()) {
    ledger_.reset_tenant(t);
    scheduler_.reset_tenant(t, now);
  }
  scheduler_.reconfigure();
  preemptor_.configure();
  if (suspender_fd_ < 0 && preemptor_.event_fd() >= 0) {
    suspender_fd_ = preemptor_.event_fd();
    watch(suspender_fd_);
  }
}

void Daemon::step_now() {
  step_due_ = false;
  const Nanos now{now_ns()};
  ledger_.charge_gpu_time(now);
  const Nanos wake = scheduler_.step(now, preemptor_.suspended_mask());
  arm_timer(std::min(wake, preemptor_.step(now)));
}

ReloadOutcome Daemon::reload() {
  sd_notify(0, "RELOADING=1");
  ReloadOutcome outcome = tenants_.reload();
  if (outcome.ok) {
    apply_tenants();
    spdlog::info("reloaded {}: {} tenants", options_.config_path, tenants_.config().tenants.size());
    step();
  }
  sd_notify(0, "READY=1");
  return outcome;
}

void Daemon::tenants_changed() {
  apply_tenants();
  step();
}

void Daemon::tenant_released() { scheduler_.reconfigure(); }

void Daemon::watch_mps() {
  usage_check_.set_mps_control(mps_.pid());
  if (mps_.fd() == mps_fd_) return;
  mps_fd_ = mps_.fd();
  if (mps_fd_ >= 0) watch(mps_fd_);
}

void Daemon::foreign_mps(uint32_t tenant) {
  if (!tenants_.mark_foreign_mps(tenant)) return;
  // Clients of one MPS server time-sliced against each other wait a quantum at a time.
  spdlog::info("tenant {} runs in an MPS server of its own: it runs side by side with the spatial group of its GPUs",
               segment_->tenants[tenant].name);
  tenants_changed();
}

void Daemon::lease_ended(const std::string& tenant) {
  if (!tenants_.forget_added(tenant)) return;
  spdlog::info("tenant {}: its last `cuslice run` ended", tenant);
  tenants_changed();
}

void Daemon::start_metrics(uint16_t port) {
  const std::string address =
      options_.metrics_address.value_or(tenants_.config().scheduler.metrics_address.value_or("127.0.0.1"));
  // Both callbacks run on the server's thread; the snapshot is taken under the daemon's
  // state lock, the text is made outside it.
  metrics_ = std::make_unique<MetricsServer>(
      address, port,
      [this] {
        SegmentSnapshot snapshot;
        TenantWorkloads workloads;
        TenantPreemptionFigures preemption;
        {
          std::lock_guard<std::mutex> lock(state_mutex_);
          const Nanos now{now_ns()};
          if (now - metrics_published_ >= kMetricsPublishPeriod) {
            ledger_.publish_usage();  // the counters of now, as `cuslice status` gets them
            metrics_published_ = now;
          }
          snapshot = take_snapshot(*segment_);
          workloads = tenant_workloads(processes_, segment_, tenants_.plugin_tenants());
          preemption = preemptor_.figures();
        }
        return render_metrics(snapshot, workloads, preemption);
      },
      [this] { return serving_.load(std::memory_order_acquire); });
  spdlog::info("serving metrics on {}/metrics", metrics_->url());
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

}  // namespace cuslice
