// Parking: below a higher-priority tenant, a launch that must not run yet is held back on the
// GPU, behind a gate on its stream (a wait on the slot's gate word), and the launching thread
// goes on; launches let run are marked so that the monitor sees them complete with a load.
// The monitor opens gates as the bound allows (open_gates); a watchdog opens them all while
// the monitor is stuck in the driver.
//
// Launching threads call park_on_stream(); the monitor calls open_gates(). May call
// monitor_state, monitor_driver, gate_words, stream_slots, queue_bound, the client
// (token_try) and log.
#pragma once

#include <atomic>
#include <cstdint>

#include "hook/base/cuda_api.h"
#include "hook/monitor/gate_words.h"
#include "hook/monitor/monitor_state.h"

namespace cuslice::activity {

// Whether launches are held back on the GPU rather than waiting on the CPU (below a
// higher-priority tenant, with the gate words set up).
inline bool parking() {
  return g_state.park_cap_ns > 0 && g_state.higher.load(std::memory_order_relaxed) &&
         g_state.gate_state.load(std::memory_order_acquire) == kGateReady;
}

// activity::park() once it applies (see activity.h): sets the gate words up if needed, waits
// at the parking cap, then lets the launch go or holds it back behind a gate. True: launch
// now; false: wait on the CPU instead.
bool park_on_stream(int device, int gpu, CUstream stream);

// Whether a launch held back behind a closed gate gets a gate of its own: the closed segment
// (from the last gate, at `last_gate_at`, to `enq`) is full, and the stream remembers one more
// gate (`gates` put, the gate word at `word`).
bool wants_new_gate(int64_t enq, int64_t last_gate_at, uint32_t gates, uint32_t word, int64_t segment);

// Opens the gates of the device's streams as the bound allows (everything: all of them).
// Monitor, under g_state.lock. True when it opened some.
bool open_gates(int device, Look& look, bool everything);

}  // namespace cuslice::activity
