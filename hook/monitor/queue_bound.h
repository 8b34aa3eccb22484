// The queue bound: how much estimated GPU time a process may have in flight beside other
// tenants (CUSLICE_MAX_QUEUED; CUSLICE_PREEMPT_QUEUED below a higher-priority tenant), the
// cap past which parked launches wait on the CPU (CUSLICE_PARK_QUEUED), and the throttle a
// launching thread waits on when the bound is full.
//
// Launching threads and the monitor both call these; the launch path's (too_deep,
// wait_throttle) are inline, a few loads. May call monitor_state only.
#pragma once

#include <cstdint>

#include "hook/monitor/monitor_state.h"

namespace cuslice::activity {

// Whether a launch must wait: as much estimated work in flight as the bound holds (and more
// than the launches always allowed), or more launches than the ring remembers.
inline bool too_deep(const Device& dev, uint64_t in_flight, int64_t queued) {
  const bool higher = g_state.higher.load(std::memory_order_relaxed);
  if (in_flight < (higher ? kMinInFlightBelowHigher : kMinInFlight)) return false;
  if (in_flight >= kRing / 2) return true;
  return dev.mean_ns.load(std::memory_order_relaxed) != 0 &&
         queued >= (higher ? g_state.higher_queued_ns : g_state.max_queued_ns);
}

// The bound on runnable work (estimated time) and the segment a gate closes.
inline int64_t bound_ns() { return g_state.higher.load(std::memory_order_relaxed) ? g_state.higher_queued_ns : g_state.max_queued_ns; }
inline int64_t segment_ns() { return bound_ns() / 2; }

// Parking's own cap: launches wait on the CPU only past this much held back or in flight.
inline bool over_cap(const Device& dev) {
  return dev.launched.load(std::memory_order_acquire) - dev.completed.load(std::memory_order_acquire) >= kRing / 2 ||
         dev.queued() >= g_state.park_cap_ns;
}

// Lets launching threads waiting at the parking cap go once the work in flight is below it.
inline void release_cap(Device& dev) {
  if (!dev.cap.load(std::memory_order_acquire)) return;
  if (dev.busy.load(std::memory_order_acquire) && over_cap(dev)) return;
  dev.cap.store(0, std::memory_order_release);
  dev.cap.notify_all();
}

// Lets launching threads throttled on the device go.
inline void clear_throttle(Device& dev) {
  dev.throttle.store(0, std::memory_order_release);
  dev.throttle.notify_all();
}

// Waits while the throttle is set (first spinning: the monitor usually clears it at once).
inline void wait_throttle(Device& dev) {
  if (dev.throttle.load(std::memory_order_acquire)) {
    const int64_t until = now_ns() + kThrottleSpinNs;
    while (dev.throttle.load(std::memory_order_acquire) && now_ns() < until) __builtin_ia32_pause();
  }
  while (dev.throttle.load(std::memory_order_acquire)) dev.throttle.wait(1, std::memory_order_acquire);
}

inline void raise_throttle(Device& dev) {
  dev.throttle.store(1, std::memory_order_release);
  wake_monitor();  // the monitor may be asleep: it clears it
}

}  // namespace cuslice::activity
