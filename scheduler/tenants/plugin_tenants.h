// Tenants made by the Kubernetes device plugin (cuslice-device-plugin), one per container
// that asked for cuslice.io/gpu-memory, and by the DRA driver (cuslice-dra-plugin), one per
// prepared claim, on one GPU or several: the daemon's record of them, the checks on what the
// plugin asks, and who may join them. Pure logic, unit-tested; the daemon feeds it requests
// (socket_protocol.h, PluginRequest) and registrations.
//
// They live beside the configuration file's tenants, in memory: a reload of the file keeps
// them, and they end with the daemon (the plugin creates them again when it finds a new
// daemon, docs/reference/kubernetes.md). A name is never both a file tenant and a plugin tenant.
//
// Who may join one. The plugin gives the container CUSLICE_TENANT=<name>:<key>, the key
// being a random credential that only this container's environment holds (the segment and
// `cuslice status` show names, never keys). A registration naming a plugin tenant must bring
// its key. The first process that joins binds the tenant to its pod: its cgroup v2 path up to
// the pod's own cgroup (the component naming the pod's UID, e.g. kubepods-burstable-pod<uid>
// .slice or pod<uid>), or its whole cgroup outside Kubernetes. Later processes must be inside
// that cgroup, so a key that leaks out of its pod is of no use elsewhere. Both facts come
// from the kernel (SO_PEERCRED, /proc/<pid>/cgroup), never from the process.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/tenant_config.h"
#include "protocol/socket_protocol.h"
#include "scheduler/segment/workload.h"

namespace cuslice {

struct PluginOutcome {
  bool ok = false;
  bool changed = false;  // the tenants' parameters changed: the daemon applies them
  std::string message;   // why not, or what happened
};

// What a registration's CUSLICE_TENANT means for plugin tenants.
struct PluginJoin {
  bool plugin = false;   // the request concerns a plugin tenant (decided here, not by the file)
  bool ok = false;       // may join `tenant`
  std::string tenant;    // the tenant's name, without the key
  std::string reason;    // why not
};

class PluginTenants {
 public:
  // Creates or updates a tenant; `file` is the configuration file's (names it may not take).
  PluginOutcome apply(const wire::PluginTenant& spec, const Config& file);
  // Removing a tenant that does not exist is not an error: the plugin may ask twice.
  PluginOutcome remove(std::string_view name);

  // `requested`: CUSLICE_TENANT as the process sent it; `cgroup`: its cgroup v2 path.
  PluginJoin check_join(std::string_view requested, const std::string& cgroup) const;
  // The process checked by check_join joined: bind the tenant to its pod if not yet bound.
  void joined(const std::string& tenant, const std::string& cgroup);

  bool contains(std::string_view name) const { return tenants_.count(std::string(name)) > 0; }
  size_t size() const { return tenants_.size(); }
  std::vector<wire::PluginTenant> list() const;
  // Adds the plugin's tenants to `config` (the file's), as tenants of their GPUs with no
  // match rule, that only check_join lets anyone join: the table the daemon applies. A name
  // the file took since is left out.
  void append_to(Config& config) const;
  // The labels the plugin gave, by tenant name.
  TenantWorkloads workloads() const;

 private:
  struct Record {
    wire::PluginTenant spec;
    std::optional<std::string> bound_cgroup;
  };
  // Why `spec` does not fit its GPU's time beside the file's tenants there and the plugin's
  // other tenants there, or empty: a GPU's shares add up to at most 100%.
  std::string over_gpu(const wire::PluginTenant& spec, const std::string& name, const Config& file) const;
  // apply()'s two ends, for a valid spec: a new tenant, where the scheduler has room; a
  // known one's parameters, where its credential, GPUs and quota stay the same.
  PluginOutcome add(const wire::PluginTenant& spec, const std::string& name, const Config& file);
  PluginOutcome update(Record& record, const wire::PluginTenant& spec, const std::string& name);

  std::map<std::string, Record> tenants_;
};

// The part of a cgroup v2 path that names a pod: up to and including the first component
// with "pod" followed by a UID (36 hex digits and '-' or '_'); the whole path when none.
std::string pod_cgroup(std::string_view cgroup);

}  // namespace cuslice
