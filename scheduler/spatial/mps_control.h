// The MPS control daemon the scheduler owns for its spatial GPUs (docs/design/spatial.md):
// started with the scheduler (`nvidia-cuda-mps-control -f`, a child of the scheduler, with a
// private pipe and log directory), started again when it ends, stopped with the scheduler.
// Its state goes to the segment (shm::SpatialState) for the hooks and `cuslice status`.
//
// Owns the control daemon's process (a pidfd the daemon watches), its directories and the
// segment's spatial header. Never touches the tenants, the token or the sockets; which
// processes join the server is the registrar's to decide.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "config/tenant_config.h"
#include "scheduler/segment/shared_segment.h"

namespace cuslice {

class MpsControl {
 public:
  using Nanos = std::chrono::nanoseconds;

  // `socket_path`: the tenant socket, beside which the default directories go.
  MpsControl(SharedSegment& segment, const SpatialSettings& settings, const std::string& socket_path);
  ~MpsControl();
  MpsControl(const MpsControl&) = delete;
  MpsControl& operator=(const MpsControl&) = delete;

  // Starts the control daemon when any GPU is spatial. Never throws: a daemon that cannot be
  // started is logged and marked failed (spatial tenants then time-slice), and retried.
  void start();
  // The control daemon's pidfd, readable once it exited; -1 while none runs.
  int fd() const { return pidfd_; }
  // The pidfd was readable: reaps it and arranges the restart.
  void on_exit();
  // Called a few times a second: starts the control daemon again once its back-off passed.
  void tick(Nanos now);
  // Stops it (`quit` through the control pipe, then SIGTERM, then SIGKILL), waits for it.
  void stop();
  // The control daemon's pid: the child's, or for one kept from before, what its pid file in
  // the pipe directory says; 0 when none is known.
  pid_t pid() const;

 private:
  // fork + exec of `mps_control -f` with its environment; false when it cannot start.
  bool spawn();
  void publish(uint32_t state);
  // Sends `quit` with the control program, waiting at most `timeout` for it to answer.
  bool send_quit(Nanos timeout);

  SharedSegment& segment_;
  SpatialSettings settings_;
  std::string program_, pipe_dir_, log_dir_;
  pid_t pid_ = -1;
  bool adopted_ = false;  // one that answered before this scheduler started: no pid of ours
  int pidfd_ = -1;
  Nanos started_at_{0};
  Nanos restart_at_{0};
  Nanos backoff_{std::chrono::milliseconds(500)};
};

}  // namespace cuslice
