// `cuslice run`'s scheduler: makes sure one answers (scheduler_autostart.h), the node's, else
// the user's own, which it starts when none answers, and asks it (on the tenant socket) what
// it is. When it is ephemeral, `run` adds the command's tenant (named by --tenant, else one
// of the command's own, own_tenant.h; with --memory/--share/--limit/--priority) on the
// scheduler's control socket, which only root and the scheduler's user reach, and hands the
// command that connection as its lease, so the daemon lives while the command (or a child of
// it) does. A scheduler started from a file keeps its own tenants: without --tenant its match
// rules and default_tenant place the command; --share, --limit and --priority are accepted
// only when they say what the file says for --tenant, and refused otherwise, never silently
// dropped; the same flags are refused when no scheduler will run at all (auto-start off).
//
// Sets only what the hook needs to join (CUSLICE_SOCKET, CUSLICE_CONTROL_SOCKET,
// CUSLICE_TENANT); the hook's other settings and the exec are run_command.cpp's.
#pragma once

#include "cli/run_options.h"

namespace cuslice::cli {

// Throws Error: kUsage for flags the scheduler cannot honour, kFailure when it refuses.
void join_scheduler(const RunOptions& options);

}  // namespace cuslice::cli
