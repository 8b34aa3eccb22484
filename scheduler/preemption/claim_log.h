// The log's word on what a preemptible tenant's processes say of themselves: once per
// process, a line naming what it says it uses that the driver's checkpoint cannot move (CUDA
// IPC, managed memory, MPS), and what the configuration makes of it (stopped, or the tenant
// never suspended while it runs).
//
// Owns the processes already logged (pid and start time; forgotten once they leave). Reads the
// registered processes and the tenant table; writes nothing but the log.
#pragma once

#include <cstdint>
#include <set>
#include <utility>

#include "scheduler/segment/process_table.h"
#include "scheduler/segment/shared_segment.h"
#include "scheduler/segment/tenant_regions.h"
#include "scheduler/tenants/tenant_table.h"

namespace cuslice {

class ClaimLog {
 public:
  ClaimLog(const SharedSegment& segment, const TenantRegions& regions, const ProcessTable& processes,
           const TenantTable& tenants);

  // Logs the claims not logged yet. Allocates nothing unless it finds a new one.
  void note();

 private:
  void log(const ProcessRecord& rec) const;

  const SharedSegment& segment_;
  const TenantRegions& regions_;
  const ProcessTable& processes_;
  const TenantTable& tenants_;
  std::set<std::pair<int32_t, uint64_t>> logged_;  // pid, start time
};

}  // namespace cuslice
