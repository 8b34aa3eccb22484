// The last phase of the monitor's pass, per device: whether the process's work there drained,
// and what follows: the token given back (after a short grace) or kept, GPU time reported,
// kernel times learnt and the throttle set from the bound.
//
// Monitor thread only. May call monitor_state, stream_slots, kernel_estimates, queue_bound,
// parking (parking()), thread_launches, scheduler_link (gpu), the client and log.
#pragma once

#include <cstdint>

#include "hook/monitor/monitor_state.h"

namespace cuslice::activity {

// The flags a pass gives the monitor's loop: any device busy; revoked: a busy device's token
// was taken back (its drain is awaited: look again soon); throttled: a launch waits for room
// on the CPU; held: work is held back behind a gate, or marks are coming in; records_resumed:
// launches stopped, and the records just made will show the drain.
struct PassOutcome {
  bool busy = false;
  bool revoked = false;
  bool throttled = false;
  bool held = false;
  bool records_resumed = false;
};

// Device d after its streams were looked at (`look`; `launched_before`: its launch count
// before): gives the token back once drained, else keeps it and bounds the queue; adds what
// the loop must know to `out`.
void release_or_bound(int d, int64_t now, const Look& look, uint64_t launched_before, PassOutcome& out);

}  // namespace cuslice::activity
