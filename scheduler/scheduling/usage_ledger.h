// What hooks write in the tenant regions, taken by the daemon: GPU time into the token
// policies, and copies of every tenant's usage and counters, the cards' identity and the
// processes' flags into the segment, where `cuslice status`, the metrics and other tenants'
// hooks read them. A region is hostile input: counters are followed forwards only and by a
// bounded amount per call (tenant_regions.h, advance), and nothing read there is used as an
// index. Owns what it has taken of each counter; never touches the sockets or the token.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

#include "scheduler/scheduling/token_policy.h"
#include "scheduler/segment/process_table.h"
#include "scheduler/segment/shared_segment.h"
#include "scheduler/segment/tenant_regions.h"
#include "scheduler/tenants/tenant_table.h"

namespace cuslice {

class UsageLedger {
 public:
  using Nanos = TokenPolicy::Nanos;

  // `policies`: one per GPU, charged with the GPU time tenants report.
  UsageLedger(SharedSegment& segment, TenantRegions& regions, const ProcessTable& processes,
              const TenantTable& tenants, std::vector<TokenPolicy>& policies);

  // Takes the GPU time the tenant regions report since the last call, bounded, into the
  // policies and the segment.
  void charge_gpu_time(Nanos now);
  // charge_gpu_time(), then memory, time waited, refusals, the cards' identity and the
  // processes' flags from the tenant regions into the segment, for status and metrics.
  void publish_usage();
  // Entry t was given to a new tenant: its counters start from zero.
  void reset_tenant(uint32_t t);

 private:
  // What the daemon has taken from each tenant region's counters, which is what it
  // publishes: never more than the region says, never backwards, bounded per call.
  struct Seen {
    uint64_t gpu_time_ns = 0, wait_ns = 0, oom_refusals = 0;
  };

  SharedSegment& segment_;
  TenantRegions& regions_;
  const ProcessTable& processes_;
  const TenantTable& tenants_;
  std::vector<TokenPolicy>& policies_;
  std::array<std::array<Seen, shm::kMaxGpus>, shm::kMaxTenants> seen_{};
  Nanos gpu_time_read_at_{0}, usage_read_at_{0};
};

}  // namespace cuslice
