// The fast way of suspending (memory_preemption.h, rule 6), the hooks' side: the orders the
// daemon writes in the slots of a tenant's processes (shm_protocol.h, ProcessSlot::move_*) and
// the answers their hooks write in the tenant's region (ProcessUse::move_*). Moving out: every
// process holds its work, drains it, and those asked move their part of the GPU's memory to
// host memory. Moving back: all of it back, then the work goes on. The daemon never waits for
// the answers on the event loop: poll() looks at them at every step (each answer kicks it),
// and a tenant whose hooks do not all answer in time is reported as timed out. What the hooks
// report is the tenant's word, bounded by what its processes hold on the GPU.
//
// Owns the orders given and not yet all answered. Writes the processes' slots (orders, the
// fast way's policy); reads the registered processes and the tenant regions. Never touches
// the suspensions, the policy, the tenants' words or counters: what the answers come to is
// SuspensionOperations' and SuspensionOutcomes' to say.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

#include "protocol/shm_protocol.h"
#include "scheduler/segment/process_table.h"
#include "scheduler/segment/shared_segment.h"
#include "scheduler/segment/tenant_regions.h"
#include "scheduler/tenants/tenant_table.h"

namespace cuslice {

class FastWay {
 public:
  using Nanos = std::chrono::nanoseconds;
  static constexpr Nanos kNever = Nanos::max();
  // How often poll() wants to look at the answers while some are missing, besides the kicks.
  static constexpr Nanos kPollPeriod = std::chrono::milliseconds(50);

  enum class Moves : uint8_t { kOut, kBack };

  FastWay(SharedSegment& segment, const TenantRegions& regions, const ProcessTable& processes,
          const TenantTable& tenants);

  // Writes every registered process's fast-way policy (at start and every reload).
  void write_policies();
  // Orders every registered process of tenant t. kOut: hold the work and move `bytes` of `gpu`
  // off the card, spread over the processes, the most movable first. kBack: everything back,
  // `bytes` being what moved out (the time allowed grows with it). An order given while
  // earlier ones wait for answers replaces them.
  void order(uint32_t t, Moves moves, uint32_t gpu, uint64_t bytes, Nanos now);
  // Whether tenant t's hooks have orders not yet all answered.
  bool ordered(uint32_t t) const { return waits_[t].waiting; }

  // What a tenant's hooks answered to its orders, once all did or the time allowed is over.
  struct Answer {
    uint32_t tenant = 0;
    Moves moves = Moves::kOut;
    bool timed_out = false;  // some did not answer in time
    bool failed = false;     // some could not do it
    bool deferred = false;   // kBack: the GPU had no room yet for some
    uint64_t moved = 0;      // off the card now, by the hooks' word bounded by what they hold
  };
  struct Answers {
    std::vector<Answer> done;  // the orders these answer are forgotten
    Nanos wake = kNever;       // when to look again, while some are missing
  };
  Answers poll(Nanos now);

 private:
  struct Order {
    uint32_t slot = 0;
    int32_t pid = 0;
    uint32_t sequence = 0;
  };
  struct Wait {  // one tenant's orders
    bool waiting = false;
    Moves moves = Moves::kOut;
    uint32_t gpu = 0;
    std::vector<Order> orders;
    Nanos deadline{0};
  };
  // Writes one order in `rec`'s slot; returns its sequence.
  uint32_t write_order(const ProcessRecord& rec, Moves moves, uint32_t gpu, uint64_t bytes);
  // Reads the answers to tenant t's orders into `answer`; false while some are missing.
  bool read_answers(uint32_t t, Answer& answer) const;

  SharedSegment& segment_;
  const TenantRegions& regions_;
  const ProcessTable& processes_;
  const TenantTable& tenants_;
  std::array<Wait, shm::kMaxTenants> waits_{};
};

}  // namespace cuslice
