// The Kubernetes workload a tenant's processes run in, as far as the daemon knows: what its
// registered processes reported (socket_protocol.h, WorkloadMessage) or what the device
// plugin said of its tenants. Data only: the metrics label samples with it and `cuslice
// status` shows it; nothing decides anything by it.
#pragma once

#include <map>
#include <string>

namespace cuslice {

// Each field is what all the tenant's processes reported, or empty when they did not all
// report the same.
struct Workload {
  std::string pod_namespace, pod_name, container_name;
};
using TenantWorkloads = std::map<std::string, Workload>;  // by tenant name

}  // namespace cuslice
