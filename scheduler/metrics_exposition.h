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

#include "segment_snapshot.h"

namespace cuslice {

// The Kubernetes workload a tenant's processes run in, as far as known: each field is what
// all its registered processes reported (socket_protocol.h, WorkloadMessage), or empty when
// they did not all report the same. Non-empty fields become the `namespace`, `pod` and
// `container` labels of the tenant's samples.
struct Workload {
  std::string pod_namespace, pod_name, container_name;
};
using TenantWorkloads = std::map<std::string, Workload>;  // by tenant name

std::string render_metrics(const SegmentSnapshot& snapshot, const TenantWorkloads& workloads = {});

}  // namespace cuslice
