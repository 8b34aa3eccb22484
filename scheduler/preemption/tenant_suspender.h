// Suspends and resumes tenants for the daemon, on a thread of its own: the driver's checkpoint
// of one process can take seconds (it waits for the process's submitted work, then copies all
// its memory; docs/evidence/benchmarks.md has figures), and the event loop must go on scheduling
// meanwhile.
//
// A tenant's processes are one unit:
//   suspend  lock every process (bounded), then checkpoint each. If one cannot be locked or
//            checkpointed, the others are restored and unlocked again: the tenant runs as
//            before, and the outcome says why (kRefused). If that rollback fails too, kFailed.
//   resume   restore every process, then unlock every one. A restore refused for a reason the
//            driver may get over (the process is still checkpointed) checkpoints again those
//            already restored: the tenant stays suspended (kDeferred). One that leaves a
//            process stuck (out of memory: current drivers cannot restore it after that) or
//            FAILED: the others are unlocked and run, kFailed names the stuck processes and
//            what to do.
// A suspension may also stop processes (SIGKILL, waited for): those the daemon names because
// they say they use what the checkpoint cannot move (no driver call is made on them), and,
// when the job says so, one the driver refuses for what it is (its lock's timeout passes, the
// checkpoint does not support what it holds, or the driver left it FAILED) instead of undoing
// the whole suspension. A failure of the daemon's own (any other driver error, a kill not
// permitted) stops nobody: the suspension is undone (kRefused).
// A process that exited (or whose pid now names another process) is skipped and listed in
// `gone`; one alive that the driver knows no CUDA state of (it holds nothing on a GPU yet) is
// left alone and listed in `unknown`. Jobs run one at a time, in the order submitted; each
// outcome is read by the loop when event_fd() is readable.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "scheduler/preemption/checkpoint_api.h"

namespace cuslice {

struct SuspendProcess {
  int32_t pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22; 0: not checked
};

struct SuspendJob {
  enum class Kind : uint8_t { kSuspend, kResume };
  Kind kind = Kind::kSuspend;
  uint32_t tenant = 0;
  std::vector<SuspendProcess> processes;
  // kSuspend only: stopped before the others are locked, without any driver call on them.
  std::vector<SuspendProcess> stop;
  // kSuspend only: a process the driver refuses for what it is is stopped, the others
  // suspended (`scheduler.preemption.unsuspendable: stop`).
  bool stop_refused = false;
  // kSuspend of processes that joined a tenant already suspended: for the daemon, which reads
  // the outcome as about these processes only.
  bool join = false;
};

struct SuspendOutcome {
  enum class Kind : uint8_t {
    kDone,      // suspended (or resumed) as asked
    kRefused,   // a suspension that did not happen: every process runs as before
    kDeferred,  // a resumption that did not happen: every process is still suspended
    kFailed,    // some process is stuck or lost its GPU state: see reason and stuck
  };
  SuspendJob::Kind job = SuspendJob::Kind::kSuspend;
  uint32_t tenant = 0;
  Kind kind = Kind::kDone;
  std::string reason;                 // empty for kDone
  bool join = false;                  // the job's
  std::vector<int32_t> gone;          // processes found exited
  std::vector<int32_t> unknown;       // alive, but with no CUDA state the driver knows of
  struct Stopped {
    int32_t pid = 0;
    std::string why;  // the driver's refusal; empty for a process the job named in `stop`
  };
  std::vector<Stopped> stopped;       // processes killed instead of suspended
  std::vector<int32_t> stuck;         // kFailed: processes left locked, checkpointed or failed
  std::chrono::nanoseconds took{0};   // from the start of the job to its end
};

const char* to_string(SuspendOutcome::Kind kind);

// The operations on one tenant, synchronously (what the thread below runs; tests call it
// directly too).
SuspendOutcome run_suspend_job(CheckpointApi& api, const SuspendJob& job, unsigned lock_timeout_ms);

// Kills the process (SIGKILL through a pidfd, so that a pid reused meanwhile is never hit:
// `start_time` is checked once the descriptor is open; 0 skips the check) and waits up to
// timeout_ms for it to exit. Nothing when it is gone (or was gone already); else why not.
std::optional<std::string> stop_process(int32_t pid, uint64_t start_time, unsigned timeout_ms);

class TenantSuspender {
 public:
  // lock_timeout_ms: how long a lock may wait for a process's driver calls in progress.
  TenantSuspender(CheckpointApi& api, unsigned lock_timeout_ms);
  ~TenantSuspender();  // finishes the job in progress, drops the others
  TenantSuspender(const TenantSuspender&) = delete;
  TenantSuspender& operator=(const TenantSuspender&) = delete;

  void submit(SuspendJob job);
  // Readable (an eventfd) while outcomes wait to be taken.
  int event_fd() const { return event_fd_; }
  std::vector<SuspendOutcome> take();
  // Jobs submitted and not yet taken as outcomes.
  size_t busy() const;

 private:
  void loop();

  CheckpointApi& api_;
  const unsigned lock_timeout_ms_;
  int event_fd_ = -1;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<SuspendJob> jobs_;
  std::vector<SuspendOutcome> outcomes_;
  size_t in_flight_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace cuslice
