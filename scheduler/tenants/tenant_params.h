// What one tenant entry gives the token policies: whether a tenant has it, and that tenant's
// priority, share and limit. Written by the tenant table from the configuration; read by the
// policies (token_policy.h), which never see the configuration itself.
#pragma once

namespace cuslice {

struct TenantParams {
  bool present = false;  // a tenant exists at this index
  int priority = 1;      // higher wins; 0 low, 1 normal, 2 high
  double share = 1.0;    // fraction of the GPU under contention, (0, 1]
  double limit = 1.0;    // cap as a fraction of the GPU, (0, 1]; 1 means none
  // In the GPU's spatial group: it holds the token together with the group's other tenants
  // (docs/design/spatial.md), and its own share, limit and priority count only in the group's.
  bool spatial = false;
};

}  // namespace cuslice
