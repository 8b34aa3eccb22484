// Which tenant a registering process joins: pure logic over the configuration and what the
// kernel says about the process.
//
//   1. CUSLICE_TENANT names a tenant: joined when that tenant says `allow_env: true` or its
//      match rules hold for the process (allow_env is false unless the file says so). An
//      unknown name is refused, not ignored, so a typo is not silently billed to someone else.
//   2. Otherwise the first tenant (in file order) whose match rules all hold.
//   3. Otherwise the default tenant, or refusal.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "config/tenant_config.h"

namespace cuslice {

struct PeerIdentity {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string cgroup;  // cgroup v2 path, e.g. /kubepods/pod1; empty when unknown
};

struct Assignment {
  int tenant = -1;     // index into Config::tenants, or -1: refused
  std::string reason;  // why, when refused
};

Assignment assign_tenant(const Config& config, const PeerIdentity& peer, std::string_view requested);

// Whether every rule of `match` holds for `peer` (false for a match with no rules).
bool matches(const TenantMatch& match, const PeerIdentity& peer);

}  // namespace cuslice
