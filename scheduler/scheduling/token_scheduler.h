// The scheduling step: reads the demand the hooks publish in their tenant regions, runs each
// GPU's TokenPolicy, and publishes its decisions (the token's holder, who waits) and the
// achieved shares in the segment. A waiting tenant that outranks whoever has work on a GPU
// gets the token in the same step (shm_protocol.h, "Priority takeover").
//
// Owns the token policies (one per GPU), the achieved-share windows and the step's scratch.
// A GPU's spatial group takes one place among its tenants (spatial_group.h).
// Reads the tenant table and the registered processes; never touches the sockets, the
// configuration file or memory preemption (the daemon says which tenants are suspended).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "scheduler/scheduling/share_window.h"
#include "scheduler/scheduling/token_policy.h"
#include "scheduler/segment/process_table.h"
#include "scheduler/segment/shared_segment.h"
#include "scheduler/segment/tenant_regions.h"
#include "scheduler/tenants/tenant_table.h"

namespace cuslice {

// The token policy's parameters that the configuration sets.
PolicyParams policy_params(const Config& config);

class TokenScheduler {
 public:
  using Nanos = TokenPolicy::Nanos;

  // How often achieved shares are published, and the window they cover.
  static constexpr Nanos kShareWindow = ShareWindow::kSpan;
  static constexpr Nanos kShareSamplePeriod = kShareWindow / (ShareWindow::kSamples - 1);

  TokenScheduler(SharedSegment& segment, TenantRegions& regions, const ProcessTable& processes,
                 const TenantTable& tenants);

  // The policies take the configuration's and the tenant table's parameters as they are now.
  void reconfigure();
  // Entry t was given to a new tenant at `now`: its achieved share starts from zero.
  void reset_tenant(uint32_t t, Nanos now);
  // One step at `now`; the tenants in `suspended` (bit t: entry t) wait inside the driver and
  // get no token. Returns when the policies ask to be run again (kNever: not before a kick).
  Nanos step(Nanos now, uint64_t suspended);
  // Each tenant's achieved share, sampled into the segment (every kShareSamplePeriod).
  void publish_shares(Nanos now);

  // The policies, one per GPU, which the usage ledger charges with GPU time.
  std::vector<TokenPolicy>& policies() { return policies_; }

 private:
  // Among the tenants in `waiting`, the one of highest priority that outranks whoever has
  // work on GPU g and is not capped, or kNoHolder (shm_protocol.h, "Priority takeover").
  uint32_t outranking_waiter(uint32_t g, uint64_t waiting) const;
  // Stores GPU g's holder (a tenant, the spatial group, or nobody) in the segment, and wakes
  // the waiters, when it changed.
  void publish_holder(uint32_t g, uint32_t holder);
  // The priority of policy entry `entry` on GPU g (a tenant, or the group), or nothing when
  // no tenant is there.
  std::optional<int> entry_priority(uint32_t g, uint32_t entry) const;
  // The highest priority among GPU g's spatial group.
  int group_priority(uint32_t g) const;
  // A policy entry's name for the log: a tenant's, or the spatial group's.
  const char* name(uint32_t entry) const;
  // Fills activity_ and the waiting masks from the processes' records.
  void read_demand(std::array<uint64_t, shm::kMaxGpus>& waiting);
  // The debug log of a holder that others have waited behind for long.
  void log_long_hold(uint32_t g, uint32_t holder, uint64_t waiting, Nanos now);

  SharedSegment& segment_;
  TenantRegions& regions_;
  const ProcessTable& processes_;
  const TenantTable& tenants_;
  std::vector<TokenPolicy> policies_;
  // Per GPU, bit t: tenant entry t runs in the GPU's spatial group (spatial_group.h), whose
  // policy entry is kGroupEntry.
  std::array<uint64_t, shm::kMaxGpus> members_{};
  std::array<std::array<ShareWindow, shm::kMaxGpus>, shm::kMaxTenants> share_windows_{};
  // Who holds each GPU's token since when (for the debug log of long holds).
  struct Held {
    uint32_t tenant = UINT32_MAX;
    Nanos since{0}, logged{0};
  };
  std::array<Held, shm::kMaxGpus> held_{};
  // The step's demand per GPU and tenant, kept between steps so that a step (run at every
  // kick) allocates nothing.
  std::vector<std::vector<TenantActivity>> activity_ =
      std::vector<std::vector<TenantActivity>>(shm::kMaxGpus, std::vector<TenantActivity>(shm::kMaxTenants + 1));
};

}  // namespace cuslice
