#include "scheduler/preemption/tenant_suspender.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "scheduler/os/process_info.h"

namespace cuslice {
namespace {

using Clock = std::chrono::steady_clock;
using State = CheckpointApi::State;
using Kind = SuspendOutcome::Kind;

// How long a stopped process may take to exit: SIGKILL is taken at once, but a process in the
// middle of a driver call leaves once the kernel driver lets go of it.
constexpr unsigned kStopTimeoutMs = 10'000;

std::string process_name(int32_t pid) { return "process " + std::to_string(pid); }

// Alive under that pid (and start time, when known).
bool alive(int32_t pid, uint64_t start_time) {
  const std::optional<uint64_t> started = process_start_time(pid);
  return started && (start_time == 0 || *started == start_time);
}

// Collects what one job did to each process, and undoes it. A process found exited (or
// stopped) keeps its entry with state kGone and is skipped from then on.
class Job {
 public:
  Job(CheckpointApi& api, const SuspendJob& job) : api_(api), stop_(job.stop), stop_refused_(job.stop_refused) {
    outcome_.job = job.kind;
    outcome_.tenant = job.tenant;
    outcome_.join = job.join;
    for (const SuspendProcess& p : job.processes) {
      if (p.start_time != 0 && process_start_time(p.pid) != p.start_time) {
        outcome_.gone.push_back(p.pid);  // exited; the pid may even be another process's now
        continue;
      }
      const State state = api_.state(p.pid);
      if (state == State::kGone) {
        // Alive, and no CUDA state the driver knows of: nothing of it is on a GPU to move.
        (alive(p.pid, p.start_time) ? outcome_.unknown : outcome_.gone).push_back(p.pid);
        continue;
      }
      processes_.push_back({p.pid, p.start_time, state});
    }
  }

  SuspendOutcome suspend(unsigned lock_timeout_ms) {
    for (const SuspendProcess& p : stop_) {
      // Nothing is locked yet: a process that cannot be stopped leaves the others as they were.
      if (auto error = stop_process(p.pid, p.start_time, kStopTimeoutMs)) return finish(Kind::kRefused, *error);
      outcome_.stopped.push_back({p.pid, ""});
    }
    for (Process& p : processes_)
      if (std::optional<SuspendOutcome> undone = lock(p, lock_timeout_ms)) return std::move(*undone);
    for (Process& p : processes_)
      if (std::optional<SuspendOutcome> undone = checkpoint(p)) return std::move(*undone);
    return finish(Kind::kDone, "");
  }

  SuspendOutcome resume() {
    std::vector<int32_t> stuck;
    std::string why;
    for (Process& p : processes_) {
      const int32_t pid = p.pid;
      if (p.state == State::kFailed) {
        stuck.push_back(pid);
        why = process_name(pid) + " is in the driver's FAILED state: its GPU state is lost; stop it (kill " +
              std::to_string(pid) + ") and start the job again";
        continue;
      }
      if (p.state != State::kCheckpointed) continue;
      const CheckpointApi::Result r = api_.restore(pid);
      if (r.ok()) {
        p.state = State::kLocked;
        continue;
      }
      if (exited(p)) continue;
      const State now = api_.state(pid);
      if (now == State::kCheckpointed && r.code != CheckpointApi::kOutOfMemory) {
        // The driver may take it later: back to a uniformly suspended tenant.
        const std::vector<int32_t> lost = checkpoint_again();
        if (lost.empty()) return finish(Kind::kDeferred, "restore of " + process_name(pid) + " failed: " + r.text);
        stuck = lost;
        why = "restore of " + process_name(pid) + " failed (" + r.text + ") and checkpointing the others again failed";
        break;
      }
      stuck.push_back(pid);
      why = restore_failure(pid, r, now);
    }
    unlock_all(stuck, why);
    if (!stuck.empty()) {
      outcome_.stuck = stuck;
      return finish(Kind::kFailed, why);
    }
    return finish(Kind::kDone, "");
  }

 private:
  struct Process {
    int32_t pid;
    uint64_t start_time;
    State state;  // kGone: exited or stopped, skipped from then on
  };

  // suspend()'s steps, on one process: its lock, then its checkpoint. Nothing while the
  // suspension goes on (the process is locked, checkpointed, stopped or gone); the outcome
  // once it cannot, everything undone.
  std::optional<SuspendOutcome> lock(Process& p, unsigned lock_timeout_ms) {
    if (p.state == State::kFailed) {
      const std::string why = process_name(p.pid) + " is in the driver's FAILED state";
      if (stop_refused_ && stopped(p, why)) return std::nullopt;
      return fail_rolling_back({p.pid}, why);
    }
    if (p.state != State::kRunning) return std::nullopt;  // locked or checkpointed already: part of the unit
    const CheckpointApi::Result r = api_.lock(p.pid, lock_timeout_ms);
    if (r.ok()) {
      p.state = State::kLocked;
      return std::nullopt;
    }
    if (exited(p)) return std::nullopt;
    std::string why = "lock of " + process_name(p.pid) + " failed: " + r.text;
    if (r.code == CheckpointApi::kNotReady) {
      why += " (its driver calls did not return within " + std::to_string(lock_timeout_ms) + " ms)";
      if (stop_refused_ && stopped(p, why)) return std::nullopt;
    }
    return refuse_rolling_back(why);
  }

  std::optional<SuspendOutcome> checkpoint(Process& p) {
    if (p.state != State::kLocked) return std::nullopt;
    const CheckpointApi::Result r = api_.checkpoint(p.pid);
    if (r.ok()) {
      p.state = State::kCheckpointed;
      return std::nullopt;
    }
    if (exited(p)) return std::nullopt;
    const std::string why = "checkpoint of " + process_name(p.pid) + " failed: " + r.text;
    if (api_.state(p.pid) == State::kFailed) {
      p.state = State::kFailed;
      if (stop_refused_ && stopped(p, why + "; the driver left it FAILED")) return std::nullopt;
      return fail_rolling_back({p.pid}, why + "; the driver left it FAILED");
    }
    if (r.code == CheckpointApi::kNotSupported && stop_refused_ && stopped(p, why)) return std::nullopt;
    return refuse_rolling_back(why);
  }

  // Why a restore that left process `pid` in state `now` failed, and what to do.
  static std::string restore_failure(int32_t pid, const CheckpointApi::Result& r, State now) {
    std::string why = "restore of " + process_name(pid) + " failed: " + r.text;
    if (r.code == CheckpointApi::kOutOfMemory) {
      why += "; current drivers cannot restore a process after that, so its GPU state is lost: stop it (kill " +
             std::to_string(pid) + ") and start the job again";
    } else if (now == State::kFailed) {
      why += "; the driver left it FAILED, its GPU state is lost: stop it (kill " + std::to_string(pid) +
             ") and start the job again";
    } else {
      why += "; it is " + std::string(to_string(now)) + ": stop it (kill " + std::to_string(pid) +
             ") and start the job again";
    }
    return why;
  }

  // resume()'s last step: unlocks every process restored; those that stay locked join `stuck`.
  void unlock_all(std::vector<int32_t>& stuck, std::string& why) {
    for (Process& p : processes_) {
      if (p.state != State::kLocked) continue;
      const CheckpointApi::Result r = api_.unlock(p.pid);
      if (r.ok() || exited(p)) {
        p.state = State::kRunning;
        continue;
      }
      stuck.push_back(p.pid);
      if (why.empty()) why = "unlock of " + process_name(p.pid) + " failed: " + r.text;
    }
  }

  bool exited(Process& p) {
    if (api_.state(p.pid) != State::kGone) return false;
    outcome_.gone.push_back(p.pid);
    p.state = State::kGone;
    return true;
  }

  // Stops a process the driver refused (`why`); false when it could not be stopped (the reason
  // goes into the outcome's through refuse_rolling_back's caller, appended to `why`).
  bool stopped(Process& p, const std::string& why) {
    if (auto error = stop_process(p.pid, p.start_time, kStopTimeoutMs)) {
      stop_error_ = *error;
      return false;
    }
    outcome_.stopped.push_back({p.pid, why});
    p.state = State::kGone;
    return true;
  }

  // Puts every process back to running: restores those checkpointed, unlocks those locked.
  // Returns the processes that could not be.
  std::vector<int32_t> roll_back() {
    std::vector<int32_t> stuck;
    for (Process& p : processes_) {
      if (p.state == State::kCheckpointed) {
        if (api_.restore(p.pid).ok()) {
          p.state = State::kLocked;
        } else if (api_.state(p.pid) != State::kGone) {
          stuck.push_back(p.pid);
          continue;
        }
      }
      if (p.state == State::kLocked && !api_.unlock(p.pid).ok() && api_.state(p.pid) != State::kGone)
        stuck.push_back(p.pid);
    }
    return stuck;
  }

  // Checkpoints again the processes a resume restored; returns those that could not be.
  std::vector<int32_t> checkpoint_again() {
    std::vector<int32_t> stuck;
    for (Process& p : processes_) {
      if (p.state != State::kLocked) continue;
      if (api_.checkpoint(p.pid).ok()) {
        p.state = State::kCheckpointed;
      } else if (api_.state(p.pid) != State::kGone) {
        stuck.push_back(p.pid);
      }
    }
    return stuck;
  }

  SuspendOutcome refuse_rolling_back(std::string why) {
    if (!stop_error_.empty()) why += "; stopping it instead failed: " + stop_error_;
    std::vector<int32_t> stuck = roll_back();
    if (stuck.empty()) return finish(Kind::kRefused, why);
    outcome_.stuck = stuck;
    return finish(Kind::kFailed, why + "; undoing the suspension of the other processes failed too");
  }

  SuspendOutcome fail_rolling_back(std::vector<int32_t> stuck, std::string why) {
    if (!stop_error_.empty()) why += "; stopping it instead failed: " + stop_error_;
    for (Process& p : processes_)
      if (std::count(stuck.begin(), stuck.end(), p.pid) > 0) p.state = State::kGone;
    for (int32_t pid : roll_back()) stuck.push_back(pid);
    outcome_.stuck = stuck;
    return finish(Kind::kFailed, why + ": its GPU state is lost; stop it and start the job again");
  }

  SuspendOutcome finish(Kind kind, std::string reason) {
    outcome_.kind = kind;
    outcome_.reason = std::move(reason);
    return std::move(outcome_);
  }

  CheckpointApi& api_;
  const std::vector<SuspendProcess> stop_;
  const bool stop_refused_;
  std::string stop_error_;  // why the last stop failed
  SuspendOutcome outcome_;
  std::vector<Process> processes_;
};

}  // namespace

std::optional<std::string> stop_process(int32_t pid, uint64_t start_time, unsigned timeout_ms) {
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    if (errno == ESRCH) return std::nullopt;
    return "cannot stop " + process_name(pid) + ": pidfd_open: " + std::strerror(errno);
  }
  // The descriptor names one process for good: checked now, the pid cannot be another's when
  // the signal goes.
  if (!alive(pid, start_time)) {
    close(fd);
    return std::nullopt;
  }
  if (syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0) != 0) {
    const int error = errno;
    close(fd);
    if (error == ESRCH) return std::nullopt;
    return "cannot stop " + process_name(pid) + ": " + std::strerror(error) +
           " (the scheduler needs the process's user, or CAP_KILL)";
  }
  // Readable once it has exited, whoever its parent is.
  pollfd exit_fd{fd, POLLIN, 0};
  int ready = -1;
  do {
    ready = poll(&exit_fd, 1, static_cast<int>(timeout_ms));
  } while (ready < 0 && errno == EINTR);
  close(fd);
  if (ready != 1) return process_name(pid) + " did not exit within " + std::to_string(timeout_ms) + " ms of SIGKILL";
  return std::nullopt;
}

const char* to_string(SuspendOutcome::Kind kind) {
  switch (kind) {
    case Kind::kDone: return "done";
    case Kind::kRefused: return "refused";
    case Kind::kDeferred: return "deferred";
    case Kind::kFailed: return "failed";
  }
  return "?";
}

SuspendOutcome run_suspend_job(CheckpointApi& api, const SuspendJob& job, unsigned lock_timeout_ms) {
  const Clock::time_point start = Clock::now();
  if (!api.available()) {
    SuspendOutcome outcome;
    outcome.job = job.kind;
    outcome.tenant = job.tenant;
    outcome.kind = job.kind == SuspendJob::Kind::kSuspend ? Kind::kRefused : Kind::kDeferred;
    outcome.reason = "the driver's checkpoint API is not available: " + api.why();
    return outcome;
  }
  Job run(api, job);
  SuspendOutcome outcome = job.kind == SuspendJob::Kind::kSuspend ? run.suspend(lock_timeout_ms) : run.resume();
  outcome.took = Clock::now() - start;
  return outcome;
}

TenantSuspender::TenantSuspender(CheckpointApi& api, unsigned lock_timeout_ms)
    : api_(api), lock_timeout_ms_(lock_timeout_ms) {
  event_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  thread_ = std::thread([this] { loop(); });
}

TenantSuspender::~TenantSuspender() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  close(event_fd_);
}

void TenantSuspender::submit(SuspendJob job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
    ++in_flight_;
  }
  wake_.notify_all();
}

std::vector<SuspendOutcome> TenantSuspender::take() {
  uint64_t count = 0;
  while (read(event_fd_, &count, sizeof count) > 0) {
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<SuspendOutcome> out = std::move(outcomes_);
  outcomes_.clear();
  in_flight_ -= out.size();
  return out;
}

size_t TenantSuspender::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_flight_;
}

void TenantSuspender::loop() {
  for (;;) {
    SuspendJob job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    SuspendOutcome outcome = run_suspend_job(api_, job, lock_timeout_ms_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      outcomes_.push_back(std::move(outcome));
    }
    const uint64_t one = 1;
    if (write(event_fd_, &one, sizeof one) < 0) {
      // The counter cannot overflow with one job at a time: nothing to do.
    }
  }
}

}  // namespace cuslice
