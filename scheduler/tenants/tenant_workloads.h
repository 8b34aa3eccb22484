// Per tenant, the Kubernetes workload its registered processes agree on, and the device
// plugin's labels for its tenants: what the metrics label samples with and `cuslice status`
// shows. Reads the registered processes, the segment's tenant names and the plugin tenants;
// decides nothing.
#pragma once

#include "scheduler/segment/process_table.h"
#include "scheduler/segment/shared_segment.h"
#include "scheduler/segment/workload.h"
#include "scheduler/tenants/plugin_tenants.h"

namespace cuslice {

TenantWorkloads tenant_workloads(const ProcessTable& processes, const SharedSegment& segment,
                                 const PluginTenants& plugin_tenants);

}  // namespace cuslice
