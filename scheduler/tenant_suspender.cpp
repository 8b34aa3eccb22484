#include "tenant_suspender.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <system_error>

#include "process_info.h"

namespace cuslice {
namespace {

using Clock = std::chrono::steady_clock;
using State = CheckpointApi::State;
using Kind = SuspendOutcome::Kind;

std::string process_name(int32_t pid) { return "process " + std::to_string(pid); }

// Collects what one job did to each process, and undoes it.
class Job {
 public:
  Job(CheckpointApi& api, const SuspendJob& job) : api_(api) {
    outcome_.job = job.kind;
    outcome_.tenant = job.tenant;
    for (const SuspendProcess& p : job.processes) {
      if (p.start_time != 0 && process_start_time(p.pid) != p.start_time) {
        outcome_.gone.push_back(p.pid);  // exited; the pid may even be another process's now
        continue;
      }
      const State state = api_.state(p.pid);
      if (state == State::kGone) {
        outcome_.gone.push_back(p.pid);
        continue;
      }
      processes_.push_back({p.pid, state});
    }
  }

  SuspendOutcome suspend(unsigned lock_timeout_ms) {
    for (auto& [pid, state] : processes_) {
      if (state == State::kFailed) return fail_rolling_back({pid}, process_name(pid) + " is in the driver's FAILED state");
      if (state != State::kRunning) continue;  // locked or checkpointed already: part of the unit
      const CheckpointApi::Result r = api_.lock(pid, lock_timeout_ms);
      if (r.ok()) {
        state = State::kLocked;
        continue;
      }
      if (exited(pid)) continue;
      std::string why = "lock of " + process_name(pid) + " failed: " + r.text;
      if (r.code == CheckpointApi::kNotReady) {
        why += " (its driver calls did not return within " + std::to_string(lock_timeout_ms) + " ms)";
      }
      return refuse_rolling_back(why);
    }
    for (auto& [pid, state] : processes_) {
      if (state != State::kLocked) continue;
      const CheckpointApi::Result r = api_.checkpoint(pid);
      if (r.ok()) {
        state = State::kCheckpointed;
        continue;
      }
      if (exited(pid)) continue;
      const std::string why = "checkpoint of " + process_name(pid) + " failed: " + r.text;
      if (api_.state(pid) == State::kFailed) {
        state = State::kFailed;
        return fail_rolling_back({pid}, why + "; the driver left it FAILED");
      }
      return refuse_rolling_back(why);
    }
    return finish(Kind::kDone, "");
  }

  SuspendOutcome resume() {
    std::vector<int32_t> stuck;
    std::string why;
    for (auto& [pid, state] : processes_) {
      if (state == State::kFailed) {
        stuck.push_back(pid);
        why = process_name(pid) + " is in the driver's FAILED state: its GPU state is lost; stop it (kill " +
              std::to_string(pid) + ") and start the job again";
        continue;
      }
      if (state != State::kCheckpointed) continue;
      const CheckpointApi::Result r = api_.restore(pid);
      if (r.ok()) {
        state = State::kLocked;
        continue;
      }
      if (exited(pid)) continue;
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
      why = "restore of " + process_name(pid) + " failed: " + r.text;
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
    }
    for (auto& [pid, state] : processes_) {
      if (state != State::kLocked) continue;
      const CheckpointApi::Result r = api_.unlock(pid);
      if (r.ok() || exited(pid)) {
        state = State::kRunning;
        continue;
      }
      stuck.push_back(pid);
      if (why.empty()) why = "unlock of " + process_name(pid) + " failed: " + r.text;
    }
    if (!stuck.empty()) {
      outcome_.stuck = stuck;
      return finish(Kind::kFailed, why);
    }
    return finish(Kind::kDone, "");
  }

 private:
  struct Process {
    int32_t pid;
    State state;
  };

  bool exited(int32_t pid) {
    if (api_.state(pid) != State::kGone) return false;
    outcome_.gone.push_back(pid);
    std::erase_if(processes_, [&](const Process& p) { return p.pid == pid; });
    return true;
  }

  // Puts every process back to running: restores those checkpointed, unlocks those locked.
  // Returns the processes that could not be.
  std::vector<int32_t> roll_back() {
    std::vector<int32_t> stuck;
    for (auto& [pid, state] : processes_) {
      if (state == State::kCheckpointed) {
        if (api_.restore(pid).ok()) {
          state = State::kLocked;
        } else if (api_.state(pid) != State::kGone) {
          stuck.push_back(pid);
          continue;
        }
      }
      if (state == State::kLocked && !api_.unlock(pid).ok() && api_.state(pid) != State::kGone) stuck.push_back(pid);
    }
    return stuck;
  }

  // Checkpoints again the processes a resume restored; returns those that could not be.
  std::vector<int32_t> checkpoint_again() {
    std::vector<int32_t> stuck;
    for (auto& [pid, state] : processes_) {
      if (state != State::kLocked) continue;
      if (api_.checkpoint(pid).ok()) {
        state = State::kCheckpointed;
      } else if (api_.state(pid) != State::kGone) {
        stuck.push_back(pid);
      }
    }
    return stuck;
  }

  SuspendOutcome refuse_rolling_back(const std::string& why) {
    std::vector<int32_t> stuck = roll_back();
    if (stuck.empty()) return finish(Kind::kRefused, why);
    outcome_.stuck = stuck;
    return finish(Kind::kFailed, why + "; undoing the suspension of the other processes failed too");
  }

  SuspendOutcome fail_rolling_back(std::vector<int32_t> stuck, const std::string& why) {
    std::erase_if(processes_, [&](const Process& p) { return std::count(stuck.begin(), stuck.end(), p.pid) > 0; });
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
  SuspendOutcome outcome_;
  std::vector<Process> processes_;
};

}  // namespace

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
