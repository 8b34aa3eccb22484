// What the process has queued on each GPU, so that the scheduler's token is held only while
// it is needed and handed on quickly.
//
// The launch path marks the stream it launched on (note_launch, launched: a few loads and
// stores). A monitor thread, one per process, started when the process joins a tenant, then:
//   - records an event on each stream launched on since its last look, and queries the
//     events it recorded: when every one has completed and nothing new was launched, the
//     process's queued work has drained: it reports the GPU time it was busy and gives the
//     token back (client::token_release), so a holder with nothing to run frees the GPU
//     early and a revoked holder is known to have drained;
//   - bounds the queued work: beside other tenants each launch is remembered with an
//     estimate of its GPU time, learnt per kernel (function and launch shape, or graph) from
//     how long the batches the monitor sees complete took, and a launch waits while the
//     estimated time in flight reaches CUSLICE_MAX_QUEUED (two launches are always allowed:
//     one running, one queued behind it, so the GPU does not idle). The token therefore
//     changes hands within about that time plus one kernel, not after seconds of queued
//     kernels. Beside a tenant of higher priority, which takes the GPU without waiting for
//     this one to drain, the bound is CUSLICE_PREEMPT_QUEUED (at least one launch), the
//     monitor records after every launch and polls every 10 us, so that the launches
//     allowed are refilled as each completes;
//   - keeps the token through short pauses: drained, the process keeps it for 500 us in case
//     it launches again (a synchronisation between steps), then gives it back.
// Events, not per-launch synchronisation; the launching threads never call the driver for it.
//
// Stream capture: a capturing stream runs nothing: it is neither gated nor marked, and while
// any capture is in progress the monitor makes no driver call: an event recorded on the
// legacy stream would join a global capture, and even querying a pending event from the
// monitor (a relaxed-mode thread) can invalidate the application's capture. Its records wait,
// and keep the device busy, until the capture ends.
//
// The implementation, one concept a file, each layer calling only those before it:
// monitor_state (constants, data, globals), monitor_driver (the driver functions it calls),
// gate_words (the pinned words gates and marks use), stream_slots (streams and their event
// records), kernel_estimates (learnt kernel times), queue_bound (the bound and the throttle),
// parking (gates, marks, the watchdog), thread_launches (launches counted per launching
// thread), monitor (the thread and its pass), activity.cpp (this header: the launch path's
// entry points, capture bookkeeping, start, exit and fork).
// Nothing outside those files includes their headers.
#pragma once

#include <atomic>
#include <cstdint>

#include "hook/base/cuda_api.h"

namespace cuslice::activity {

// Starts the monitor (once). Before start(), note_launch() does nothing.
void start();
bool running();

// Whether launches are bounded (another tenant is registered; monitor_state.h): only then
// does the launch path wait for room and name the kernel it launched (kernel_key()), so a
// process alone under the scheduler skips both.
bool bounded();
// Whether the process's launches go on without the token: below tenants of higher priority
// only, with every one of its channel groups running at the short time slice (read back from
// the kernel), and its tenant not capped. The GPU then switches to a higher tenant's work
// within that slice by itself, so holding this process's work back for the token would only
// idle the GPU in the higher tenant's pauses (docs/design/hook.md, "Time slices"). Neither bounded
// nor below a higher tenant then: the launch path is the lone one, without the token.
bool sliced();

// Before the token is acquired: waits while the process's queued work is too deep. Waiting
// here, not after acquiring, means no launch is forwarded after a revocation it slept
// through.
void wait_for_room(int device);
// Instead of wait_for_room and token_acquire, where it applies (below a higher-priority
// tenant, the gate words set up, no capture in progress, not a per-thread default stream):
// holds the launch back on the GPU when it must not run yet (the token is elsewhere, or the
// work let run fills the bound), behind a gate (cuStreamWaitValue32 on a word in pinned
// memory) that the monitor opens when the tenant has the token and there is room; the
// launching thread goes on. Waits on the CPU only past CUSLICE_PARK_QUEUED of work in flight.
// True: launch now. False: it does not apply (or the gate could not be put): use
// wait_for_room and token_acquire.
bool park(int device, int gpu, CUstream stream);
// After the token was acquired, before the launch is forwarded: takes a ticket (or, not
// bounded, counts the launch begun in the thread's own record), so the device is not drained
// until launched(). Pass what it returns to launched(); device -1: the launch
// is not tracked.
struct Noted {
  int device = -1;
  // Not bounded: counted in the thread's own record (thread_launches.h), its index + 1, not
  // by a ticket. (Sixteen bytes: returned in registers.)
  int record = 0;
  uint64_t ticket = 0;
};
Noted note_launch(int device);
// After the launch was forwarded (whatever the driver said): marks the stream, counts the
// launch, and beside other tenants remembers what it is expected to take. `kernel` names what
// was launched (kernel_key(): function and shape, or a graph), so that its duration is learnt;
// 0 when not bounded().
void launched(Noted noted, CUstream stream, uintptr_t kernel);

// A key for a kernel launch: the function and its launch shape (the same function on a
// different grid is a different duration).
inline uintptr_t kernel_key(const void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned shared) {
  const auto mix = [](uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001B3ull + (h >> 29); };
  uint64_t h = reinterpret_cast<uintptr_t>(function);
  h = mix(h, uint64_t{gx} | uint64_t{gy} << 32);
  h = mix(h, uint64_t{gz} | uint64_t{bx} << 32);
  h = mix(h, uint64_t{by} | uint64_t{bz} << 32);
  return static_cast<uintptr_t>(mix(h, shared));
}

// Capture bookkeeping, by the stream a capture began on; begin_capture() holds off the
// monitor while the driver starts it. While any capture is in progress the monitor makes no
// driver call at all (see pass() in monitor.cpp).
void begin_capture(CUstream stream);
void end_capture(CUstream stream);
bool capturing();

// Before a stream or a context is destroyed, or a device's primary context is reset: forget
// their streams, so the monitor never touches a handle the driver may hand out again.
void forget_stream(CUstream stream);
void forget_context(CUcontext ctx);
void forget_device(int device);

void after_fork_child();

}  // namespace cuslice::activity
