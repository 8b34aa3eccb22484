// cuslice-scheduler's event loop: one thread, one epoll set.
//
//   tenant socket      -> accept, remember the peer's pid/uid/gid (SO_PEERCRED)
//   control socket     -> the same, remembering that the client came through it: only there
//                         are reload, ensure-tenant and the device plugin's requests taken
//                         (socket_protocol.h, "Two sockets")
//   client sockets     -> first message: a hook's registration (assign tenant, hand out a
//                         slot) or a control request from `cuslice` (describe, reload,
//                         ensure-tenant); then kicks (re-run the policy now); EOF: gone
//   signalfd           -> SIGHUP reloads the configuration, SIGTERM/SIGINT stop
//   timerfd (policy)   -> the policy asked to be run again at a given time
//   timerfd (stats)    -> publish each tenant's achieved share, a few times a second;
//                         close connections silent past kFirstMessageTimeout; resume
//                         accepting after the descriptor limit was hit
//   timerfd (watchdog) -> WATCHDOG=1 to systemd, at half its WATCHDOG_USEC
//   timerfd (idle)     -> with --exit-when-idle: nobody connected for the grace period
//   inotify            -> with --watch-config: the file changed, reload as on SIGHUP
//
// The metrics endpoint runs on libmicrohttpd's own thread (metrics_server.h): a slow or
// flooding HTTP client never delays a scheduling step. The daemon's state is guarded by
// state_mutex_, which the daemon's thread holds while it handles events (not while it
// waits for them) and the metrics thread while it takes a snapshot; rendering it and
// talking HTTP happen outside.
//
// Every client is untrusted: what it sends is decoded by message_decoder.h, and what one
// uid may hold is bounded (kMaxProcessesPerUid, kMaxConnectionsPerUid).
//
// The policy itself lives in TokenPolicy (one per GPU); this class only moves facts
// between the segment, the tenant regions, the sockets and the policies. Its members are
// defined by concept:
//   daemon.cpp          construction, the loop, the idle timer, stop
//   clients.cpp         the sockets' clients: accept, register, control, drop, slots
//   plugin_control.cpp  the device plugin's requests (its tenants: plugin_tenants.h)
//   tenant_table.cpp    the configuration applied to the segment's tenants, reload
//   scheduling.cpp      the scheduling step and what it publishes in the segment
//   preemption.cpp      memory preemption: requests, suspensions, resumptions, the journal
//   tenant_usage.cpp    what hooks write in the tenant regions, published in the segment
//   tenant_regions.{h,cpp}  the tenant regions themselves (memfds) and hostile arithmetic
//   os_fds.{h,cpp}      the listening sockets, timerfds and the clock they run on
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint_api.h"
#include "config_watch.h"
#include "memory_preemption.h"
#include "metrics_exposition.h"
#include "metrics_server.h"
#include "driver_poller.h"
#include "plugin_tenants.h"
#include "share_window.h"
#include "shared_segment.h"
#include "socket_protocol.h"
#include "tenant_config.h"
#include "tenant_regions.h"
#include "tenant_suspender.h"
#include "token_policy.h"
#include "usage_watchdog.h"

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

class Daemon {
 public:
  static constexpr double kFirstClientGrace = 30.0;  // seconds
  // A connection must send its first message this soon, or it is closed: a client that
  // connects and stays silent would otherwise hold a descriptor forever.
  static constexpr std::chrono::seconds kFirstMessageTimeout{5};
  // What one uid may hold at once. Slots: a quarter of the segment's, so that one user
  // cannot leave the others none; connections: its processes, their leases and requests.
  static constexpr int kMaxProcessesPerUid = static_cast<int>(shm::kMaxProcesses) / 4;
  static constexpr int kMaxConnectionsPerUid = 2 * kMaxProcessesPerUid;

  // Loads the configuration, creates the segment and the socket; throws on failure
  // (configuration errors are logged one per line before).
  explicit Daemon(DaemonOptions options);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Serves until SIGTERM, SIGINT or, with exit_when_idle, the idle timer. Returns the
  // process exit status.
  int run();

 private:
  enum class ClientKind {
    kNew,    // connected, first message not read yet
    kHook,   // registered process (owns `slot`)
    kLease,  // `cuslice run` that ensured a tenant: kept open while its command lives
  };
  struct Client {
    ClientKind kind = ClientKind::kNew;
    int slot = -1;                     // kHook only
    uint32_t tenant = shm::kNoTenant;  // kHook only: the daemon's own record, never read back
    pid_t pid = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    bool control = false;  // connected through the control socket
    std::chrono::nanoseconds connected{0};  // monotonic, for kFirstMessageTimeout
    Workload workload;  // kHook only, when it sent a WorkloadMessage
  };
  struct UidUsage {
    int connections = 0;
    int processes = 0;
    // Refusals for the limits are logged at most once per kRefusalLogInterval, with a count.
    int refusals_unlogged = 0;
    std::chrono::nanoseconds refusal_logged{0};
  };
  static constexpr std::chrono::seconds kRefusalLogInterval{10};
  struct ReloadOutcome {
    bool ok = false;
    std::vector<std::string> errors;  // file:line:column: message
  };

  // tenant_table.cpp
  void apply_config(const Config& config);
  void claim_tenant_entry(uint32_t index, const std::string& name);
  // The entry has no tenant any more: its region goes too.
  void free_tenant_entry(uint32_t index);
  ReloadOutcome reload();
  ReloadOutcome reload_notifying_systemd();

  // clients.cpp
  // Who may change the daemon (reload, add tenants, the device plugin's requests), on the
  // control socket: root, or whoever runs the daemon (the user whose `cuslice run`
  // auto-started it). On the tenant socket nobody may: control_socket_only() says why.
  static bool may_control(uid_t peer);
  std::string control_socket_only(const std::string& what) const;
  // Accepts what waits on `listen_fd` (listen_fd_ or control_listen_fd_).
  void accept_clients(int listen_fd);
  void resume_accepting();
  void close_silent_clients();
  void on_client_readable(int fd);
  void on_first_message(int fd, Client& client);
  void register_client(int fd, Client& client, const wire::RegisterRequest& req);
  void answer_control(int fd, Client& client, const wire::ControlRequest& req);
  void drop_client(int fd);
  void release_slot(uint32_t slot, uint32_t tenant);
  // Logs a refusal of `uid` for `why`, at most once per kRefusalLogInterval.
  void log_refusal(uid_t uid, const std::string& why);
  // Per tenant, the workload its registered processes agree on (metrics labels); the
  // device plugin's labels for its tenants.
  TenantWorkloads workloads() const;
  void answer_workloads(int fd);  // kWorkloads

  // plugin_control.cpp
  void answer_plugin(int fd, Client& client, const wire::PluginRequest& req);

  // scheduling.cpp
  void schedule();
  // Among the tenants in `waiting`, the one of highest priority that outranks whoever has
  // work on GPU g and is not capped, or kNoHolder (shm_protocol.h, "Priority preemption").
  uint32_t preempting_waiter(uint32_t g, uint64_t waiting) const;
  void publish_shares();
  // The usage watchdog (usage_check.cpp): on when NVML can be loaded.
  static constexpr std::chrono::nanoseconds kUsageCheckPeriod = std::chrono::seconds(1);
  void start_usage_watchdog();
  void check_usage();
  void arm_timer(TokenPolicy::Nanos wake_at);

  // preemption.cpp
  struct MemoryWait {  // an allocation waiting for room (a MemoryRequest not yet answered)
    uint32_t slot = 0;
    int32_t pid = 0;
    uint32_t tenant = 0, gpu = 0, sequence = 0;
    uint64_t bytes = 0;
    uint64_t reported_free = 0;  // the card's free memory as the hook's driver said
    uint64_t freed = 0;          // by suspensions completed since
    bool waiting = false;        // told to wait for operations under way (logged once)
    TokenPolicy::Nanos asked{0}, deadline{0};
  };
  struct Suspension {  // one tenant's processes as suspended (or being suspended or resumed)
    struct Process {
      int32_t pid = 0;
      uint64_t start_time = 0;
      std::vector<uint64_t> bytes;  // by GPU, as charged when the suspension began
      bool adopted = false;         // found suspended by an earlier daemon, from the journal
      bool stop = false;            // to be stopped, not checkpointed: it says it cannot be moved
    };
    // Processes that joined the tenant while it is suspended: those being suspended now, those
    // left alone from now on (the driver refused them and they run, or they were stopped and
    // are on their way out), those already logged, and when to look again at those the driver
    // knew nothing of (they wait in their hooks).
    std::vector<SuspendProcess> joining;
    std::set<int32_t> join_skipped, join_noted;
    TokenPolicy::Nanos next_join_check{0};
    std::vector<Process> processes;
    std::vector<uint64_t> bytes;  // the processes' together, by GPU
    TokenPolicy::Nanos operation_started{0}, suspended_since{0};
    uint64_t suspended_ns_before = 0;  // the tenant's counter when this suspension began
    bool busy = false;                 // a job of the suspender's is under way
    std::vector<SuspendProcess> job_processes() const;  // those to checkpoint
    std::vector<SuspendProcess> stop_processes() const;
    // Removes the processes `which` selects; `bytes` becomes the others'.
    void drop(const std::function<bool(const Process&)>& which);
    uint64_t total() const;
  };
  void configure_preemption();
  bool preemptible(uint32_t t) const;
  std::vector<PreemptTenant> preempt_tenants() const;
  std::vector<GpuMemory> gpu_memory() const;
  uint64_t host_available() const;
  void publish_preemption_state(uint32_t t);
  // The same when the published state differs from the policy's (a few loads otherwise: run
  // at every scheduling step).
  void republish_preemption_state(uint32_t t);
  void answer_memory(uint32_t slot, uint32_t sequence, shm::MemoryDecision decision);
  void on_memory_request(const Client& client, const wire::MemoryRequest& request);
  void decide_memory_waits();
  // `stop`: the tenant's processes to stop rather than checkpoint (Verdict::stop).
  void start_suspension(uint32_t t, TokenPolicy::Nanos now, const std::vector<int32_t>& stop);
  // Logs, once per process, a preemptible tenant's process that says it uses what the driver's
  // checkpoint cannot move. Allocates nothing unless it finds a new one.
  void note_claims();
  void on_suspender_outcomes();
  // Suspends the registered processes of suspended tenant t that are not suspended with it
  // (they joined it since, or had no CUDA state when it was suspended); returns when to look
  // again.
  static constexpr std::chrono::nanoseconds kJoinCheckPeriod = std::chrono::seconds(1);
  TokenPolicy::Nanos suspend_joiners(uint32_t t, TokenPolicy::Nanos now);
  void on_joiners_outcome(const SuspendOutcome& outcome, TokenPolicy::Nanos now);
  // Resumes what may be, drops waits given up; returns when to run again.
  TokenPolicy::Nanos preemption_step(TokenPolicy::Nanos now);
  bool suspended(uint32_t t) const;
  // At every statistics tick: the suspended tenants' time, note_claims(), and the processes
  // that joined a suspended tenant (suspend_joiners()).
  void publish_suspended_time(TokenPolicy::Nanos now);
  void forget_memory_waits_of(uint32_t slot);
  std::vector<std::string> preemption_report() const;
  std::string journal_path() const;
  void write_journal();
  void read_journal();
  void adopt_journal();
  // tenant_usage.cpp
  // Takes the GPU time the tenant regions report since the last call, bounded, into the
  // policies and the segment.
  void charge_gpu_time(TokenPolicy::Nanos now);
  // Copies memory, time waited, refusals, the cards' identity and the processes' flags from
  // the tenant regions into the segment, for status and metrics.
  void publish_usage();

  // daemon.cpp
  void update_idle_timer();
  void start_metrics(uint16_t port);
  void add_to_epoll(int fd, uint32_t events);
  void stop();

  DaemonOptions options_;
  Config config_;  // the file's (or `cuslice run`'s) tenants
  PluginTenants plugin_tenants_;  // the device plugin's, applied beside config_
  PolicyParams policy_params_;
  // Before the segment: a second daemon must fail on the sockets before it replaces the
  // first one's segment (os_fds.h, lock_socket_path).
  int socket_lock_fd_ = -1;
  int control_lock_fd_ = -1;
  int listen_fd_ = -1;  // opened last in the constructor: a client that connects finds all ready
  int control_listen_fd_ = -1;  // opened just before listen_fd_: there once the tenant socket is
  SharedSegment segment_;  // holds the lock on the segment itself
  TenantRegions regions_;
  int epoll_fd_ = -1;
  int signal_fd_ = -1;
  int timer_fd_ = -1;
  int stats_fd_ = -1;
  int usage_fd_ = -1;  // the poller's eventfd; -1: the usage watchdog is off
  std::unique_ptr<DriverPoller> driver_poller_;
  UsageWatchdog usage_watchdog_;
  bool usage_error_logged_ = false;
  int watchdog_fd_ = -1;  // -1: systemd did not ask for watchdog pings
  int idle_fd_ = -1;      // -1: without exit_when_idle
  bool idle_armed_ = false;
  // At the descriptor limit the listening sockets are taken out of epoll (else they are
  // ready forever and accept fails forever); the stats timer puts them back.
  bool accept_paused_ = false;
  bool fd_limit_reported_ = false;  // logged once until accepting works again
  std::unique_ptr<MetricsServer> metrics_;
  std::mutex state_mutex_;  // see the top of this file
  // When the metrics thread last published the tenants' usage for a scrape: at most every
  // kMetricsPublishPeriod on their behalf, so that a flood of scrapes costs the daemon little.
  std::chrono::nanoseconds metrics_published_{0};
  static constexpr std::chrono::milliseconds kMetricsPublishPeriod{100};
  std::atomic<bool> serving_{false};  // /healthz
  std::unique_ptr<ConfigWatch> config_watch_;  // with watch_config only
  std::unordered_map<int, Client> clients_;
  std::unordered_map<uid_t, UidUsage> per_uid_;

  // Indexed by segment tenant index; a tenant keeps its index across reloads.
  std::vector<TenantParams> tenant_params_;
  std::array<int, shm::kMaxTenants> tenant_processes_{};
  std::vector<TokenPolicy> policies_;  // one per GPU
  // What the daemon has taken from each tenant region's counters (tenant_usage.cpp), which
  // is what it publishes: never more than the region says, never backwards, bounded per call.
  struct UsageSeen {
    uint64_t gpu_time_ns = 0, wait_ns = 0, oom_refusals = 0;
  };
  std::array<std::array<UsageSeen, shm::kMaxGpus>, shm::kMaxTenants> usage_seen_{};
  TokenPolicy::Nanos gpu_time_read_at_{0}, usage_read_at_{0};
  std::array<std::array<ShareWindow, shm::kMaxGpus>, shm::kMaxTenants> share_windows_{};
  // Who holds each GPU's token since when (for the debug log of long holds).
  struct Held {
    uint32_t tenant = UINT32_MAX;
    std::chrono::nanoseconds since{0}, logged{0};
  };
  std::array<Held, shm::kMaxGpus> held_{};
  // The scheduling step's demand per GPU and tenant, kept between steps so that a step (run at
  // every kick) allocates nothing.
  std::vector<std::vector<TenantActivity>> activity_ =
      std::vector<std::vector<TenantActivity>>(shm::kMaxGpus, std::vector<TenantActivity>(shm::kMaxTenants));

  // Memory preemption (preemption.cpp). The API outlives the suspender that calls it.
  std::unique_ptr<CheckpointApi> checkpoint_api_;
  std::unique_ptr<TenantSuspender> suspender_;
  MemoryPreemption preemption_;
  std::vector<MemoryWait> memory_waits_;
  std::array<Suspension, shm::kMaxTenants> suspensions_{};
  std::map<uint32_t, std::string> last_refusal_;  // by tenant: why its last request was refused
  std::set<std::pair<int32_t, uint64_t>> claims_logged_;  // pid, start time: note_claims() said it
  bool journal_pending_ = false;                  // read_journal found entries to adopt
  nlohmann::json journal_entries_;
};

}  // namespace cuslice
