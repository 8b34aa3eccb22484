// cuslice-scheduler's composition root: the components, wired, and the event loop that hands
// each ready descriptor to its owner. One epoll set, on the thread that calls run():
//
//   tenant and control sockets, client sockets -> ClientServer
//   signalfd          -> SIGHUP reloads the configuration, SIGTERM/SIGINT stop
//   timerfd (policy)  -> a scheduling step at the time the last one asked for
//   timerfd (stats)   -> usage, achieved shares and suspended time published a few times a
//                        second; silent connections closed; accepting resumed
//   timerfd (watchdog)-> WATCHDOG=1 to systemd, at half its WATCHDOG_USEC
//   timerfd (idle)    -> with --exit-when-idle: nobody connected for the grace period
//   inotify           -> with --watch-config: the file changed, reload as on SIGHUP
//   the suspender's and the driver poller's eventfds -> Preemptor, UsageCheck
//
// Four threads at most. Besides the loop's: the metrics endpoint on libmicrohttpd's own
// thread (metrics_server.h), where a metrics port is set, so that a slow or flooding HTTP
// client never delays a scheduling step; the tenant suspender's (tenant_suspender.h), which
// makes the driver's slow checkpoint calls, once memory preemption is wanted and the
// checkpoint API loaded; and the usage watchdog's driver poller (driver_poller.h), which
// queries NVML, where NVML is available. The last two answer the loop through eventfds. The
// components' state is guarded by state_mutex_, which the loop holds while it handles events
// (not while it waits for them) and the metrics thread while it takes a snapshot; rendering
// it and talking HTTP happen outside.
//
// A step is this class's: the usage ledger charges GPU time, the token scheduler runs with
// the tenants preemption holds suspended, preemption runs its own step, and the policy timer
// is armed for the earlier of their next times. scheduler/README.md draws the components and
// who calls whom.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "scheduler/clients/client_server.h"
#include "scheduler/clients/control_desk.h"
#include "scheduler/clients/daemon_control.h"
#include "scheduler/clients/refusal_log.h"
#include "scheduler/clients/registrar.h"
#include "scheduler/metrics/metrics_server.h"
#include "scheduler/preemption/preemptor.h"
#include "scheduler/scheduling/token_scheduler.h"
#include "scheduler/scheduling/usage_ledger.h"
#include "scheduler/segment/process_table.h"
#include "scheduler/segment/shared_segment.h"
#include "scheduler/segment/tenant_regions.h"
#include "scheduler/spatial/mps_control.h"
#include "scheduler/tenants/config_watch.h"
#include "scheduler/tenants/tenant_table.h"
#include "scheduler/usage/usage_check.h"

namespace cuslice {

struct DaemonOptions {
  std::string config_path;  // empty with `ephemeral`
  std::string socket_path;          // the tenant socket: hooks register here
  std::string control_socket_path;  // reload, ensure-tenant, the device plugin (control_socket.h)
  std::string shm_name;
  // No file: tenants are added by `cuslice run` (kEnsureTenant) and live in memory.
  bool ephemeral = false;
  // Exit once no connection (hook, lease or control) has been open for this long. Before
  // the first connection the daemon waits at least kFirstClientGrace, so that whoever
  // started it has time to connect even on a loaded machine.
  std::optional<double> exit_when_idle_seconds;
  std::optional<uint16_t> metrics_port;  // overrides the file's scheduler.metrics_port
  bool watch_config = false;             // reload when the file changes (config_watch.h)
  // Overrides the file's scheduler.metrics_address. Loopback when neither says: the metrics
  // name every tenant and its pods, no business of other machines unless the operator says.
  std::optional<std::string> metrics_address;
  // Memory preemption: the driver library with the checkpoint API, and where the host's
  // available memory is read (tests and containers point them elsewhere).
  std::string cuda_library = "libcuda.so.1";
  std::string meminfo_path = "/proc/meminfo";
};

class Daemon final : private DaemonControl {
 public:
  static constexpr double kFirstClientGrace = 30.0;  // seconds

  // Loads the configuration, creates the segment and the sockets; throws on failure
  // (configuration errors are logged one per line before).
  explicit Daemon(DaemonOptions options);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Serves until SIGTERM, SIGINT or, with exit_when_idle, the idle timer. Returns the
  // process exit status.
  int run();

 private:
  using Nanos = TokenPolicy::Nanos;

  // DaemonControl, for the clients component. step(): one scheduling step once every event
  // of this wake-up is handled (step_now()), however many asked for one.
  void step() override { step_due_ = true; }
  ReloadOutcome reload() override;  // with systemd told
  void tenants_changed() override;
  void tenant_released() override;
  void connections_changed() override;  // the idle timer
  void lease_ended(const std::string& tenant) override;
  void foreign_mps(uint32_t tenant) override;

  // The tenant table written into the segment, and what follows: new entries' usage from
  // zero, the policies and preemption reconfigured.
  void apply_tenants();
  // The stats timer's work.
  void publish();
  void start_metrics(uint16_t port);
  void watch(int fd);
  void arm_timer(Nanos wake_at);
  void stop();
  // Construction's steps: the signals blocked and read from a signalfd, the policy and stats
  // timers; the watchdog, idle and configuration watches where asked for; the components
  // started and the segment's header completed; the line that says what is served.
  void open_signals_and_timers();
  void open_optional_watches();
  void start_components();
  void log_serving(const Config& config) const;
  // One ready descriptor; false when the daemon is to stop.
  bool dispatch(int fd);
  // dispatch()'s longer cases; the two that can stop the daemon say so by returning false.
  bool on_idle_timer();
  void on_config_watch();
  bool on_signals();
  // The MPS control daemon's pidfd watched, whenever it was started (again).
  void watch_mps();
  // The scheduling step: GPU time charged, the token policies, preemption; the timer armed.
  void step_now();

  DaemonOptions options_;
  // Before the segment: a second daemon must fail on the sockets before it replaces the
  // first one's segment (os_fds.h: refuse_if_answered, lock_control_directory).
  int control_lock_fd_ = -1;
  SharedSegment segment_;  // holds the lock on the segment itself
  TenantRegions regions_;
  ProcessTable processes_;
  TenantTable tenants_;
  MpsControl mps_;  // the spatial GPUs' MPS control daemon (read at start; not reloaded)
  int mps_fd_ = -1;  // its pidfd as watched
  TokenScheduler scheduler_;
  UsageLedger ledger_;
  Preemptor preemptor_;
  UsageCheck usage_check_;
  RefusalLog refusals_;
  Registrar registrar_;
  int epoll_fd_ = -1;
  ControlDesk desk_;
  ClientServer clients_;
  int signal_fd_ = -1;
  int timer_fd_ = -1;
  int stats_fd_ = -1;
  int usage_fd_ = -1;       // -1: the usage watchdog is off
  int suspender_fd_ = -1;   // watched once preemption turned on
  int watchdog_fd_ = -1;    // -1: systemd did not ask for watchdog pings
  int idle_fd_ = -1;        // -1: without exit_when_idle
  bool idle_armed_ = false;
  bool step_due_ = false;  // step() was asked for during this wake-up
  std::unique_ptr<ConfigWatch> config_watch_;  // with watch_config only
  std::unique_ptr<MetricsServer> metrics_;
  std::mutex state_mutex_;  // see the top of this file
  // When the metrics thread last published the tenants' usage for a scrape: at most every
  // kMetricsPublishPeriod on their behalf, so that a flood of scrapes costs the daemon little.
  Nanos metrics_published_{0};
  static constexpr std::chrono::milliseconds kMetricsPublishPeriod{100};
  std::atomic<bool> serving_{false};  // /healthz
};

}  // namespace cuslice
