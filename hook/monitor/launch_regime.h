// Who else is registered decides what the launch path does (activity.h): alone, bounded
// beside others, parked below a higher tenant, or launched without the token under short
// time slices. The monitor looks every kNeighboursNs (and at once after a revocation), and
// sets g_state's others, higher, sliced and capped from what it finds.
//
// Monitor thread only. May call monitor_state, scheduler_link (gpu), channel_groups, the
// client and log.
#pragma once

namespace cuslice::activity {

void look_at_neighbours();

}  // namespace cuslice::activity
