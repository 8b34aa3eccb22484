// From the configuration to the daemon's tenant table: loading the file and the policy
// parameters it sets. The table itself (the segment's tenant entries and the policies'
// TenantParams) is kept by Daemon; tenant_table.cpp defines the members that write it
// (apply_config, claim_tenant_entry, reload).
#pragma once

#include "tenant_config.h"
#include "token_policy.h"

namespace cuslice {

struct DaemonOptions;

// The configuration the daemon starts with: the file (errors are logged one per line, then
// std::runtime_error is thrown), or no tenants at all with --ephemeral.
Config load_daemon_config(const DaemonOptions& options);

// The token policy's parameters that the configuration sets.
PolicyParams policy_params(const Config& config);

}  // namespace cuslice
