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

  std::vector<Violation> found;
  std::vector<Key> keys;
  std::vector<Key> seen_once;
  for (uint32_t g = 0; g < driver.size(); ++g) {
    struct Sum {
      uint64_t used = 0;
      uint32_t processes = 0;
      pid_t worst = 0;
      uint64_t worst_excess = 0;
    };
    std::unordered_map<uint32_t, Sum> per_tenant;
    for (const DriverProcess& dp : driver[g]) {
      const auto it = by_pid.find(dp.pid);
      if (it == by_pid.end()) {
        const Key key{Violation::Kind::kUnhooked, g, static_cast<uint64_t>(dp.pid)};
        const bool before = std::find(unhooked_seen_.begin(), unhooked_seen_.end(), key) != unhooked_seen_.end() ||
                            std::find(reported_.begin(), reported_.end(), key) != reported_.end();
        if (!before) {
          seen_once.push_back(key);
          continue;
        }
        Violation v;
        v.kind = Violation::Kind::kUnhooked;
        v.gpu = g;
        v.used_bytes = dp.used_bytes;
        v.pid = dp.pid;
        found.push_back(v);
        keys.push_back(key);
        continue;
      }
      const RegisteredProcess& rp = *it->second;
      if (rp.tenant >= tenants.size()) continue;
      Sum& sum = per_tenant[rp.tenant];
      sum.used += dp.used_bytes;
      sum.processes += 1;
      const uint64_t charged = g < rp.charged.size() ? rp.charged[g] : 0;
      const uint64_t excess = dp.used_bytes > charged ? dp.used_bytes - charged : 0;
      if (sum.worst == 0 || excess > sum.worst_excess) {
        sum.worst = dp.pid;
        sum.worst_excess = excess;
      }
    }
    for (const auto& [tenant, sum] : per_tenant) {
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
      found.push_back(v);
      keys.push_back({Violation::Kind::kOverQuota, g, tenant});
    }
  }
  for (size_t i = 0; i < found.size(); ++i)
    found[i].is_new = std::find(reported_.begin(), reported_.end(), keys[i]) == reported_.end();
  unhooked_seen_ = std::move(seen_once);
  reported_ = std::move(keys);
  return found;
}

}  // namespace cuslice
