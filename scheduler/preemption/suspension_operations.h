// The tenants' suspensions and resumptions as operations: starts them (the fast way, by the
// hooks on FastWay's orders, or the driver's checkpoint, by the suspender's thread), takes
// what they came to (the hooks' answers, the suspender's outcomes) through SuspensionOutcomes,
// and carries out what follows: the checkpoint of the rest when the hooks could not move
// their part, the hooks' move back after a restore, processes that joined a suspended tenant,
// the journal after every change and the adoption of what an earlier daemon left.
//
// Owns the suspensions (one per tenant entry), the driver's checkpoint API and the suspender,
// and the parts it alone calls: FastWay, SuspensionOutcomes, JournalKeeper. Writes the
// tenants' preemption words (the hooks wait on them). Calls down only: those parts, the
// suspender, MemoryFacts, the policy. Never touches the memory
// requests (what operations free comes back as Progress), the sockets or the token.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "protocol/shm_protocol.h"
#include "scheduler/preemption/checkpoint_api.h"
#include "scheduler/preemption/fast_way.h"
#include "scheduler/preemption/journal_keeper.h"
#include "scheduler/preemption/memory_facts.h"
#include "scheduler/preemption/memory_preemption.h"
#include "scheduler/preemption/suspension.h"
#include "scheduler/preemption/suspension_outcomes.h"
#include "scheduler/preemption/tenant_suspender.h"
#include "scheduler/segment/process_table.h"
#include "scheduler/segment/shared_segment.h"
#include "scheduler/segment/tenant_regions.h"
#include "scheduler/tenants/tenant_table.h"

namespace cuslice {

// What operations came to, for the allocations waiting on them.
struct Progress {
  std::vector<uint64_t> freed = std::vector<uint64_t>(shm::kMaxGpus, 0);  // bytes freed, by GPU
  bool decide = false;  // the waiting allocations are to be decided again
  std::chrono::nanoseconds wake = std::chrono::nanoseconds::max();  // when to look again
};

class SuspensionOperations {
 public:
  using Nanos = std::chrono::nanoseconds;
  static constexpr Nanos kNever = MemoryPreemption::kNever;

  struct Options {
    std::string cuda_library;  // the driver with the checkpoint API
    std::string journal_path;
  };
  SuspensionOperations(Options options, SharedSegment& segment, const TenantRegions& regions,
                       const ProcessTable& processes, const TenantTable& tenants, const MemoryFacts& facts,
                       MemoryPreemption& policy);

  // Start-up: reads the journal an earlier daemon left, to adopt once the tenant table is
  // applied (adopt_journal()).
  void read_journal() { journal_.read(); }
  // Writes every registered process's fast-way policy (at start and every reload).
  void write_move_policies() { fast_.write_policies(); }

  // Loads the driver's checkpoint API and starts the suspender, once: when `wanted` (a
  // preemptible tenant appeared) or a journal waits to be adopted. A node without preemption
  // never opens libcuda in the daemon.
  void load_driver(bool wanted);
  bool on() const { return suspender_ != nullptr; }
  // The suspender's descriptor, readable when outcomes wait; -1 while preemption is off.
  int event_fd() const { return suspender_ ? suspender_->event_fd() : -1; }
  // Takes over, from the journal's entries, what an earlier daemon left suspended.
  void adopt_journal();

  // Suspends tenant t as the policy chose: `move` bytes of `gpu` the fast way, or (0) the
  // driver's checkpoint, stopping the processes in `stop` rather than checkpointing them.
  void suspend(uint32_t t, Nanos now, const std::vector<int32_t>& stop, uint64_t move, uint32_t gpu);
  void resume(uint32_t t, Nanos now);

  // The hooks' answers (at every step); `wake` says when to look again.
  Progress poll(Nanos now);
  // The suspender's outcomes (its descriptor was readable).
  Progress take_outcomes();
  // At every step with something under way: forgets the suspended tenants whose processes all
  // exited, publishes the states, suspends the processes that joined a suspended tenant;
  // returns when to look again.
  Nanos tend(Nanos now);
  // At every statistics tick: the processes that joined a suspended tenant, the suspended
  // tenants' time.
  void tick(Nanos now);

  // Publishes tenant t's state in its preemption word (a wake-up for hooks that wait on it);
  // republish() only when the published state differs from the policy's (a few loads
  // otherwise: run at every scheduling step).
  void publish(uint32_t t);
  void republish(uint32_t t);

  const Suspensions& suspensions() const { return suspensions_; }
  // How tenant t's last suspension went (SuspensionOutcomes::last).
  const SuspensionOutcomes::Last& last(uint32_t t) const { return outcomes_.last(t); }
  // Bit t: tenant entry t is suspended.
  uint64_t suspended_mask() const;

 private:
  void checkpoint(uint32_t t, Nanos now, const std::vector<int32_t>& stop);
  void suspend_fast(uint32_t t, Nanos now, uint32_t gpu, uint64_t bytes);
  void order(uint32_t t, FastWay::Moves moves, uint32_t gpu, uint64_t bytes, Nanos now);
  // The hooks could not do it: the checkpoint moves the rest (the hooks go on holding).
  void escalate(uint32_t t, Nanos now, const std::string& why);
  void take(const FastWay::Answer& answer, Nanos now, Progress& progress);
  void resumed(const SuspendOutcome& outcome, Nanos now);
  // Suspends the registered processes of suspended tenant t that are not suspended with it
  // (they joined it since, or had no CUDA state when it was suspended); returns when to look
  // again.
  Nanos suspend_joiners(uint32_t t, Nanos now);
  void adopt(const JournalKeeper::Found& found, const std::string& name, Nanos now);
  void write_journal() const { journal_.write(suspensions_, policy_); }

  std::string cuda_library_;
  SharedSegment& segment_;
  const TenantTable& tenants_;
  const MemoryFacts& facts_;
  MemoryPreemption& policy_;
  FastWay fast_;
  SuspensionOutcomes outcomes_;
  JournalKeeper journal_;
  // The API outlives the suspender that calls it.
  std::unique_ptr<CheckpointApi> checkpoint_api_;
  std::unique_ptr<TenantSuspender> suspender_;
  Suspensions suspensions_{};
};

}  // namespace cuslice
