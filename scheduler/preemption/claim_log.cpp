// ClaimLog (claim_log.h): one line per process that claims what the checkpoint cannot move.
#include "scheduler/preemption/claim_log.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "scheduler/preemption/memory_preemption.h"

namespace cuslice {

ClaimLog::ClaimLog(const SharedSegment& segment, const TenantRegions& regions, const ProcessTable& processes,
                   const TenantTable& tenants)
    : segment_(segment), regions_(regions), processes_(processes), tenants_(tenants) {}

void ClaimLog::note() {
  for (const ProcessRecord& rec : processes_.all()) {
    if (regions_.get(rec.tenant) == nullptr) continue;
    if (rec.checkpoint_claims == 0 || !tenants_.preemptible(rec.tenant)) continue;
    if (logged_.count({rec.pid, rec.start_time})) continue;
    // Forget the processes that left before remembering one more.
    std::erase_if(logged_, [&](const std::pair<int32_t, uint64_t>& seen) {
      return std::none_of(processes_.all().begin(), processes_.all().end(),
                          [&](const ProcessRecord& p) { return p.pid == seen.first; });
    });
    logged_.emplace(rec.pid, rec.start_time);
    log(rec);
  }
}

void ClaimLog::log(const ProcessRecord& rec) const {
  const bool stop = tenants_.config().scheduler.preemption.stop_unsuspendable;
  const uint32_t flags = rec.checkpoint_claims;
  PreemptProcess p;
  p.ipc = (flags & shm::kUsesIpc) != 0;
  p.managed = (flags & shm::kUsesManaged) != 0;
  p.mps = (flags & shm::kUsesMps) != 0;
  const char* what = describe_claim(p);
  spdlog::warn("tenant {} is preemptible, and its pid {} says it uses {}, which the driver's checkpoint cannot "
               "move: {}",
               segment_->tenants[rec.tenant].name, rec.pid, what ? what : "something",
               stop ? "it is stopped (SIGKILL), not suspended, when the tenant's memory is needed "
                      "(preemption.unsuspendable: stop)"
                    : "the tenant is not suspended while it runs (preemption.unsuspendable: keep)");
}

}  // namespace cuslice
