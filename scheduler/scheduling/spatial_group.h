// A GPU's spatial group as its token policy sees it: one tenant, at the index after the last
// tenant entry, that stands for every tenant running side by side there (TenantParams::spatial;
// docs/design/spatial.md). The group's share is its members' together, its priority their
// highest, and it has no limit of its own (each member's SMs are MPS's to bound). Its demand
// is any member's. It is charged the time it holds the token, never its members' reports:
// kernels running concurrently report more GPU time than the wall time they shared.
//
// Pure functions over the tenant parameters and the step's activity; no state, no I/O.
#pragma once

#include <cstdint>
#include <vector>

#include "protocol/shm_limits.h"
#include "scheduler/scheduling/token_policy.h"
#include "scheduler/tenants/tenant_params.h"

namespace cuslice {

// The policy's index of the group.
inline constexpr uint32_t kGroupEntry = shm::kMaxTenants;

// Bit t: tenant entry t is in the group.
uint64_t group_members(const std::vector<TenantParams>& tenants);
// What the policy is given: `tenants` with the members hidden, and the group at kGroupEntry
// (absent while it has no member).
std::vector<TenantParams> policy_tenants(const std::vector<TenantParams>& tenants);
// The group's demand from its members' (activity has kGroupEntry + 1 entries).
void fold_group_activity(std::vector<TenantActivity>& activity, uint64_t members);

}  // namespace cuslice
