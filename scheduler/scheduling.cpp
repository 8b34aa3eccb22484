// The daemon's scheduling step: reads the demand the hooks publish in their tenant regions,
// runs each GPU's TokenPolicy, and publishes its decisions (the token's holder, who waits)
// and the achieved shares in the segment. A waiting tenant that outranks whoever has work on
// a GPU gets the token in the same step (shm_protocol.h, "Priority preemption"). Calls the
// policies, the segment, the tenant regions and the policy timer; never the sockets.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <string>
#include <vector>

#include "clock.h"
#include "daemon.h"
#include "futex.h"
#include "os_fds.h"

namespace cuslice {

using Nanos = TokenPolicy::Nanos;

void Daemon::schedule() {
  const Nanos now{now_ns()};
  charge_gpu_time(now);
  // Demand, from the records of registered processes in their tenants' regions. The slot and
  // the tenant are the daemon's own (Client), never read from a region.
  std::vector<std::vector<TenantActivity>>& activity = activity_;
  for (auto& per_gpu : activity) std::fill(per_gpu.begin(), per_gpu.end(), TenantActivity{});
  std::array<uint64_t, shm::kMaxGpus> waiting{};
  for (const auto& [fd, client] : clients_) {
    if (client.slot < 0 || client.tenant >= shm::kMaxTenants) continue;
    const shm::TenantRegion* region = regions_.get(client.tenant);
    if (region == nullptr) continue;
    const shm::ProcessUse& use = region->processes[client.slot];
    shm::ProcessSlot& ps = segment_->processes[client.slot];
    const uint32_t t = client.tenant;
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      const uint32_t flags = use.gpu_flags[g].load(std::memory_order_seq_cst);
      const bool waits = (flags & shm::kWaitersMask) != 0;
      const bool busy = (flags & shm::kBusy) != 0;
      activity[g][t].demand |= waits || busy;
      // Busy is set by a holder that launched and cleared when its work drained; a process
      // that also waits for the token still has that work running.
      activity[g][t].queued |= busy;
      if (waits) waiting[g] |= uint64_t{1} << t;
      if (ps.gpu_flags[g].load(std::memory_order_relaxed) != flags) ps.gpu_flags[g].store(flags, std::memory_order_relaxed);
    }
  }
  // A suspended tenant's processes wait inside the driver: the token would be wasted on them.
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (!suspended(t)) continue;
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) activity[g][t] = {};
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
    // A waiting tenant that outranks the holder (or the tenant draining) takes the token now,
    // without waiting for the drain (token_policy.h, rule 6).
    const uint32_t taker = preempting_waiter(g, waiting[g]);
    if (taker != kNoHolder) {
      spdlog::debug("gpu {}: {} preempts {}", g, segment_->tenants[taker].name,
                    policy.holder() != kNoHolder ? segment_->tenants[policy.holder()].name : "a draining tenant");
      policy.adopt(taker, now);
    }
    const TokenPolicy::Decision d = policy.step(now, activity[g]);
    if (gs.holder.load(std::memory_order_relaxed) != d.holder) {
      gs.holder.store(d.holder, std::memory_order_release);
      gs.grant_seq.fetch_add(1, std::memory_order_release);
      gs.handoffs.fetch_add(1, std::memory_order_relaxed);
      if (d.holder != kNoHolder)
        segment_->tenants[d.holder].gpu[g].token_grants.fetch_add(1, std::memory_order_relaxed);
      futex_wake_all(&gs.grant_seq);
      spdlog::debug("gpu {}: token -> {}", g, d.holder == kNoHolder ? "(none)" : segment_->tenants[d.holder].name);
    }
    wake = std::min(wake, d.wake_at);
    if (d.holder != held_[g].tenant) held_[g] = {d.holder, now, now};
    // Debug: a holder that others have waited behind for long, and what its processes show.
    if (spdlog::should_log(spdlog::level::debug) && d.holder != kNoHolder && (waiting[g] & ~(uint64_t{1} << d.holder)) &&
        now - held_[g].since >= std::chrono::milliseconds(200) && now - held_[g].logged >= std::chrono::milliseconds(200)) {
      held_[g].logged = now;
      std::string procs;
      for (const auto& [fd, client] : clients_) {
        if (client.slot < 0 || client.tenant != d.holder) continue;
        const uint32_t f = segment_->processes[client.slot].gpu_flags[g].load(std::memory_order_relaxed);
        procs += fmt::format(" pid {} (busy {}, waiters {})", client.pid, (f & shm::kBusy) != 0, f & shm::kWaitersMask);
      }
      spdlog::debug("gpu {}: {} has held the token {} ms while others wait:{}", g, segment_->tenants[d.holder].name,
                    std::chrono::duration_cast<std::chrono::milliseconds>(now - held_[g].since).count(), procs);
    }
  }
  arm_timer(std::min(wake, preemption_step(now)));
}

uint32_t Daemon::preempting_waiter(uint32_t g, uint64_t waiting) const {
  const TokenPolicy& policy = policies_[g];
  // Nobody has work on the GPU: the policy's own choice among the waiting tenants stands.
  const uint32_t owner = policy.holder() != kNoHolder ? policy.holder() : policy.draining();
  if (owner >= tenant_params_.size() || !tenant_params_[owner].present) return kNoHolder;
  uint32_t best = kNoHolder;
  int floor = tenant_params_[owner].priority;
  for (uint64_t rest = waiting & ~(uint64_t{1} << owner); rest != 0; rest &= rest - 1) {
    const uint32_t t = static_cast<uint32_t>(__builtin_ctzll(rest));
    if (t >= tenant_params_.size() || !tenant_params_[t].present || policy.capped(t)) continue;
    if (tenant_params_[t].priority > floor) {
      best = t;
      floor = tenant_params_[t].priority;
    }
  }
  return best;
}

void Daemon::publish_shares() {
  const Nanos now{now_ns()};
  publish_suspended_time(now);
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (!tenant_params_[t].present) continue;
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      shm::TenantGpu& tg = segment_->tenants[t].gpu[g];
      const uint32_t ppm = share_windows_[t][g].sample(now, tg.gpu_time_ns.load(std::memory_order_relaxed));
      tg.achieved_share_ppm.store(ppm, std::memory_order_relaxed);
    }
  }
}

void Daemon::arm_timer(Nanos wake_at) {
  // An absolute time already past still fires; 0 would disarm.
  set_timer_at(timer_fd_, wake_at == TokenPolicy::kNever ? Nanos(0) : std::max(wake_at, Nanos(1)));
}

}  // namespace cuslice
