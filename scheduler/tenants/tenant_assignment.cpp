#include "scheduler/tenants/tenant_assignment.h"

namespace cuslice {

bool matches(const TenantMatch& match, const PeerIdentity& peer) {
  if (match.empty()) return false;
  if (match.uid && *match.uid != peer.uid) return false;
  if (match.gid && *match.gid != peer.gid) return false;
  if (match.cgroup_prefix) {
    // A path prefix, not a string prefix: /a/b matches /a/b and /a/b/c, not /a/bc.
    const std::string& p = *match.cgroup_prefix;
    const std::string_view cg = peer.cgroup;
    const bool under = cg.substr(0, p.size()) == p &&
                       (cg.size() == p.size() || p.back() == '/' || cg[p.size()] == '/');
    if (!under) return false;
  }
  return true;
}

Assignment assign_tenant(const Config& config, const PeerIdentity& peer, std::string_view requested) {
  if (!requested.empty()) {
    const int t = config.find_tenant(requested);
    if (t < 0) return {-1, "CUSLICE_TENANT names `" + std::string(requested) + "`, which is not a tenant"};
    const TenantConfig& tenant = config.tenants[t];
    if (!tenant.allow_env && !matches(tenant.match, peer)) {
      return {-1, "tenant `" + tenant.name +
                      "` cannot be chosen with CUSLICE_TENANT (allow_env: false) and its match "
                      "rules do not select this process"};
    }
    return {t, ""};
  }
  for (size_t t = 0; t < config.tenants.size(); ++t)
    if (matches(config.tenants[t].match, peer)) return {static_cast<int>(t), ""};
  if (config.scheduler.default_tenant) return {config.find_tenant(*config.scheduler.default_tenant), ""};
  return {-1, "no tenant for this process (uid " + std::to_string(peer.uid) + ", gid " +
                  std::to_string(peer.gid) + "): set CUSLICE_TENANT or add a match rule or a "
                  "default_tenant to the scheduler's configuration"};
}

}  // namespace cuslice
