// Preemptor (preemptor.h): the wiring, at start, at every reload, step and tick.
#include "scheduler/preemption/preemptor.h"

#include <algorithm>

namespace cuslice {

using Nanos = Preemptor::Nanos;

Preemptor::Preemptor(PreemptionOptions options, SharedSegment& segment, TenantRegions& regions,
                     const ProcessTable& processes, const TenantTable& tenants)
    : segment_(segment),
      tenants_(tenants),
      facts_(options.meminfo_path, segment, regions, processes, tenants),
      claims_(segment, regions, processes, tenants),
      operations_({options.cuda_library, options.journal_path}, segment, regions, processes, tenants, facts_, policy_),
      requests_(segment, facts_, policy_, operations_),
      report_(segment, tenants, facts_, policy_, operations_, requests_) {}

void Preemptor::configure() {
  const Config& config = tenants_.config();
  PreemptionParams params;
  params.resume_holdoff = config.scheduler.preemption.resume_holdoff;
  params.host_reserve = config.scheduler.preemption.host_reserve;
  params.resume_margin = config.scheduler.preemption.resume_margin;
  params.room_margin = config.scheduler.preemption.room_margin;
  params.stop_unsuspendable = config.scheduler.preemption.stop_unsuspendable;
  params.fast = config.scheduler.preemption.fast;
  policy_.reconfigure(params);
  const bool wanted = std::any_of(config.tenants.begin(), config.tenants.end(),
                                  [](const TenantConfig& t) { return t.preemptible; });
  operations_.load_driver(wanted);
  const bool on = wanted && operations_.on();
  operations_.write_move_policies();
  segment_->allocation_wait_ns.store(on ? static_cast<uint64_t>(config.scheduler.preemption.allocation_wait.count()) : 0,
                                     std::memory_order_relaxed);
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) operations_.publish(t);
}

Nanos Preemptor::take(const Progress& progress) {
  requests_.credit(progress.freed);
  if (progress.decide) requests_.mark_due();
  return progress.wake;
}

Nanos Preemptor::step(Nanos now) {
  if (!operations_.on()) return kNever;
  const Nanos moves_wake = poll(now);
  if (requests_.due()) requests_.decide();
  claims_.note();
  bool any = !requests_.empty();
  for (uint32_t t = 0; t < shm::kMaxTenants && !any; ++t) any = policy_.state(t) != SuspendState::kRunning;
  if (!any) {
    // What the last update left (a suspended tenant whose processes all left is running
    // again) is what hooks waiting on the word must see.
    for (uint32_t t = 0; t < shm::kMaxTenants; ++t) operations_.republish(t);
    return kNever;
  }
  policy_.update(facts_.tenants(operations_.suspensions()));
  const Nanos wake = std::min(operations_.tend(now), requests_.earliest_deadline());
  const MemoryPreemption::Resumption r = policy_.step(facts_.gpus(policy_), requests_.pending(now), now);
  for (uint32_t t : r.resume) operations_.resume(t, now);
  requests_.drop_expired(now);
  // Orders given in this step are looked at once more, for when to look again.
  const Nanos later_moves_wake = poll(now);
  return std::min({wake, r.wake_at, moves_wake, later_moves_wake});
}

void Preemptor::publish_suspended_time(Nanos now) {
  // At every statistics tick, with or without scheduling steps: a claim shows in the log soon.
  if (operations_.on()) claims_.note();
  operations_.tick(now);
}

}  // namespace cuslice
