// The daemon's scheduling step: reads the demand the hooks publish in the segment, runs
// each GPU's TokenPolicy, and publishes its decisions (the token's holder, who may take it
// without asking, which tenants are capped) and the achieved shares. Calls the policies, the
// segment and the policy timer; never the sockets.
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
  // GPU time reported since the last step.
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (!tenant_params_[t].present) continue;
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      const uint64_t total = segment_->tenants[t].gpu[g].gpu_time_ns.load(std::memory_order_relaxed);
      const uint64_t delta = total - gpu_time_seen_[t][g];
      gpu_time_seen_[t][g] = total;
      if (delta > 0) policies_[g].charge(t, Nanos(delta), now);
    }
  }
  // Demand, from the slots of registered processes.
  std::vector<std::vector<TenantActivity>> activity(shm::kMaxGpus,
                                                    std::vector<TenantActivity>(shm::kMaxTenants));
  std::array<uint64_t, shm::kMaxGpus> waiting{};
  for (const auto& [fd, client] : clients_) {
    if (client.slot < 0) continue;
    const shm::ProcessSlot& ps = segment_->processes[client.slot];
    const uint32_t t = ps.tenant.load(std::memory_order_relaxed);
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      const uint32_t flags = ps.gpu_flags[g].load(std::memory_order_acquire);
      const bool waits = (flags & shm::ProcessSlot::kWaitersMask) != 0;
      const bool busy = (flags & shm::ProcessSlot::kBusy) != 0;
      activity[g][t].demand |= waits || busy;
      // Busy is set by a holder that launched and cleared when its work drained; a process
      // that also waits for the token still has that work running.
      activity[g][t].queued |= busy;
      if (waits) waiting[g] |= uint64_t{1} << t;
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
    // Drop the bits of tenants that no longer wait. A waiter raises its slot's count before
    // its bit, so a bit dropped here whose tenant has a waiter now (one that came after the
    // scan above) is raised again: a lost bit would keep a holder's release from kicking
    // the daemon, and the waiter would wait for a timer.
    const uint64_t dropped = gs.waiting_tenants.fetch_and(waiting[g], std::memory_order_seq_cst) & ~waiting[g];
    if (dropped != 0) restore_waiting(g, dropped);
    TokenPolicy& policy = policies_[g];
    // A hook that outranked the holder may have taken the token itself (token_policy.h,
    // rule 6). The daemon's store is a compare-exchange from what it saw, so such a take is
    // never overwritten: it is adopted, and the step runs again.
    uint32_t seen = gs.holder.load(std::memory_order_acquire);
    TokenPolicy::Decision d;
    for (;;) {
      if (seen != policy.holder() && seen < shm::kMaxTenants && tenant_params_[seen].present) {
        policy.adopt(seen, now);
        gs.handoffs.fetch_add(1, std::memory_order_relaxed);
        segment_->tenants[seen].gpu[g].token_grants.fetch_add(1, std::memory_order_relaxed);
        spdlog::debug("gpu {}: {} took the token", g, segment_->tenants[seen].name);
      }
      d = policy.step(now, activity[g]);
      publish_preemption(g, d.holder);
      if (seen == d.holder) break;
      if (gs.holder.compare_exchange_strong(seen, d.holder, std::memory_order_acq_rel)) {
        gs.grant_seq.fetch_add(1, std::memory_order_release);
        gs.handoffs.fetch_add(1, std::memory_order_relaxed);
        if (d.holder != kNoHolder)
          segment_->tenants[d.holder].gpu[g].token_grants.fetch_add(1, std::memory_order_relaxed);
        futex_wake_all(&gs.grant_seq);
        spdlog::debug("gpu {}: token -> {}", g,
                      d.holder == kNoHolder ? "(none)" : segment_->tenants[d.holder].name);
        break;
      }
    }
    wake = std::min(wake, d.wake_at);
    if (d.holder != held_[g].tenant) held_[g] = {d.holder, now, now};
    // Debug: a holder that others have waited behind for long, and what its processes show.
    if (spdlog::should_log(spdlog::level::debug) && d.holder != kNoHolder && (waiting[g] & ~(uint64_t{1} << d.holder)) &&
        now - held_[g].since >= std::chrono::milliseconds(200) && now - held_[g].logged >= std::chrono::milliseconds(200)) {
      held_[g].logged = now;
      std::string procs;
      for (const auto& [fd, client] : clients_) {
        if (client.slot < 0) continue;
        const shm::ProcessSlot& ps = segment_->processes[client.slot];
        if (ps.tenant.load(std::memory_order_relaxed) != d.holder) continue;
        const uint32_t f = ps.gpu_flags[g].load(std::memory_order_relaxed);
        procs += fmt::format(" pid {} (busy {}, waiters {})", client.pid, (f & shm::ProcessSlot::kBusy) != 0,
                             f & shm::ProcessSlot::kWaitersMask);
      }
      spdlog::debug("gpu {}: {} has held the token {} ms while others wait:{}", g, segment_->tenants[d.holder].name,
                    std::chrono::duration_cast<std::chrono::milliseconds>(now - held_[g].since).count(), procs);
    }
  }
  arm_timer(std::min(wake, preemption_step(now)));
}

void Daemon::restore_waiting(uint32_t g, uint64_t dropped) {
  shm::GpuState& gs = segment_->gpus[g];
  for (const auto& [fd, client] : clients_) {
    if (client.slot < 0) continue;
    const shm::ProcessSlot& ps = segment_->processes[client.slot];
    const uint32_t t = ps.tenant.load(std::memory_order_relaxed);
    if (t >= shm::kMaxTenants || !(dropped & (uint64_t{1} << t))) continue;
    if (ps.gpu_flags[g].load(std::memory_order_seq_cst) & shm::ProcessSlot::kWaitersMask)
      gs.waiting_tenants.fetch_or(uint64_t{1} << t, std::memory_order_seq_cst);
  }
}

void Daemon::publish_preemption(uint32_t g, uint32_t holder) {
  shm::GpuState& gs = segment_->gpus[g];
  const TokenPolicy& policy = policies_[g];
  // Who may take the token without asking: a tenant that outranks whoever has work on the
  // GPU (the holder, or the tenant draining); nobody while the GPU is free, where the
  // policy's own choice among the waiting tenants must stand.
  const uint32_t owner = holder != kNoHolder ? holder : policy.draining();
  const uint32_t floor = owner != kNoHolder && owner < tenant_params_.size()
                             ? static_cast<uint32_t>(tenant_params_[owner].priority) + 1
                             : shm::kNoPreempt;
  if (gs.preempt_priority.load(std::memory_order_relaxed) != floor)
    gs.preempt_priority.store(floor, std::memory_order_release);
  for (uint32_t t = 0; t < shm::kMaxTenants; ++t) {
    if (!tenant_params_[t].present) continue;
    std::atomic<uint32_t>& flags = segment_->tenants[t].gpu[g].flags;
    const uint32_t want = policy.capped(t) ? shm::TenantGpu::kCapped : 0;
    if (flags.load(std::memory_order_relaxed) != want) flags.store(want, std::memory_order_relaxed);
  }
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
