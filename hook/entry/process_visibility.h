// Which of the processes on a GPU this process is shown.
//
// Under a quota a process sees itself and, in a scheduler's tenant, the other processes of its
// tenant: never another tenant's pid, nor its memory. Without a quota or tenant it sees every
// process (the hook changes nothing observable). Two places filter with it: NVML's public
// process lists (nvml_hooks.cpp) and, underneath every list NVML builds (nvidia-smi's
// internal-table path included), the RM control that reads a GPU's pids (rm_control_hooks.cpp).
//
// Slow path only: called when a list is read, never per launch or allocation.
#pragma once

namespace cuslice::process_visibility {

// True when lists of processes must be filtered with visible(). The first call initialises
// the hook if nothing did yet (loads the driver and, when a scheduler answers, joins its
// tenant), so an NVML-only process such as nvidia-smi is attached before it is answered.
// When the hook refused to start (unreadable settings, no tenant for the process) lists are
// filtered too: the process is shown itself alone, never everyone.
bool filtered();

// True when `pid` may be shown under filtered(): this process, or a registered process of its
// tenant (while attached to the scheduler).
bool visible(unsigned int pid);

}  // namespace cuslice::process_visibility
