// The launch monitor's shared state (see activity.h for what the monitor does): its tuning
// constants, the data model (stream slots, devices, learnt kernel times, the ring of launches)
// and the globals the launching threads, the monitor thread and the watchdog share.
//
// Owns data only: no function here calls the driver, the scheduler or another hook file; it
// may call log, the futex helpers and the clock. Everything in the monitor's files (gate_words,
// monitor_driver, stream_slots, kernel_estimates, queue_bound, parking, monitor, activity.cpp)
// includes it; nothing else in hook/ does.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "hook/base/cuda_api.h"
#include "hook/base/settings.h"
#include "protocol/clock.h"
#include "protocol/futex.h"

namespace cuslice::activity {

constexpr int kSlots = 256;         // streams tracked at once (a process uses few)
constexpr int kEventsPerSlot = 8;   // records in flight per stream
constexpr int64_t kBusyPollNs = 100'000;      // look again this soon while work is queued
constexpr int64_t kDrainPollNs = 10'000;      // ... and this soon while revoked: others wait
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
constexpr int64_t kSettlePollNs = 100'000;
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
constexpr int64_t kNeighboursNs = 50'000'000; // how often to look who else is registered
constexpr int64_t kIdleWaitNs = 100'000'000;  // ... and at least this often when idle
constexpr int64_t kReportNs = 1'000'000;      // report GPU time at least this often when busy
// A process that drained but launches again within this keeps the token: synchronising
// between steps must not hand the GPU over (and back) every step. Not when a lower-priority
// tenant waits: this process would preempt it again anyway.
constexpr int64_t kReleaseGraceNs = 500'000;
// Launches in flight the bound always allows: one running and one queued behind it, so the
// GPU never waits for the monitor to notice a completion; only one where a tenant of higher
// priority may arrive and must not wait for two kernels.
constexpr uint64_t kMinInFlight = 2;
constexpr uint64_t kMinInFlightBelowHigher = 1;
// Kernels whose duration is learnt (by function and launch shape, or by graph), and the
// launches each device remembers (what each was estimated at, when it was submitted): the
// bound is the estimated time of the launches in flight, so a few long kernels are a deep
// queue and many short ones a shallow one. More launches in flight than half the ring: deep.
constexpr int kKernelSlots = 4096;
constexpr int kKernelProbes = 16;
constexpr uint64_t kRing = 512;
// Gate positions each stream remembers (gates not yet opened beyond this: the last segment
// grows instead).
constexpr uint32_t kGates = 64;
// Marks each stream remembers (see Slot::marks).
constexpr uint32_t kMarks = 16;
// Held back work that has stalled this long, with the token and nothing completing, is let
// run in full: what is let run may wait for it (a kernel spinning on a flag another stream
// sets, a wait on an event recorded after a gate) and the bound must not deadlock the app.
// Counted only over passes that hold the token and find held back work: time while the token
// is elsewhere, or while nothing is held, is no stall (docs/benchmarks.md: the stall clock).
constexpr int64_t kGateStallNs = 20'000'000;
// What a launch counts for in its stream's segments before any kernel time is known, so that
// gates still let work run in bounded steps (a guess: many kernels of a training step).
constexpr uint32_t kUnknownKernelNs = 50'000;
// A pass this long is stuck in the driver (see watchdog() in parking.cpp).
constexpr int64_t kStuckNs = 10'000'000;

// A stream launched on. Keyed by the stream handle, or for the context's default (legacy)
// stream by the context pointer with its low bit set: a default stream has no handle of its
// own, and the monitor reaches it as CU_STREAM_LEGACY in that context. Aligned to a cache line,
// so a launch's mark reads the key, device and dirty word from one line.
struct alignas(64) Slot {
  std::atomic<uintptr_t> key{0};
  std::atomic<uint32_t> dirty{0};  // launched on since the monitor last recorded
  // Written once by the first launch on the stream (ctx, then device with release: the
  // monitor uses a slot only once it reads its device), read by the monitor.
  CUcontext ctx = nullptr;
  std::atomic<int> device{-1};
  // Monitor only:
  CUevent events[kEventsPerSlot] = {};
  uint64_t launches_at[kEventsPerSlot] = {};  // the device's launch count when recorded
  int head = 0, count = 0;  // ring of outstanding records, oldest at head
  // Parking: gate k (1, 2, ...) is a wait on the stream until the slot's gate word (pinned
  // host memory) reaches k, put before a launch that must not run yet; the monitor raises
  // the word. The word only grows, across streams that reuse the slot, so a gate never
  // reopens wrongly. Segments between gates are bounded in estimated time, so the monitor
  // lets the GPU run a bounded amount at a time.
  std::atomic<uint32_t> gates{0};      // the last gate put on the stream
  std::atomic<uint32_t> inserting{0};  // a launching thread is putting a gate on it
  std::atomic<int64_t> enq_ns{0};      // estimated time launched on the stream, a running sum
  std::atomic<int64_t> gate_at[kGates] = {};  // enq_ns where gate k stands (index k % kGates)
  std::atomic<uint64_t> gate_launched[kGates] = {};  // the device's launch count at gate k
  // Marks, while parking: before a launch let run, once the estimated work launched on the
  // stream since the last mark reaches a segment, the launching thread puts a write of the
  // mark's number to the slot's mark word (one stream memory operation; it holds the driver
  // anyway). The GPU writes it when the work before it is done, and the monitor sees that
  // with a load: no record, no driver call of its own, which would wait for the lock the
  // launching thread holds nearly all the time, and so see launches complete late and take a
  // shallow queue for a deep one. Numbers only grow, across streams that reuse the slot (as
  // gates).
  struct Mark {
    std::atomic<uint32_t> seq{0};  // the mark's number, written last
    std::atomic<int64_t> enq{0};   // enq_ns at the mark
    std::atomic<uint64_t> launched{0};
  };
  std::atomic<uint32_t> marks{0};  // the last mark put
  int64_t mark_enq = 0;            // enq_ns at it (launching threads, under `inserting`)
  Mark mark_ring[kMarks];
  // Monitor only: enq_ns covered by records seen complete, and per record what it covers;
  // the last mark seen reached, and the marks put at the last pass.
  int64_t done_ns = 0;
  int64_t rec_enq[kEventsPerSlot] = {};
  uint32_t rec_gates[kEventsPerSlot] = {};
  uint32_t marks_seen = 0;
  uint32_t marks_last_pass = 0;
};

struct alignas(64) Device {
  std::atomic<uint32_t> busy{0};      // the process has work queued or running here
  std::atomic<uint32_t> throttle{0};  // launches wait while set (queue too deep)
  std::atomic<uint32_t> cap{0};       // parking launches wait while set (CUSLICE_PARK_QUEUED)
  // Launches forwarded, and how many of them the monitor has seen complete: a burst of
  // launches is queued long before any event records it, so the bound is also a count:
  // at most `allowed` in flight, from the measured mean kernel time (UINT64_MAX: unknown).
  std::atomic<uint64_t> launched{0};
  std::atomic<uint64_t> completed{0};
  // Launches begun (note_launch, before the driver has them): tickets - launched are under
  // way, and the device is not drained while any is. A ticket is also the launch's place in
  // the ring.
  std::atomic<uint64_t> tickets{0};
  // Estimated GPU time of the launches in flight, as two running sums: what launches added,
  // and what the monitor took off as they completed (queued(): the difference). And the mean
  // kernel time, the estimate of a kernel not yet measured (0: unknown, nothing is bounded).
  std::atomic<int64_t> added_ns{0};
  std::atomic<int64_t> retired_ns{0};
  std::atomic<uint32_t> mean_ns{0};
  // Monitor only: the busy interval not yet reported to the scheduler, and the running sums
  // the mean kernel time comes from.
  bool tracking = false;
  int64_t busy_since = 0;
  int64_t drained_since = 0;  // 0: work pending
  double busy_ns = 0, busy_launches = 0;
  uint64_t completed_accounted = 0;
  // Time with launches in flight, sampled at each pass: the mean kernel time is this per
  // completed launch. Not the busy interval: that also holds the application's own pauses
  // between launches, which would make kernels look longer, the bound a smaller count, and
  // so the pauses longer.
  int64_t in_flight_ns = 0;
  int64_t last_look = 0;
  bool had_in_flight = false;
  // Busy time reported since a launch was last seen complete, and whether it counts toward
  // the launches that complete later (records were held off meanwhile: kernel_estimates.cpp).
  int64_t busy_unlearnt_ns = 0;
  bool carry_unlearnt = false;
  // The launch count at the last pass, and whether that pass held off its records because
  // launches kept coming.
  uint64_t launched_last_pass = 0;
  bool records_held = false;
  // Learning kernel times: launches up to `learnt` are accounted for; the last of them was
  // seen complete at `learnt_at`. Disturbed: the token was elsewhere meanwhile, so the time
  // the launches since took is partly another tenant's.
  uint64_t learnt = 0;
  int64_t learnt_at = 0;
  bool disturbed = false;
  uint64_t retired = 0;  // launches whose estimate is off added_ns - retired_ns
  int64_t last_stuck_log = 0;
  int64_t tracked_since = 0;  // busy without a drain since
  // Held back work, the token, and nothing completing: for how long, counted over consecutive
  // passes that found held back work, and only while holding the token (the GPU runs the other
  // tenant meanwhile). `stall_last`: the last such pass (0: the count is paused or reset).
  int64_t stalled_ns = 0;
  int64_t stall_last = 0;

  int64_t queued() const {
    const int64_t q = added_ns.load(std::memory_order_acquire) - retired_ns.load(std::memory_order_acquire);
    return q > 0 ? q : 0;
  }
};

// A kernel's learnt duration (0: not measured yet). Keyed by a mix of function and launch
// shape (kernel_key), so one function run on differently sized problems is several entries.
struct KernelTime {
  std::atomic<uintptr_t> key{0};
  std::atomic<uint32_t> ns{0};
};

// One launch: which kernel (its slot + 1; 0: none), what it was estimated at, when it was
// submitted, and its index + 1 (`seq`, written last: an entry is this launch's only if it
// matches; launches made while nothing was bounded have none). Zero-initialised: the rings
// cost nothing until a device is used.
struct Launch {
  std::atomic<uint32_t> kernel{0};
  std::atomic<uint32_t> est_ns{0};
  std::atomic<int64_t> at{0};
  std::atomic<uint64_t> seq{0};
};

// What the monitor found on a device's streams in one pass.
struct Look {
  bool pending = false;   // runnable work not seen complete, or a launch not yet recorded
  bool parked = false;    // work held back behind a closed gate
  int64_t runnable = 0;   // estimated time let run and not seen complete
  bool progressed = false;  // some record completed
  bool marking = false;     // marks are being put: completions are seen by loads
};

// What the monitor and the slow paths did, logged at exit at debug level: where a launch's
// cost below a higher-priority tenant goes (driver calls of the monitor's, gates, waits).
// The monitor's counts and the launching threads' are on separate cache lines, so that the
// monitor's writes do not take the line from a thread about to hold a launch back.
struct Counts {
  alignas(64) uint64_t passes = 0, tight_polls = 0, records = 0, queries = 0;  // under g_monitor
  alignas(64) std::atomic<uint64_t> gates{0}, held{0}, cap_waits{0}, cpu_waits{0}, marks{0};
  alignas(64) std::atomic<uint64_t> unstuck{0};  // the watchdog's (see watchdog())
  uint64_t stalls = 0;                            // monitor: held back work let run as stalled
};

// Whether the queue bound matters: only when another tenant could need the GPU (alone, a
// tenant runs as fast as natively). Refreshed by the monitor every kNeighboursNs.
extern std::atomic<bool> g_others;
extern std::atomic<bool> g_higher;
// Preempted by its time slices, so launched without the token (activity.h, sliced()).
extern std::atomic<bool> g_sliced;
// The tenant's GPU time is capped (a `limit`): the daemon counts its time closely, alone too.
extern std::atomic<bool> g_capped;

extern Slot g_slots[kSlots];
extern Device g_devices[kMaxDevices];
extern KernelTime g_kernels[kKernelSlots];
extern Launch g_ring[kMaxDevices][kRing];
extern std::atomic<uint32_t> g_wake;  // bumped when a device goes from idle to busy
extern std::atomic<int> g_captures;
// The streams captures began on (0: free), so that destroying one ends its capture's count.
extern std::atomic<uintptr_t> g_capture_origins[64];
extern std::atomic<bool> g_running;
extern std::atomic<bool> g_stop;
extern std::mutex g_monitor;  // the monitor's pass vs. capture start and stream destruction
// The bounds, from the settings at start(): CUSLICE_MAX_QUEUED, CUSLICE_PREEMPT_QUEUED (the
// bound while a higher-priority tenant exists) and CUSLICE_PARK_QUEUED (0: no parking).
extern int64_t g_max_queued_ns;
extern int64_t g_preempt_queued_ns;
extern int64_t g_park_cap_ns;
extern Counts g_counts;
// When the monitor's current pass began (0: none under way), for the watchdog.
extern std::atomic<int64_t> g_pass_began;

// Wakes the monitor now (it may be asleep until its next poll).
inline void wake_monitor() {
  g_wake.fetch_add(1, std::memory_order_release);
  futex_wake_all(&g_wake);
}

}  // namespace cuslice::activity
