// What a suspension or a resumption came to, taken into the tenant's Suspension, the policy's
// state (memory_preemption.h) and the tenant's counters in the segment: the suspender's jobs
// (the driver's checkpoint and restore, processes that joined a suspended tenant) and the
// hooks' answers to the fast way's orders (fast_way.h, once read). Each call says what follows
// (memory freed for the allocations waiting, the hooks to be told to move back), and
// SuspensionOperations carries it out: nothing here starts an operation.
//
// Owns how each tenant's last suspension went (for `cuslice status` and the metrics). Writes
// the tenants' suspension counters; reads the registered processes' charges (MemoryFacts).
// Never touches the preemption words, the journal, the suspender or the hooks' slots.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

#include "protocol/shm_protocol.h"
#include "scheduler/preemption/memory_facts.h"
#include "scheduler/preemption/memory_preemption.h"
#include "scheduler/preemption/suspension.h"
#include "scheduler/preemption/tenant_suspender.h"
#include "scheduler/segment/shared_segment.h"

namespace cuslice {

class SuspensionOutcomes {
 public:
  using Nanos = std::chrono::nanoseconds;

  SuspensionOutcomes(SharedSegment& segment, const MemoryFacts& facts, MemoryPreemption& policy);

  // Logs the processes a job found exited and those it stopped.
  void note(const SuspendOutcome& o) const;
  // The driver's checkpoint of tenant o.tenant (all of it, or the rest after the fast way):
  // returns the bytes, by GPU, it freed for the allocations waiting.
  std::vector<uint64_t> checkpointed(const SuspendOutcome& o, Suspension& s, Nanos now);
  // A resumption, the driver's restore or the hooks' move back (as an outcome). True when the
  // hooks, which still hold the tenant's work after a restore, must now move back what they
  // moved out (s.fast is set again).
  bool resumed(const SuspendOutcome& o, Suspension& s, Nanos now);
  // Processes that joined the suspended tenant: suspended with it, or left to run.
  void joined(const SuspendOutcome& o, Suspension& s, Nanos now);
  // The hooks of tenant t say `moved` bytes of s.fast_gpu are off the card now (a first move's
  // and any later one's): returns what more than before, freed for the allocations waiting.
  uint64_t moved(uint32_t t, Suspension& s, uint64_t moved);
  // Every hook of tenant t moved its part (moved() first; `more` is what it returned): the
  // tenant is suspended the fast way, `took` after the orders.
  void fast_suspended(uint32_t t, Suspension& s, uint64_t more, Nanos took, Nanos now);

  // How tenant t's last suspension went: "fast", "checkpoint" (or "") and what it took off.
  struct Last {
    const char* path = "";
    uint64_t moved_out = 0;
  };
  const Last& last(uint32_t t) const { return last_[t]; }

 private:
  // checkpointed()'s steps: a checkpoint refused or failed (true: nothing more to take in);
  // what each process holds now, by its count; what the checkpoint freed.
  bool not_checkpointed(const SuspendOutcome& o, Suspension& s);
  void recount(uint32_t t, Suspension& s) const;
  std::vector<uint64_t> freed(const Suspension& s) const;
  // The tenant's counters once it is suspended, `took` to do so.
  void count_suspended(uint32_t t, Suspension& s, Nanos took, Nanos now);
  // joined()'s: a joining process suspended with the tenant.
  void add_joiner(uint32_t t, Suspension& s, const SuspendProcess& p, Nanos took);

  SharedSegment& segment_;
  const MemoryFacts& facts_;
  MemoryPreemption& policy_;
  std::array<Last, shm::kMaxTenants> last_{};
};

}  // namespace cuslice
