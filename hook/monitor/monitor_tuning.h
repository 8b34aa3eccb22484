// The launch monitor's tuning: how often it looks at the GPU, what the bound on queued work
// always allows, and when held back work counts as stalled. Constants only; the sizes of its
// tables are with the tables (monitor_state.h).
//
// Calls nothing; included by monitor_state.h only.
#pragma once

#include <cstdint>

namespace cuslice::activity {

constexpr int64_t kBusyPollNs = 100'000;  // look again this soon while work is queued
constexpr int64_t kDrainPollNs = 10'000;  // ... and this soon while revoked: others wait
// ... and this seldom while nobody waits for this process to drain (no other tenant, or only
// higher ones it does not hold the token against, and no cap): a look that records and
// queries an event on the streams launched on makes driver calls that contend with the
// launching thread for the context, and all they give then is the GPU time reported and the
// token given back a little later. A revocation is seen at the next look (the drain poll
// follows).
constexpr int64_t kUncontendedPollNs = 1'000'000;
// While launches keep coming there, alone and holding the token, a look makes no record on a
// device's streams: a launch since the last look already says the device is busy, and a
// record would contend with the launching thread for nothing. The look after they stop makes
// the records, and the next comes this soon, so the drain is seen as early as before.
constexpr int64_t kRecordsResumedPollNs = 100'000;
// ... and this soon while a higher-priority tenant is registered and work is held back behind
// gates (the GPU reaches the next gate within a segment), or, without parking, launches wait
// on the CPU for a bound of a few kernels and the monitor must see each complete at once or
// the GPU idles. (With the timer slack at 1 ns: the default 50 us slack would make every one
// of these polls 50 us late.)
constexpr int64_t kTightPollNs = 10'000;
// ... and this soon while a launching thread waits for room: it launches as soon as the
// monitor sees a launch complete.
constexpr int64_t kThrottledPollNs = 3'000;
// A launching thread that must wait for room spins this long before it sleeps: the monitor
// usually frees it within microseconds, and waking a sleeping thread costs tens of them.
constexpr int64_t kThrottleSpinNs = 50'000;
constexpr int64_t kNeighboursNs = 50'000'000;  // how often to look who else is registered
constexpr int64_t kIdleWaitNs = 100'000'000;   // ... and at least this often when idle
constexpr int64_t kReportNs = 1'000'000;       // report GPU time at least this often when busy
// A process that drained but launches again within this keeps the token: synchronising
// between steps must not hand the GPU over (and back) every step. Not when a lower-priority
// tenant waits: this process would take the GPU from it again anyway.
constexpr int64_t kReleaseGraceNs = 500'000;
// Launches in flight the bound always allows: one running and one queued behind it, so the
// GPU never waits for the monitor to notice a completion; only one where a tenant of higher
// priority may arrive and must not wait for two kernels.
constexpr uint64_t kMinInFlight = 2;
constexpr uint64_t kMinInFlightBelowHigher = 1;
// Held back work that has stalled this long, with the token and nothing completing, is let
// run in full: what is let run may wait for it (a kernel spinning on a flag another stream
// sets, a wait on an event recorded after a gate) and the bound must not deadlock the app.
// Counted only over passes that hold the token and find held back work: time while the token
// is elsewhere, or while nothing is held, is no stall (docs/evidence/benchmarks.md: the stall clock).
constexpr int64_t kGateStallNs = 20'000'000;
// What a launch counts for in its stream's segments before any kernel time is known, so that
// gates still let work run in bounded steps (a guess: many kernels of a training step).
constexpr uint32_t kUnknownKernelNs = 50'000;
// A pass this long is stuck in the driver (see watchdog() in parking.cpp).
constexpr int64_t kStuckNs = 10'000'000;
// How long a device may stay undrained while others wait before the debug log says why, and
// how often it says so again.
constexpr int64_t kNotDrainedLogNs = 200'000'000;

}  // namespace cuslice::activity
