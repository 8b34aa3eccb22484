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

#include <string>

#include "segment_snapshot.h"
#include "workload.h"

namespace cuslice {

// `workloads` labels each tenant's samples with its namespace, pod and container.
std::string render_metrics(const SegmentSnapshot& snapshot, const TenantWorkloads& workloads = {});

}  // namespace cuslice
