// The spatial group as one tenant of a token policy (spatial_group.h).
#include "scheduler/scheduling/spatial_group.h"

#include <algorithm>

namespace cuslice {

uint64_t group_members(const std::vector<TenantParams>& tenants) {
  uint64_t members = 0;
  for (uint32_t t = 0; t < tenants.size() && t < kGroupEntry; ++t)
    if (tenants[t].present && tenants[t].spatial) members |= uint64_t{1} << t;
  return members;
}

std::vector<TenantParams> policy_tenants(const std::vector<TenantParams>& tenants) {
  std::vector<TenantParams> out(kGroupEntry + 1);
  TenantParams group;
  group.priority = 0;
  group.share = 0;
  for (uint32_t t = 0; t < tenants.size() && t < kGroupEntry; ++t) {
    out[t] = tenants[t];
    if (!tenants[t].present || !tenants[t].spatial) continue;
    out[t].present = false;
    group.present = true;
    group.priority = std::max(group.priority, tenants[t].priority);
    group.share += tenants[t].share;
  }
  group.share = std::clamp(group.share, 0.01, 1.0);
  if (group.present) out[kGroupEntry] = group;
  return out;
}

void fold_group_activity(std::vector<TenantActivity>& activity, uint64_t members) {
  TenantActivity& group = activity[kGroupEntry];
  group = {};
  for (uint64_t rest = members; rest != 0; rest &= rest - 1) {
    const TenantActivity& a = activity[static_cast<uint32_t>(__builtin_ctzll(rest))];
    group.demand |= a.demand;
    group.queued |= a.queued;
  }
}

}  // namespace cuslice
