// tenant_workloads (tenant_workloads.h): a field stays only while every process agrees.
#include "scheduler/tenants/tenant_workloads.h"

#include <map>
#include <string>

namespace cuslice {

TenantWorkloads tenant_workloads(const ProcessTable& processes, const SharedSegment& segment,
                                 const PluginTenants& plugin_tenants) {
  TenantWorkloads out;
  std::map<std::string, int> seen;  // processes per tenant so far
  for (const ProcessRecord& p : processes.all()) {
    if (p.tenant >= shm::kMaxTenants) continue;
    const std::string name = segment->tenants[p.tenant].name;
    Workload& w = out[name];
    if (seen[name]++ == 0) {
      w = p.workload;
      continue;
    }
    // A field stays only while every process of the tenant reported the same value.
    if (w.pod_namespace != p.workload.pod_namespace) w.pod_namespace.clear();
    if (w.pod_name != p.workload.pod_name) w.pod_name.clear();
    if (w.container_name != p.workload.container_name) w.container_name.clear();
  }
  for (auto& [name, w] : plugin_tenants.workloads()) out[name] = std::move(w);
  return out;
}

}  // namespace cuslice
