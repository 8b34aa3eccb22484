// TokenScheduler (token_scheduler.h): the step, the priority rule it applies before each
// policy's own, and the achieved shares.
#include "scheduler/scheduling/token_scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <string>

#include "protocol/futex.h"
#include "scheduler/scheduling/spatial_group.h"

namespace cuslice {

using Nanos = TokenPolicy::Nanos;

PolicyParams policy_params(const Config& config) {
  PolicyParams p;
  p.quantum = config.scheduler.quantum;
  p.limit_window = config.scheduler.limit_window;
  // Queued work is kept short by the hook; a holder that does not drain within a slice (or
  // 20 ms, if the slice is longer) is not waited for longer than that.
  p.drain_timeout = std::min<std::chrono::nanoseconds>(config.scheduler.quantum, std::chrono::milliseconds(20));
  return p;
}

TokenScheduler::TokenScheduler(SharedSegment& segment, TenantRegions& regions, const ProcessTable& processes,
                               const TenantTable& tenants)
    : segment_(segment), regions_(regions), processes_(processes), tenants_(tenants) {
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    policies_.emplace_back(policy_params(tenants_.config()), policy_tenants(tenants_.params(g)));
    members_[g] = group_members(tenants_.params(g));
  }
}

void TokenScheduler::reconfigure() {
  const PolicyParams params = policy_params(tenants_.config());
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    policies_[g].reconfigure(params, policy_tenants(tenants_.params(g)));
    members_[g] = group_members(tenants_.params(g));
  }
}

const char* TokenScheduler::name(uint32_t entry) const {
  if (entry == kGroupEntry) return "the spatial group";
  return entry < shm::kMaxTenants ? segment_->tenants[entry].name : "(none)";
}

void TokenScheduler::reset_tenant(uint32_t t, Nanos now) {
  if (t >= shm::kMaxTenants) return;
  for (ShareWindow& w : share_windows_[t]) {
    // The counter starts at zero now: time reported before the first periodic sample
    // counts toward the share too.
    w.reset();
    w.sample(now, 0);
  }
}

void TokenScheduler::read_demand(std::array<uint64_t, shm::kMaxGpus>& waiting) {
  for (auto& per_gpu : activity_) std::fill(per_gpu.begin(), per_gpu.end(), TenantActivity{});
  // From the records of registered processes in their tenants' regions. The slot and the
  // tenant are the daemon's own (ProcessTable), never read from a region.
  for (const ProcessRecord& p : processes_.all()) {
    const shm::TenantRegion* region = regions_.get(p.tenant);
    if (region == nullptr) continue;
    const shm::ProcessUse& use = region->processes[p.slot];
    shm::ProcessSlot& ps = segment_->processes[p.slot];
    const uint32_t t = p.tenant;
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      const uint32_t flags = use.gpu_flags[g].load(std::memory_order_seq_cst);
      const bool waits = (flags & shm::kWaitersMask) != 0;
      const bool busy = (flags & shm::kBusy) != 0;
      activity_[g][t].demand |= waits || busy;
      // Busy is set by a holder that launched and cleared when its work drained; a process
      // that also waits for the token still has that work running.
      activity_[g][t].queued |= busy;
      if (waits) waiting[g] |= uint64_t{1} << t;
      if (ps.gpu_flags[g].load(std::memory_order_relaxed) != flags) ps.gpu_flags[g].store(flags, std::memory_order_relaxed);
    }
  }
}

Nanos TokenScheduler::step(Nanos now, uint64_t suspended) {
  std::array<uint64_t, shm::kMaxGpus> waiting{};
  read_demand(waiting);
  // A suspended tenant's processes wait inside the driver: the token would be wasted on them.
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if ((suspended & (uint64_t{1} << t)) == 0) continue;
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) activity_[g][t] = {};
    for (uint64_t& w : waiting) w &= ~(uint64_t{1} << t);
  }
  Nanos wake = TokenPolicy::kNever;
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    shm::GpuState& gs = segment_->gpus[g];
    // Who waits, for the holders' hooks: computed afresh from the records at every step (a
    // waiter's kick always brings a step that sees its count).
    if (gs.waiting_tenants.load(std::memory_order_relaxed) != waiting[g])
      gs.waiting_tenants.store(waiting[g], std::memory_order_seq_cst);
    TokenPolicy& policy = policies_[g];
    fold_group_activity(activity_[g], members_[g]);
    // A waiting tenant that outranks the holder (or the tenant draining) takes the token now,
    // without waiting for the drain (token_policy.h, rule 6).
    const uint32_t taker = outranking_waiter(g, waiting[g]);
    if (taker != kNoHolder) {
      spdlog::debug("gpu {}: {} preempts {}", g, name(taker),
                    policy.holder() != kNoHolder ? name(policy.holder()) : "a draining tenant");
      policy.adopt(taker, now);
    }
    const TokenPolicy::Decision d = policy.step(now, activity_[g]);
    publish_holder(g, d.holder);
    wake = std::min(wake, d.wake_at);
    if (d.holder != held_[g].tenant) held_[g] = {d.holder, now, now};
    if (spdlog::should_log(spdlog::level::debug)) log_long_hold(g, d.holder, waiting[g], now);
  }
  return wake;
}

void TokenScheduler::publish_holder(uint32_t g, uint32_t holder) {
  shm::GpuState& gs = segment_->gpus[g];
  // The group's members all hold the token while the group does (shm::kSpatialGroup).
  const uint32_t published = holder == kGroupEntry ? shm::kSpatialGroup : holder;
  if (gs.holder.load(std::memory_order_relaxed) == published) return;
  gs.holder.store(published, std::memory_order_release);
  gs.grant_seq.fetch_add(1, std::memory_order_release);
  gs.handoffs.fetch_add(1, std::memory_order_relaxed);
  if (holder < shm::kMaxTenants) segment_->tenants[holder].gpu[g].token_grants.fetch_add(1, std::memory_order_relaxed);
  for (uint64_t m = holder == kGroupEntry ? members_[g] : 0; m != 0; m &= m - 1)
    segment_->tenants[__builtin_ctzll(m)].gpu[g].token_grants.fetch_add(1, std::memory_order_relaxed);
  futex_wake_all(&gs.grant_seq);
  spdlog::debug("gpu {}: token -> {}", g, name(holder));
}

void TokenScheduler::log_long_hold(uint32_t g, uint32_t holder, uint64_t waiting, Nanos now) {
  if (holder >= shm::kMaxTenants || (waiting & ~(uint64_t{1} << holder)) == 0 ||
      now - held_[g].since < std::chrono::milliseconds(200) || now - held_[g].logged < std::chrono::milliseconds(200))
    return;
  held_[g].logged = now;
  std::string procs;
  for (const ProcessRecord& p : processes_.all()) {
    if (p.tenant != holder) continue;
    const uint32_t f = segment_->processes[p.slot].gpu_flags[g].load(std::memory_order_relaxed);
    procs += fmt::format(" pid {} (busy {}, waiters {})", p.pid, (f & shm::kBusy) != 0, f & shm::kWaitersMask);
  }
  spdlog::debug("gpu {}: {} has held the token {} ms while others wait:{}", g, segment_->tenants[holder].name,
                std::chrono::duration_cast<std::chrono::milliseconds>(now - held_[g].since).count(), procs);
}

std::optional<int> TokenScheduler::entry_priority(uint32_t g, uint32_t entry) const {
  // A member's priority within its group counts as the group's: the group is one tenant here.
  if (entry == kGroupEntry) return members_[g] != 0 ? std::optional<int>(group_priority(g)) : std::nullopt;
  const std::vector<TenantParams>& params = tenants_.params(g);
  if (entry >= params.size() || !params[entry].present) return std::nullopt;
  return params[entry].priority;
}

uint32_t TokenScheduler::outranking_waiter(uint32_t g, uint64_t waiting) const {
  const TokenPolicy& policy = policies_[g];
  const std::vector<TenantParams>& params = tenants_.params(g);
  // Nobody has work on the GPU: the policy's own choice among the waiting tenants stands.
  const uint32_t owner = policy.holder() != kNoHolder ? policy.holder() : policy.draining();
  const std::optional<int> owner_priority = entry_priority(g, owner);
  if (!owner_priority) return kNoHolder;
  uint32_t best = kNoHolder;
  int floor = *owner_priority;
  const uint64_t others = owner == kGroupEntry ? waiting & ~members_[g] : waiting & ~(uint64_t{1} << owner);
  for (uint64_t rest = others & ~members_[g]; rest != 0; rest &= rest - 1) {
    const uint32_t t = static_cast<uint32_t>(__builtin_ctzll(rest));
    if (t >= params.size() || !params[t].present || policy.capped(t)) continue;
    if (params[t].priority > floor) {
      best = t;
      floor = params[t].priority;
    }
  }
  if ((others & members_[g]) != 0 && owner != kGroupEntry && !policy.capped(kGroupEntry) && group_priority(g) > floor)
    best = kGroupEntry;
  return best;
}

int TokenScheduler::group_priority(uint32_t g) const {
  int top = 0;
  for (uint64_t m = members_[g]; m != 0; m &= m - 1) top = std::max(top, tenants_.params(g)[__builtin_ctzll(m)].priority);
  return top;
}

void TokenScheduler::publish_shares(Nanos now) {
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (!tenants_.present(t)) continue;
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      shm::TenantGpu& tg = segment_->tenants[t].gpu[g];
      const uint32_t ppm = share_windows_[t][g].sample(now, tg.gpu_time_ns.load(std::memory_order_relaxed));
      tg.achieved_share_ppm.store(ppm, std::memory_order_relaxed);
    }
  }
}

}  // namespace cuslice
