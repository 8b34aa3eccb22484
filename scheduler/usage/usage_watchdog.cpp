// UsageWatchdog: sets the driver's per-process memory against tenants' quotas and the
// registered processes. Calls nothing but the standard library and protocol/saturating.h.
#include "scheduler/usage/usage_watchdog.h"

#include <algorithm>
#include <unordered_map>

#include "protocol/saturating.h"

namespace cuslice {

std::vector<Violation> UsageWatchdog::check(const std::vector<std::vector<DriverProcess>>& driver,
                                            const std::vector<RegisteredProcess>& registered,
                                            const std::vector<WatchedTenant>& tenants) {
  std::unordered_map<pid_t, const RegisteredProcess*> by_pid;
  by_pid.reserve(registered.size());
  for (const RegisteredProcess& p : registered) by_pid.emplace(p.pid, &p);

  Findings findings;
  for (uint32_t g = 0; g < driver.size(); ++g) {
    TenantSums per_tenant;
    for (const DriverProcess& dp : driver[g]) {
      const auto it = by_pid.find(dp.pid);
      if (it == by_pid.end()) {
        check_unhooked(g, dp, findings);
        continue;
      }
      const RegisteredProcess& rp = *it->second;
      if (rp.tenant < tenants.size()) add_to_sum(g, dp, rp, per_tenant[rp.tenant]);
    }
    check_quotas(g, per_tenant, tenants, findings);
  }
  std::vector<Violation>& found = findings.found;
  for (size_t i = 0; i < found.size(); ++i) found[i].is_new = !reported_before(findings.keys[i]);
  unhooked_seen_ = std::move(findings.seen_once);
  reported_ = std::move(findings.keys);
  return std::move(found);
}

bool UsageWatchdog::reported_before(const Key& key) const {
  return std::find(reported_.begin(), reported_.end(), key) != reported_.end();
}

void UsageWatchdog::check_unhooked(uint32_t g, const DriverProcess& dp, Findings& findings) const {
  const Key key{Violation::Kind::kUnhooked, g, static_cast<uint64_t>(dp.pid)};
  const bool before =
      std::find(unhooked_seen_.begin(), unhooked_seen_.end(), key) != unhooked_seen_.end() || reported_before(key);
  if (!before) {
    findings.seen_once.push_back(key);
    return;
  }
  Violation v;
  v.kind = Violation::Kind::kUnhooked;
  v.gpu = g;
  v.used_bytes = dp.used_bytes;
  v.pid = dp.pid;
  findings.found.push_back(v);
  findings.keys.push_back(key);
}

void UsageWatchdog::add_to_sum(uint32_t g, const DriverProcess& dp, const RegisteredProcess& rp, TenantSum& sum) {
  sum.used += dp.used_bytes;
  sum.processes += 1;
  const uint64_t charged = g < rp.charged.size() ? rp.charged[g] : 0;
  const uint64_t excess = dp.used_bytes > charged ? dp.used_bytes - charged : 0;
  if (sum.worst == 0 || excess > sum.worst_excess) {
    sum.worst = dp.pid;
    sum.worst_excess = excess;
  }
}

void UsageWatchdog::check_quotas(uint32_t g, const TenantSums& sums, const std::vector<WatchedTenant>& tenants,
                                 Findings& findings) const {
  for (const auto& [tenant, sum] : sums) {
    const WatchedTenant& t = tenants[tenant];
    if (g >= t.quota.size() || !t.quota[g]) continue;
    const uint64_t allowance = settings_.allowance_per_process * sum.processes;
    const uint64_t quota = *t.quota[g];
    const uint64_t bound = saturating_add(quota, allowance);
    if (sum.used <= bound) continue;
    Violation v;
    v.kind = Violation::Kind::kOverQuota;
    v.gpu = g;
    v.tenant = tenant;
    v.used_bytes = sum.used;
    v.quota_bytes = bound;
    v.pid = sum.worst;
    v.kill = t.kill_on_violation;
    findings.found.push_back(v);
    findings.keys.push_back({Violation::Kind::kOverQuota, g, tenant});
  }
}

}  // namespace cuslice
