// SuspensionOutcomes (suspension_outcomes.h): what the suspender's jobs and the hooks' moves
// came to, in the suspensions, the policy and the counters.
#include "scheduler/preemption/suspension_outcomes.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>

namespace cuslice {

using Nanos = SuspensionOutcomes::Nanos;

namespace {

double secs(Nanos n) { return static_cast<double>(n.count()) / 1e9; }

bool listed(const std::vector<int32_t>& pids, int32_t pid) { return std::find(pids.begin(), pids.end(), pid) != pids.end(); }

bool stopped(const SuspendOutcome& o, int32_t pid) {
  return std::any_of(o.stopped.begin(), o.stopped.end(), [&](const SuspendOutcome::Stopped& x) { return x.pid == pid; });
}

// Those a job found exited, unknown to the driver or stopped: not suspended by it.
bool left_out(const SuspendOutcome& o, int32_t pid) {
  return listed(o.gone, pid) || listed(o.unknown, pid) || stopped(o, pid);
}

}  // namespace

SuspensionOutcomes::SuspensionOutcomes(SharedSegment& segment, const MemoryFacts& facts, MemoryPreemption& policy)
    : segment_(segment), facts_(facts), policy_(policy) {}

void SuspensionOutcomes::note(const SuspendOutcome& o) const {
  const std::string name = segment_->tenants[o.tenant].name;
  for (int32_t pid : o.gone) spdlog::info("tenant {}: pid {} exited while being suspended or resumed", name, pid);
  for (const SuspendOutcome::Stopped& x : o.stopped) {
    spdlog::warn("tenant {}: pid {} stopped (SIGKILL) instead of suspended: {} (preemption.unsuspendable: stop)", name,
                 x.pid, x.why.empty() ? "it says it uses what the driver's checkpoint cannot move" : x.why);
  }
}

void SuspensionOutcomes::count_suspended(uint32_t t, Suspension& s, Nanos took, Nanos now) {
  policy_.suspended(t, now);
  shm::Tenant& tenant = segment_->tenants[t];
  if (s.suspended_since == Nanos{0}) {  // not when the rest of a fast suspension follows it
    s.suspended_since = now;
    s.suspended_ns_before = tenant.suspended_ns.load(std::memory_order_relaxed);
    tenant.suspensions.fetch_add(1, std::memory_order_relaxed);
  }
  tenant.suspend_ns.fetch_add(static_cast<uint64_t>(took.count()), std::memory_order_relaxed);
}

bool SuspensionOutcomes::not_checkpointed(const SuspendOutcome& o, Suspension& s) {
  const uint32_t t = o.tenant;
  const std::string name = segment_->tenants[t].name;
  if (o.kind == SuspendOutcome::Kind::kRefused) {
    policy_.suspend_refused(t, o.reason);
    if (s.hooks_hold) {
      // The rest of a tenant suspended the fast way: what its hooks moved stays moved.
      s.fast = true;
      spdlog::warn("tenant {}: the rest of its memory stays on the card: {}", name, o.reason);
      return true;
    }
    s = Suspension{};
    spdlog::warn("tenant {} not suspended, it runs on: {}", name, o.reason);
    return true;
  }
  if (o.kind == SuspendOutcome::Kind::kDone) return false;
  policy_.failed(t, o.reason);
  spdlog::error("tenant {}: suspension failed: {} (processes stuck: {})", name, o.reason, fmt::join(o.stuck, ", "));
  return true;
}

void SuspensionOutcomes::recount(uint32_t t, Suspension& s) const {
  if (s.hooks_hold) {
    s.bytes.assign(shm::kMaxGpus, 0);
    for (const Suspension::Process& p : s.processes)
      for (uint32_t g = 0; g < shm::kMaxGpus && g < p.bytes.size(); ++g) s.bytes[g] += p.bytes[g];
  }
  for (const Suspension::Process& now : facts_.processes_of(t)) {
    for (Suspension::Process& p : s.processes) {
      if (p.pid != now.pid) continue;
      for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
        s.bytes[g] += now.bytes[g] - p.bytes[g];
        p.bytes[g] = now.bytes[g];
      }
    }
  }
}

std::vector<uint64_t> SuspensionOutcomes::freed(const Suspension& s) const {
  std::vector<uint64_t> freed(shm::kMaxGpus, 0);
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    // After a fast suspension, what its hooks moved was counted as freed then.
    const uint64_t before = s.hooks_hold && g == s.fast_gpu ? std::min(s.moved_out, s.bytes[g]) : 0;
    freed[g] = s.bytes[g] - before;
  }
  return freed;
}

std::vector<uint64_t> SuspensionOutcomes::checkpointed(const SuspendOutcome& o, Suspension& s, Nanos now) {
  const uint32_t t = o.tenant;
  if (not_checkpointed(o, s)) return std::vector<uint64_t>(shm::kMaxGpus, 0);
  // What the processes hold now: one may have allocated more before the lock took it.
  recount(t, s);
  // Those the driver knew nothing of hold nothing on a GPU: not suspended (they are checked
  // again as processes that joined the suspended tenant). What the others held is free now,
  // for the allocations waiting on it, the stopped processes' memory too; what stays
  // suspended is the rest.
  s.drop([&](const Suspension::Process& p) { return listed(o.unknown, p.pid); });
  const std::vector<uint64_t> room = freed(s);
  s.drop([&](const Suspension::Process& p) { return p.stop || stopped(o, p.pid); });
  // Until their connections close, the stopped look like processes that joined.
  for (const SuspendOutcome::Stopped& x : o.stopped) s.join_skipped.insert(x.pid);
  last_[t].path = "checkpoint";
  last_[t].moved_out = s.total();
  count_suspended(t, s, o.took, now);
  shm::Tenant& tenant = segment_->tenants[t];
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g)
    tenant.gpu[g].moved_mib.fetch_add(static_cast<uint32_t>(s.bytes[g] >> 20), std::memory_order_relaxed);
  spdlog::info("tenant {} suspended: {} moved to host memory in {:.2f} s", tenant.name, describe_bytes(s.total()),
               secs(o.took));
  return room;
}

bool SuspensionOutcomes::resumed(const SuspendOutcome& o, Suspension& s, Nanos now) {
  const uint32_t t = o.tenant;
  shm::Tenant& tenant = segment_->tenants[t];
  const std::string name = tenant.name;
  if (o.kind == SuspendOutcome::Kind::kDone && s.hooks_hold && !s.hooks_released) {
    // Restored by the driver: the hooks still hold the work and what they moved.
    s.fast = true;
    return true;
  }
  if (o.kind == SuspendOutcome::Kind::kDone) {
    policy_.resumed(t, now);
    tenant.suspended_ns.store(s.suspended_ns_before + static_cast<uint64_t>((now - s.suspended_since).count()),
                              std::memory_order_relaxed);
    tenant.resume_ns.fetch_add(static_cast<uint64_t>(o.took.count()), std::memory_order_relaxed);
    for (uint32_t g = 0; g < shm::kMaxGpus; ++g)
      tenant.gpu[g].moved_mib.fetch_add(static_cast<uint32_t>(s.bytes[g] >> 20), std::memory_order_relaxed);
    spdlog::info("tenant {} resumed after {:.1f} s: {} moved back in {:.2f} s", name, secs(now - s.suspended_since),
                 describe_bytes(s.total()), secs(o.took));
    s = Suspension{};
  } else if (o.kind == SuspendOutcome::Kind::kDeferred) {
    policy_.resume_deferred(t, o.reason);
    spdlog::warn("tenant {} stays suspended for now: {}", name, o.reason);
  } else {
    policy_.failed(t, o.reason);
    spdlog::error("tenant {}: resumption failed: {} (processes stuck: {})", name, o.reason, fmt::join(o.stuck, ", "));
  }
  return false;
}

void SuspensionOutcomes::add_joiner(uint32_t t, Suspension& s, const SuspendProcess& p, Nanos took) {
  shm::Tenant& tenant = segment_->tenants[t];
  Suspension::Process sp;
  sp.pid = p.pid;
  sp.start_time = p.start_time;
  sp.bytes.assign(shm::kMaxGpus, 0);
  for (const Suspension::Process& now : facts_.processes_of(t))
    if (now.pid == p.pid) sp.bytes = now.bytes;
  uint64_t moved = 0;
  for (uint32_t g = 0; g < shm::kMaxGpus; ++g) {
    s.bytes[g] += sp.bytes[g];
    moved += sp.bytes[g];
    tenant.gpu[g].moved_mib.fetch_add(static_cast<uint32_t>(sp.bytes[g] >> 20), std::memory_order_relaxed);
  }
  spdlog::info("tenant {}: pid {} joined it while it is suspended, and is suspended too ({} by its hook's count, "
               "in {:.2f} s)",
               tenant.name, p.pid, describe_bytes(moved), secs(took));
  s.processes.push_back(std::move(sp));
}

void SuspensionOutcomes::joined(const SuspendOutcome& o, Suspension& s, Nanos now) {
  const uint32_t t = o.tenant;
  const std::string name = segment_->tenants[t].name;
  policy_.hold(t, false);
  const std::vector<SuspendProcess> joining = std::move(s.joining);
  s.joining.clear();
  if (!o.unknown.empty()) s.next_join_check = now + Suspension::kJoinCheckPeriod;
  for (int32_t pid : o.unknown) {
    if (s.join_noted.insert(pid).second)
      spdlog::info("tenant {}: pid {} joined it while it is suspended; it waits for the tenant's resumption", name, pid);
  }
  if (o.kind == SuspendOutcome::Kind::kRefused) {
    for (const SuspendProcess& p : joining)
      if (!left_out(o, p.pid)) s.join_skipped.insert(p.pid);
    spdlog::warn("tenant {}: processes that joined it while it is suspended run on, unsuspended: {}", name, o.reason);
    return;
  }
  // Done, or failed: those suspended (or stuck, which the resumption reports) are the tenant's
  // suspended processes from now on.
  for (const SuspendOutcome::Stopped& x : o.stopped) s.join_skipped.insert(x.pid);
  for (const SuspendProcess& p : joining) {
    if (left_out(o, p.pid)) continue;
    if (o.kind == SuspendOutcome::Kind::kFailed && !listed(o.stuck, p.pid)) {
      s.join_skipped.insert(p.pid);  // rolled back: it runs
      continue;
    }
    add_joiner(t, s, p, o.took);
  }
  if (o.kind == SuspendOutcome::Kind::kFailed) {
    spdlog::error("tenant {}: suspending processes that joined it failed: {} (processes stuck: {})", name, o.reason,
                  fmt::join(o.stuck, ", "));
  }
}

uint64_t SuspensionOutcomes::moved(uint32_t t, Suspension& s, uint64_t moved) {
  // What did move stays moved and counts, whatever follows.
  const uint64_t more = moved > s.moved_out ? moved - s.moved_out : 0;
  s.moved_out = moved;
  policy_.moved(t, moved);
  return more;
}

void SuspensionOutcomes::fast_suspended(uint32_t t, Suspension& s, uint64_t more, Nanos took, Nanos now) {
  s.bytes[s.fast_gpu] = s.moved_out;
  count_suspended(t, s, took, now);
  shm::Tenant& tenant = segment_->tenants[t];
  tenant.gpu[s.fast_gpu].moved_mib.fetch_add(static_cast<uint32_t>(more >> 20), std::memory_order_relaxed);
  last_[t].path = "fast";
  last_[t].moved_out = s.moved_out;
  spdlog::info("tenant {} suspended: its processes moved {} of GPU {} to host memory in {:.2f} s", tenant.name,
               describe_bytes(s.moved_out), s.fast_gpu, secs(took));
}

}  // namespace cuslice
