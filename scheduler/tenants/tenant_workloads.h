// Per tenant, the Kubernetes workload its registered processes agree on, and the device
// plugin's labels for its tenants: what the metrics label samples with and `cuslice status`
// shows. Reads the registered processes, the segment's tenant names and the plugin tenants;
// decides nothing.
#pragma once

#include "plugin_tenants.h"
#include "process_table.h"
#include "shared_segment.h"
#include "workload.h"

namespace cuslice {

TenantWorkloads tenant_workloads(const ProcessTable& processes, const SharedSegment& segment,
                                 const PluginTenants& plugin_tenants);

}  // namespace cuslice
