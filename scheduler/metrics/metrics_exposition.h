// The Prometheus text exposition (format 0.0.4) of a segment snapshot: what GET /metrics
// returns, built as prometheus-cpp metric families and written by its TextSerializer. Pure:
// the same snapshot always gives the same text, so tests check it directly.
//
// Conventions (https://prometheus.io/docs/practices/naming/): every name starts with
// `cuslice_`, values are in base units (bytes, seconds) and ratios in [0, 1]; counters end
// in `_total`. Labels: `tenant` (the tenant's name), `gpu` (the GPU's UUID when a hook has
// published it, else its index) and, where known, `namespace`, `pod` and `container`. There
// is never a pid label: pids churn, and each new one would be a new time series.
#pragma once

#include <map>
#include <string>

#include "common/segment_snapshot.h"
#include "scheduler/segment/workload.h"

namespace cuslice {

// Memory preemption's figures that are not in the segment, by tenant name (the daemon's).
struct PreemptionFigures {
  bool fast = false;            // the last suspension went the fast way
  uint64_t moved_out = 0;       // what it took off the card
  uint64_t host_pool = 0;       // pinned host memory its processes prepared
  double time_to_room = 0;      // seconds the tenant's last request that needed room waited
};
using TenantPreemptionFigures = std::map<std::string, PreemptionFigures>;

// `workloads` labels each tenant's samples with its namespace, pod and container.
std::string render_metrics(const SegmentSnapshot& snapshot, const TenantWorkloads& workloads = {},
                           const TenantPreemptionFigures& preemption = {});

}  // namespace cuslice
