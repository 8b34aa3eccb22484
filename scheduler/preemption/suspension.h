// One tenant's processes as the daemon suspended them (or is suspending or resuming them):
// who, with how many bytes on each GPU, and the bookkeeping of processes that joined the
// tenant while it was suspended. Data and its arithmetic only: SuspensionOperations starts
// and ends suspensions, SuspensionOutcomes takes in what they came to, the TenantSuspender's
// thread calls the driver, FastWay orders the hooks.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <set>
#include <vector>

#include "protocol/shm_protocol.h"
#include "scheduler/preemption/tenant_suspender.h"

namespace cuslice {

struct Suspension {
  using Nanos = std::chrono::nanoseconds;
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
  Nanos next_join_check{0};
  // How often processes that joined a suspended tenant, unknown to the driver, are looked at.
  static constexpr Nanos kJoinCheckPeriod = std::chrono::seconds(1);
  std::vector<Process> processes;
  std::vector<uint64_t> bytes;  // the processes' together, by GPU
  Nanos operation_started{0}, suspended_since{0};
  uint64_t suspended_ns_before = 0;  // the tenant's counter when this suspension began
  bool busy = false;                 // a job of the suspender's, or the hooks' moves, under way

  // The fast way (memory_preemption.h, rule 6): the processes' hooks hold their work and move
  // memory off `fast_gpu` themselves, on orders written in their slots (fast_way.h).
  bool fast = false;            // suspended the fast way, and not checkpointed since
  bool hooks_hold = false;      // the hooks hold the processes' work: they must be told to go on
  bool hooks_released = false;  // resuming after a checkpoint: the hooks were told
  uint32_t fast_gpu = 0;
  uint64_t moved_out = 0;       // bytes the hooks took off fast_gpu

  // A fresh suspension that keeps of this one (suspended the fast way, its hooks holding the
  // work) what a checkpoint of the rest goes on with: the hooks' hold, what they moved, the
  // time suspended.
  Suspension held_by_hooks() const;
  std::vector<SuspendProcess> job_processes() const;  // those to checkpoint
  std::vector<SuspendProcess> stop_processes() const;
  // Removes the processes `which` selects; `bytes` becomes the others'.
  void drop(const std::function<bool(const Process&)>& which);
  uint64_t total() const;
};

// Every tenant entry's, by index.
using Suspensions = std::array<Suspension, shm::kMaxTenants>;

}  // namespace cuslice
