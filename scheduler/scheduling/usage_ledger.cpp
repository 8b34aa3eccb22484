// UsageLedger (usage_ledger.h): the bounds on what a tenant's counters may add per
// nanosecond, and the copies into the segment.
#include "scheduler/scheduling/usage_ledger.h"

#include <algorithm>
#include <chrono>

#include "protocol/clock.h"

namespace cuslice {
namespace {

using Nanos = TokenPolicy::Nanos;

// How much a tenant can honestly add to a counter per nanosecond of wall time: GPU time
// (its processes' kernels overlap on several streams and GPUs count separately, but not
// more than one per registered process), time waited (summed over threads), refusals.
constexpr uint64_t kGpuTimePerNs = shm::kMaxProcesses;
constexpr uint64_t kWaitPerNs = uint64_t{shm::kMaxProcesses} * 64;
constexpr uint64_t kRefusalsPerNs = 1;

// The wall time a call may account for: since the last call, at most an hour so that the
// bounds stay far from overflowing the policy's 64-bit nanoseconds. A report larger than the
// bound (a long kernel reported when it completes, just after a call) is not lost: advance()
// takes the rest at the next calls.
uint64_t span_ns(Nanos now, Nanos& last) {
  const Nanos span = std::clamp(now - last, Nanos(0), Nanos(std::chrono::hours(1)));
  last = now;
  return static_cast<uint64_t>(span.count());
}

}  // namespace

UsageLedger::UsageLedger(SharedSegment& segment, TenantRegions& regions, const ProcessTable& processes,
                         const TenantTable& tenants, std::vector<TokenPolicy>& policies)
    : segment_(segment), regions_(regions), processes_(processes), tenants_(tenants), policies_(policies) {}

void UsageLedger::reset_tenant(uint32_t t) {
  if (t < shm::kMaxTenants) seen_[t] = {};
}

void UsageLedger::charge_gpu_time(Nanos now) {
  const uint64_t bound = span_ns(now, gpu_time_read_at_) * kGpuTimePerNs;
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    const shm::TenantRegion* region = regions_.get(t);
    if (region == nullptr || !tenants_.present(t)) continue;
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      uint64_t& seen = seen_[t][g].gpu_time_ns;
      const uint64_t delta = advance(seen, region->gpu[g].gpu_time_ns.load(std::memory_order_relaxed), bound);
      if (delta == 0) continue;
      // A spatial group is charged the time it holds the token (spatial_group.h).
      if (!tenants_.params(g)[t].spatial) policies_[g].charge(t, Nanos(static_cast<int64_t>(delta)), now);
      segment_->tenants[t].gpu[g].gpu_time_ns.store(seen, std::memory_order_relaxed);
    }
  }
}

void UsageLedger::publish_usage() {
  const Nanos now{now_ns()};
  charge_gpu_time(now);
  const uint64_t span = span_ns(now, usage_read_at_);
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    shm::TenantRegion* region = regions_.get(t);
    if (region == nullptr) continue;
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      const shm::TenantGpuUse& use = region->gpu[g];
      shm::TenantGpu& out = segment_->tenants[t].gpu[g];
      Seen& seen = seen_[t][g];
      // The tenant's own figure, whatever it says: it is what its quota is enforced on.
      out.memory_used.store(use.memory_used.load(std::memory_order_relaxed), std::memory_order_relaxed);
      advance(seen.wait_ns, use.wait_ns.load(std::memory_order_relaxed), span * kWaitPerNs);
      out.wait_ns.store(seen.wait_ns, std::memory_order_relaxed);
      advance(seen.oom_refusals, use.oom_refusals.load(std::memory_order_relaxed), span * kRefusalsPerNs);
      out.oom_refusals.store(seen.oom_refusals, std::memory_order_relaxed);
      // Where the daemon has no figure of its own (no NVML), the card as the first tenant to
      // report it says: shown only. The watchdog and preemption use the daemon's own
      // (UsageCheck::card_sizes), and every hook enforces its quota against its own driver's.
      shm::GpuState& gs = segment_->gpus[g];
      if (gs.memory_total.load(std::memory_order_relaxed) == 0)
        gs.memory_total.store(use.memory_total.load(std::memory_order_relaxed), std::memory_order_relaxed);
      // Both words, or a hook caught between its two stores would leave half a UUID for good.
      const uint64_t lo = use.uuid[0].load(std::memory_order_relaxed), hi = use.uuid[1].load(std::memory_order_relaxed);
      if (lo != 0 && hi != 0 && gs.uuid[0].load(std::memory_order_relaxed) == 0 &&
          gs.uuid[1].load(std::memory_order_relaxed) == 0) {
        gs.uuid[0].store(lo, std::memory_order_relaxed);
        gs.uuid[1].store(hi, std::memory_order_relaxed);
      }
    }
  }
  for (const ProcessRecord& p : processes_.all()) {
    const shm::TenantRegion* region = regions_.get(p.tenant);
    if (region == nullptr) continue;
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g)
      segment_->processes[p.slot].gpu_flags[g].store(region->processes[p.slot].gpu_flags[g].load(std::memory_order_relaxed),
                                                     std::memory_order_relaxed);
  }
}

}  // namespace cuslice
