// Tenants of an ephemeral daemon (`cuslice-scheduler --ephemeral`), which has no file:
// `cuslice run` describes its tenant in a kEnsureTenant request and the daemon adds it to
// the in-memory configuration. The checks are those the YAML parser makes for the same
// keys, so a tenant from the command line is never one a file could not hold.
//
// "Ensure" is idempotent: a second `cuslice run` with the same tenant and the same
// parameters joins it; the same name with other parameters is refused (it would silently
// change the first command's quota), and the message says which parameter differs.
#pragma once

#include <string>

#include "config/tenant_config.h"
#include "protocol/socket_protocol.h"

namespace cuslice {

struct EnsureOutcome {
  bool ok = false;
  bool added = false;   // a new tenant is in `config` (the caller applies it)
  std::string message;  // why not, or what happened
};

EnsureOutcome ensure_tenant(Config& config, const wire::TenantSpec& spec);

}  // namespace cuslice
