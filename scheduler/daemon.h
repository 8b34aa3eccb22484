// cuslice-scheduler's event loop: one thread, one epoll set.
//
//   listening socket   -> accept, remember the peer's pid/uid/gid (SO_PEERCRED)
//   client sockets     -> first message: registration (assign tenant, hand out a slot);
//                         then kicks (re-run the policy now); EOF: the process is gone
//   signalfd           -> SIGHUP reloads the configuration, SIGTERM/SIGINT stop
//   timerfd            -> the policy asked to be run again at a given time
//
// The policy itself lives in TokenPolicy (one per GPU); this class only moves facts
// between the segment, the sockets and the policies.
#pragma once

#include <sys/types.h>

#include <array>
#include <string>
#include <unordered_map>
#include <vector>

#include "shared_segment.h"
#include "tenant_config.h"
#include "token_policy.h"

namespace cuslice {

struct DaemonOptions {
  std::string config_path;
  std::string socket_path;
  std::string shm_name;
};

class Daemon {
 public:
  // Loads the configuration, creates the segment and the socket; throws on failure
  // (configuration errors are logged one per line before).
  explicit Daemon(DaemonOptions options);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Serves until SIGTERM or SIGINT. Returns the process exit status.
  int run();

 private:
  struct Client {
    int slot = -1;  // -1 until registered
    pid_t pid = 0;
    uid_t uid = 0;
    gid_t gid = 0;
  };

  void apply_config(const Config& config);
  void reload();
  void accept_clients();
  void on_client_readable(int fd);
  void register_client(int fd, Client& client);
  void drop_client(int fd);
  void release_slot(uint32_t slot);
  void schedule();
  void arm_timer(TokenPolicy::Nanos wake_at);
  void stop();

  DaemonOptions options_;
  Config config_;
  PolicyParams policy_params_;
  // Before the segment: a second daemon must fail on the socket before it replaces the
  // first one's segment.
  int listen_fd_ = -1;
  SharedSegment segment_;
  int epoll_fd_ = -1;
  int signal_fd_ = -1;
  int timer_fd_ = -1;
  std::unordered_map<int, Client> clients_;

  // Indexed by segment tenant index; a tenant keeps its index across reloads.
  std::vector<TenantParams> tenant_params_;
  std::array<int, shm::kMaxTenants> tenant_processes_{};
  std::vector<TokenPolicy> policies_;  // one per GPU
  std::array<std::array<uint64_t, shm::kMaxGpus>, shm::kMaxTenants> gpu_time_seen_{};
};

}  // namespace cuslice
