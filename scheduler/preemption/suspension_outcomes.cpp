// Preemptor (preemptor.h): what the suspender's jobs came to (suspensions, resumptions, and
// the processes that joined a suspended tenant), taken into the suspensions, the policy, the
// segment's counters and the journal.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "protocol/clock.h"
#include "scheduler/preemption/preemptor.h"

namespace cuslice {

using Nanos = Preemptor::Nanos;

namespace {

double secs(Nanos n) { return static_cast<double>(n.count()) / 1e9; }

bool listed(const std::vector<int32_t>& pids, int32_t pid) { return std::find(pids.begin(), pids.end(), pid) != pids.end(); }

bool stopped(const SuspendOutcome& o, int32_t pid) {
  return std::any_of(o.stopped.begin(), o.stopped.end(), [&](const SuspendOutcome::Stopped& x) { return x.pid == pid; });
}

}  // namespace

void Preemptor::on_suspender_outcomes() {
  if (!suspender_) return;
  const Nanos now = Nanos{now_ns()};
  for (const SuspendOutcome& o : suspender_->take()) {
    const uint32_t t = o.tenant;
    const std::string name = segment_->tenants[t].name;
    suspensions_[t].busy = false;
    for (int32_t pid : o.gone) spdlog::info("tenant {}: pid {} exited while being suspended or resumed", name, pid);
    for (const SuspendOutcome::Stopped& x : o.stopped) {
      spdlog::warn("tenant {}: pid {} stopped (SIGKILL) instead of suspended: {} (preemption.unsuspendable: stop)",
                   name, x.pid, x.why.empty() ? "it says it uses what the driver's checkpoint cannot move" : x.why);
    }
    if (o.join) {
      on_joiners_outcome(o, now);
    } else if (o.job == SuspendJob::Kind::kSuspend) {
      on_suspend_outcome(o, now);
    } else {
      on_resume_outcome(o, now);
    }
    publish_state(t);
  }
  write_journal();
  decide_due_ = true;  // at the step that follows
}

void Preemptor::on_suspend_outcome(const SuspendOutcome& o, Nanos now) {
  const uint32_t t = o.tenant;
  Suspension& s = suspensions_[t];
  shm::Tenant& tenant = segment_->tenants[t];
  const std::string name = tenant.name;
  if (o.kind == SuspendOutcome::Kind::kRefused) {
    preemption_.suspend_refused(t, o.reason);
    if (s.hooks_hold) {
      // The rest of a tenant suspended the fast way: what its hooks moved stays moved.
      s.fast = true;
      spdlog::warn("tenant {}: the rest of its memory stays on the card: {}", name, o.reason);
      return;
    }
    s = Suspension{};
    spdlog::warn("tenant {} not suspended, it runs on: {}", name, o.reason);
    return;
  }
  if (o.kind != SuspendOutcome::Kind::kDone) {
    preemption_.failed(t, o.reason);
    spdlog::error("tenant {}: suspension failed: {} (processes stuck: {})", name, o.reason, fmt::join(o.stuck, ", "));
    return;
  }
  // What the processes hold now: one may have allocated more before the lock took it.
  if (s.hooks_hold) {
    s.bytes.assign(shm::kMaxGpus, 0);
    for (const Suspension::Process& p : s.processes)
      for (uint32_t g = 0; g < shm::kMaxGpus && g < p.bytes.size(); ++g) s.bytes[g] += p.bytes[g];
  }
  for (const ProcessRecord& rec : processes_.all()) {
    if (rec.tenant != t || regions_.get(t) == nullptr) continue;
    const std::vector<uint64_t> held = charged(t, rec.slot);
    for (Suspension::Process& p : s.processes) {
      if (p.pid != rec.pid) continue;
      for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
        s.bytes[g] += held[g] - p.bytes[g];
        p.bytes[g] = held[g];
      }
    }
  }
  // Those the driver knew nothing of hold nothing on a GPU: not suspended (they are checked
  // again as processes that joined the suspended tenant). What the others held is free now,
  // for the allocations waiting on it, the stopped processes' memory too; what stays
  // suspended is the rest.
  s.drop([&](const Suspension::Process& p) { return listed(o.unknown, p.pid); });
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    // After a fast suspension, what its hooks moved was counted as freed then.
    const uint64_t before = s.hooks_hold && g == s.fast_gpu ? std::min(s.moved_out, s.bytes[g]) : 0;
    for (MemoryWait& w : memory_waits_)
      if (w.gpu == g) w.freed += s.bytes[g] - before;
  }
  s.drop([&](const Suspension::Process& p) { return p.stop || stopped(o, p.pid); });
  // Until their connections close, the stopped look like processes that joined.
  for (const SuspendOutcome::Stopped& x : o.stopped) s.join_skipped.insert(x.pid);
  preemption_.suspended(t, now);
  last_[t].path = "checkpoint";
  last_[t].moved_out = s.total();
  if (s.suspended_since == Nanos{0}) {  // not when the rest of a fast suspension follows it
    s.suspended_since = now;
    s.suspended_ns_before = tenant.suspended_ns.load(std::memory_order_relaxed);
    tenant.suspensions.fetch_add(1, std::memory_order_relaxed);
  }
  tenant.suspend_ns.fetch_add(static_cast<uint64_t>(o.took.count()), std::memory_order_relaxed);
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g)
    tenant.gpu[g].moved_mib.fetch_add(static_cast<uint32_t>(s.bytes[g] >> 20), std::memory_order_relaxed);
  spdlog::info("tenant {} suspended: {} moved to host memory in {:.2f} s", name, describe_bytes(s.total()),
               secs(o.took));
}

void Preemptor::on_resume_outcome(const SuspendOutcome& o, Nanos now) {
  const uint32_t t = o.tenant;
  Suspension& s = suspensions_[t];
  shm::Tenant& tenant = segment_->tenants[t];
  const std::string name = tenant.name;
  if (o.kind == SuspendOutcome::Kind::kDone && s.hooks_hold && !s.hooks_released) {
    // Restored by the driver: the hooks still hold the work and what they moved.
    s.fast = true;
    start_fast_resume(t, now);
    return;
  }
  if (o.kind == SuspendOutcome::Kind::kDone) {
    preemption_.resumed(t, now);
    tenant.suspended_ns.store(s.suspended_ns_before + static_cast<uint64_t>((now - s.suspended_since).count()),
                              std::memory_order_relaxed);
    tenant.resume_ns.fetch_add(static_cast<uint64_t>(o.took.count()), std::memory_order_relaxed);
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g)
      tenant.gpu[g].moved_mib.fetch_add(static_cast<uint32_t>(s.bytes[g] >> 20), std::memory_order_relaxed);
    spdlog::info("tenant {} resumed after {:.1f} s: {} moved back in {:.2f} s", name, secs(now - s.suspended_since),
                 describe_bytes(s.total()), secs(o.took));
    s = Suspension{};
  } else if (o.kind == SuspendOutcome::Kind::kDeferred) {
    preemption_.resume_deferred(t, o.reason);
    spdlog::warn("tenant {} stays suspended for now: {}", name, o.reason);
  } else {
    preemption_.failed(t, o.reason);
    spdlog::error("tenant {}: resumption failed: {} (processes stuck: {})", name, o.reason, fmt::join(o.stuck, ", "));
  }
}

Nanos Preemptor::suspend_joiners(uint32_t t, Nanos now) {
  Suspension& s = suspensions_[t];
  // Suspended the fast way: a process that joins holds no memory that moved, and its
  // allocations wait in its hook until the tenant runs again.
  if (s.busy || s.fast) return kNever;
  const shm::TenantRegion* region = regions_.get(t);
  const bool stop = tenants_.config().scheduler.preemption.stop_unsuspendable;
  SuspendJob job;
  for (const ProcessRecord& rec : processes_.all()) {
    if (rec.tenant != t || region == nullptr) continue;
    const bool already = std::any_of(s.processes.begin(), s.processes.end(),
                                     [&](const Suspension::Process& p) { return p.pid == rec.pid; });
    if (already || s.join_skipped.count(rec.pid)) continue;
    const bool claims = rec.checkpoint_claims != 0;  // said on its own connection
    if (claims && !stop) continue;  // `keep`: left to run, reported
    (claims ? job.stop : job.processes).push_back({rec.pid, rec.start_time});
  }
  if (job.processes.empty() && job.stop.empty()) return kNever;
  // Those the driver knew nothing of at the last look wait in their hooks: looked at again a
  // little later, not at every step.
  if (now < s.next_join_check) return s.next_join_check;
  job.kind = SuspendJob::Kind::kSuspend;
  job.tenant = t;
  job.join = true;
  job.stop_refused = stop;
  s.joining = job.processes;
  s.busy = true;
  preemption_.hold(t, true);  // a resumption now would leave them out
  suspender_->submit(std::move(job));
  return kNever;
}

void Preemptor::on_joiners_outcome(const SuspendOutcome& o, Nanos now) {
  const uint32_t t = o.tenant;
  Suspension& s = suspensions_[t];
  shm::Tenant& tenant = segment_->tenants[t];
  const std::string name = tenant.name;
  preemption_.hold(t, false);
  const std::vector<SuspendProcess> joining = std::move(s.joining);
  s.joining.clear();
  if (!o.unknown.empty()) s.next_join_check = now + kJoinCheckPeriod;
  for (int32_t pid : o.unknown) {
    if (s.join_noted.insert(pid).second)
      spdlog::info("tenant {}: pid {} joined it while it is suspended; it waits for the tenant's resumption", name, pid);
  }
  if (o.kind == SuspendOutcome::Kind::kRefused) {
    for (const SuspendProcess& p : joining) {
      if (listed(o.gone, p.pid) || listed(o.unknown, p.pid) || stopped(o, p.pid)) continue;
      s.join_skipped.insert(p.pid);
    }
    spdlog::warn("tenant {}: processes that joined it while it is suspended run on, unsuspended: {}", name, o.reason);
    return;
  }
  // Done, or failed: those suspended (or stuck, which the resumption reports) are the tenant's
  // suspended processes from now on.
  for (const SuspendOutcome::Stopped& x : o.stopped) s.join_skipped.insert(x.pid);
  for (const SuspendProcess& p : joining) {
    if (listed(o.gone, p.pid) || listed(o.unknown, p.pid) || stopped(o, p.pid)) continue;
    if (o.kind == SuspendOutcome::Kind::kFailed && !listed(o.stuck, p.pid)) {
      s.join_skipped.insert(p.pid);  // rolled back: it runs
      continue;
    }
    Suspension::Process sp;
    sp.pid = p.pid;
    sp.start_time = p.start_time;
    sp.bytes.assign(shm::kMaxGpus, 0);
    for (const ProcessRecord& rec : processes_.all())
      if (rec.pid == p.pid && rec.tenant == t && regions_.get(t) != nullptr) sp.bytes = charged(t, rec.slot);
    uint64_t moved = 0;
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
      s.bytes[g] += sp.bytes[g];
      moved += sp.bytes[g];
      tenant.gpu[g].moved_mib.fetch_add(static_cast<uint32_t>(sp.bytes[g] >> 20), std::memory_order_relaxed);
    }
    spdlog::info("tenant {}: pid {} joined it while it is suspended, and is suspended too ({} by its hook's count, "
                 "in {:.2f} s)",
                 name, p.pid, describe_bytes(moved), secs(o.took));
    s.processes.push_back(std::move(sp));
  }
  if (o.kind == SuspendOutcome::Kind::kFailed) {
    spdlog::error("tenant {}: suspending processes that joined it failed: {} (processes stuck: {})", name, o.reason,
                  fmt::join(o.stuck, ", "));
  }
}

}  // namespace cuslice
