// Memory preemption as `cuslice status` and the metrics show it: by tenant, its state and why,
// what its processes claim, and the fast way's figures (how its last suspension went, what it
// moved, the host memory its processes prepared, how long its last request waited for room).
//
// Owns nothing: reads the policy, the suspensions and how they went, the requests and
// MemoryFacts, at each call. Writes nothing. The figures are in the metrics' terms
// (metrics_exposition.h), which the daemon hands to the exposition as they are.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/metrics/metrics_exposition.h"
#include "scheduler/preemption/memory_facts.h"
#include "scheduler/preemption/memory_preemption.h"
#include "scheduler/preemption/memory_requests.h"
#include "scheduler/preemption/suspension_operations.h"
#include "scheduler/segment/shared_segment.h"
#include "scheduler/tenants/tenant_table.h"

namespace cuslice {

class PreemptionReport {
 public:
  PreemptionReport(const SharedSegment& segment, const TenantTable& tenants, const MemoryFacts& facts,
                   const MemoryPreemption& policy, const SuspensionOperations& operations,
                   const MemoryRequests& requests);

  // One line per tenant with something to say, for `cuslice status`: name, state, reason;
  // before it, for a preemptible tenant (or one that waited for room), a line of the fast
  // way's figures that a `cuslice` which does not know them reads as a tenant named "@facts"
  // (no tenant name has an "@").
  std::vector<std::string> lines() const;
  // The fast way's figures by tenant name, for the metrics.
  TenantPreemptionFigures figures() const;

 private:
  std::string facts_line(uint32_t t, const PreemptTenant& tenant) const;
  // The state line's reason, empty when a running tenant has nothing to say.
  std::string reason(uint32_t t, const PreemptTenant& tenant) const;

  const SharedSegment& segment_;
  const TenantTable& tenants_;
  const MemoryFacts& facts_;
  const MemoryPreemption& policy_;
  const SuspensionOperations& operations_;
  const MemoryRequests& requests_;
};

}  // namespace cuslice
