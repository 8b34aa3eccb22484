// The launch monitor's state (see activity.h for what the monitor does): the data model
// (stream slots, devices, learnt kernel times, the ring of launches, the launching threads'
// records) and the one structure that holds all of it, g_state, with each field's writer,
// readers and memory order. "Launching threads" are the application's threads in
// activity.h's entry points; "the monitor" is its thread (monitor.cpp), "the watchdog"
// parking.cpp's; "under the lock" is g_state.lock.
//
// g_state is zero-initialised, so it costs no room in the library's file and no memory until
// a table is used: a value whose "none" is not zero is stored plus one (DeviceIndex), and the
// bounds are 0 until start() sets them. A global instance, not a pointer: a field is reached
// at a fixed address, as a separate global would be.
//
// Owns data only: no function here calls the driver, the scheduler or another hook file; it
// may call log, the futex helpers and the clock. Every monitor file includes it; nothing else
// in hook/ does.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "hook/base/cuda_api.h"
#include "hook/base/settings.h"
#include "hook/monitor/monitor_driver.h"
#include "hook/monitor/monitor_tuning.h"
#include "protocol/clock.h"
#include "protocol/futex.h"

namespace cuslice::activity {

constexpr int kSlots = 256;        // streams tracked at once (a process uses few)
constexpr int kEventsPerSlot = 8;  // records in flight per stream
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
// Launching threads with a record of their own (thread_launches.h), and the devices a record
// counts on.
constexpr int kLaunchRecords = 128;
constexpr int kRecordDevices = 8;
constexpr int kCaptureOrigins = 64;

// A device index or none (-1), kept plus one so that zero is none.
class DeviceIndex {
 public:
  int load(std::memory_order order) const { return plus_one_.load(order) - 1; }
  void store(int device, std::memory_order order) { plus_one_.store(device + 1, order); }
  // Sets `device` if the index is still `expected` (-1: none).
  bool compare_exchange_strong(int expected, int device, std::memory_order order) {
    int want = expected + 1;
    return plus_one_.compare_exchange_strong(want, device + 1, order);
  }

 private:
  std::atomic<int> plus_one_{0};
};

// A stream launched on. Keyed by the stream handle, or for the context's default (legacy)
// stream by the context pointer with its low bit set: a default stream has no handle of its
// own, and the monitor reaches it as CU_STREAM_LEGACY in that context. Aligned to a cache line,
// so a launch's mark reads the key, device and dirty word from one line. The key is claimed
// (compare-exchange, acq_rel) by the first launching thread and cleared (release) by
// release_slot() under the lock.
struct alignas(64) Slot {
  std::atomic<uintptr_t> key{0};
  // Launched on since the monitor last recorded: set (seq_cst) by launching threads, cleared
  // (exchange, seq_cst) by the monitor before it records.
  std::atomic<uint32_t> dirty{0};
  // Written once by the first launch on the stream (ctx, then device with release: the
  // monitor uses a slot only once it reads its device), read by the monitor.
  CUcontext ctx = nullptr;
  DeviceIndex device;
  // Monitor only:
  CUevent events[kEventsPerSlot] = {};
  uint64_t launches_at[kEventsPerSlot] = {};  // the device's launch count when recorded
  int head = 0, count = 0;  // ring of outstanding records, oldest at head
  // Parking: gate k (1, 2, ...) is a wait on the stream until the slot's gate word (pinned
  // host memory) reaches k, put before a launch that must not run yet; the monitor raises
  // the word. The word only grows, across streams that reuse the slot, so a gate never
  // reopens wrongly. Segments between gates are bounded in estimated time, so the monitor
  // lets the GPU run a bounded amount at a time. Written by launching threads under
  // `inserting` (gates with release, after gate_at and gate_launched); read by the monitor.
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
  // gates). Written by launching threads under `inserting` (seq and marks last, release).
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

// A GPU the process launches on, aligned to a cache line (by its first member). The atomics
// are the launching threads' and the monitor's; the plain fields after them are the
// monitor's alone.
struct Device {
  // The process has work queued or running here: set (exchange, acq_rel) by the launch that
  // finds it idle, cleared (release) by the monitor once drained.
  alignas(64) std::atomic<uint32_t> busy{0};
  // Launches wait while set (queue too deep): set by the monitor or by a launching thread that
  // finds no room (release), cleared and woken by the monitor.
  std::atomic<uint32_t> throttle{0};
  // Parking launches wait while set (CUSLICE_PARK_QUEUED): set by the launching thread,
  // cleared and woken by the monitor (release_cap).
  std::atomic<uint32_t> cap{0};
  // Launches forwarded, and how many of them the monitor has seen complete: a burst of
  // launches is queued long before any event records it, so the bound is also a count.
  // launched: added (seq_cst) by launching threads and by the monitor's fold; completed:
  // raised (release) by the monitor only.
  std::atomic<uint64_t> launched{0};
  std::atomic<uint64_t> completed{0};
  // Launches begun (note_launch, before the driver has them): tickets - launched are under
  // way, and the device is not drained while any is. A ticket is also the launch's place in
  // the ring. Added (seq_cst) like launched.
  std::atomic<uint64_t> tickets{0};
  // Estimated GPU time of the launches in flight, as two running sums: what launches added
  // (seq_cst), and what the monitor took off as they completed (release; queued(): the
  // difference). And the mean kernel time (the monitor's, relaxed), the estimate of a kernel
  // not yet measured (0: unknown, nothing is bounded).
  std::atomic<int64_t> added_ns{0};
  std::atomic<int64_t> retired_ns{0};
  std::atomic<uint32_t> mean_ns{0};
  // The busy interval not yet reported to the scheduler, and the running sums the mean kernel
  // time comes from.
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
// The key is claimed (compare-exchange, acq_rel) by launching threads; ns is written by the
// monitor and read by launching threads (relaxed: an estimate).
struct KernelTime {
  std::atomic<uintptr_t> key{0};
  std::atomic<uint32_t> ns{0};
};

// One launch: which kernel (its slot + 1; 0: none), what it was estimated at, when it was
// submitted, and its index + 1 (`seq`, written last with release: an entry is this launch's
// only if it matches; launches made while nothing was bounded have none). Written by the
// launching thread, read by the monitor.
struct Launch {
  std::atomic<uint32_t> kernel{0};
  std::atomic<uint32_t> est_ns{0};
  std::atomic<int64_t> at{0};
  std::atomic<uint64_t> seq{0};
};

// A launching thread's counts (thread_launches.h): claimed (owner, compare-exchange) by a
// thread at its first launch counted so, given back (release) when it exits.
struct alignas(64) LaunchRecord {
  std::atomic<uint32_t> owner{0};  // claimed by a live thread
  // Written by the owner only (release), so a load and a store, not a locked add; read
  // (acquire) by the monitor's fold. A device's two counts side by side: a launch writes one
  // cache line of its record.
  struct Counts {
    std::atomic<uint64_t> begun{0};
    std::atomic<uint64_t> done{0};
  } on[kRecordDevices];
};

// What the monitor found on a device's streams in one pass (the pass's own, not kept).
struct Look {
  bool pending = false;     // runnable work not seen complete, or a launch not yet recorded
  bool parked = false;      // work held back behind a closed gate
  int64_t runnable = 0;     // estimated time let run and not seen complete
  bool progressed = false;  // some record completed
  bool marking = false;     // marks are being put: completions are seen by loads
};

// What the monitor and the slow paths did, logged at exit at debug level: where a launch's
// cost below a higher-priority tenant goes (driver calls of the monitor's, gates, waits).
// The monitor's counts and the launching threads' are on separate cache lines, so that the
// monitor's writes do not take the line from a thread about to hold a launch back.
struct Counts {
  alignas(64) uint64_t passes = 0, tight_polls = 0, records = 0, queries = 0;  // monitor, under the lock
  alignas(64) std::atomic<uint64_t> gates{0}, held{0}, cap_waits{0}, cpu_waits{0}, marks{0};  // relaxed
  alignas(64) std::atomic<uint64_t> unstuck{0};  // the watchdog's (see watchdog())
  uint64_t stalls = 0;                            // monitor: held back work let run as stalled
};

// How far the gate words are set up (setup_gates() in parking.cpp); kGateUnavailable:
// launches wait on the CPU instead.
enum : int { kGateUnset, kGateSettingUp, kGateReady, kGateUnavailable };

struct MonitorState {
  // ---- Read on every launch, written seldom: one cache line.
  // The monitor runs: stored (release) once by start(), cleared (relaxed) in a fork child;
  // loaded (relaxed) first on every launch, (acquire) by running().
  alignas(64) std::atomic<bool> running{};
  // The process exits: stored (release) by the exit handler; loaded (acquire) by the monitor's
  // and the watchdog's loops and by let_held_work_run, (relaxed) by park().
  std::atomic<bool> stop{};
  // Who else is registered, refreshed by the monitor every kNeighboursNs (look_at_neighbours;
  // relaxed, `sliced` seq_cst after the others when it turns on). others: another tenant:
  // launches are bounded; higher: one of higher priority: the tighter bound, parking; sliced:
  // launched without the token (activity.h, sliced()); capped: the tenant's GPU time is
  // limited (the daemon counts it closely, alone too; the monitor's only). Loaded (relaxed) by
  // launching threads and the monitor.
  std::atomic<bool> others{};
  std::atomic<bool> higher{};
  std::atomic<bool> sliced{};
  std::atomic<bool> capped{};
  // Captures in progress: added and taken off (acq_rel) by the capturing threads
  // (begin_capture under the lock); loaded (relaxed) by launching threads, (acquire) by the
  // monitor, which makes no driver call while any is.
  std::atomic<int> captures{};
  // kGate*: moved on (compare-exchange, release) by the launching thread that sets the words
  // up and by retire_gates() under the lock; loaded (acquire) by launching threads (parking()).
  std::atomic<int> gate_state{};
  // The bounds, from the settings at start() (written once before `running`, read by every
  // thread after it): CUSLICE_MAX_QUEUED, CUSLICE_PREEMPT_QUEUED (the bound while a
  // higher-priority tenant exists) and CUSLICE_PARK_QUEUED (0: no parking).
  int64_t max_queued_ns{};
  int64_t higher_queued_ns{};
  int64_t park_cap_ns{};
  // The gate words (gate_words.h), three per slot in host memory the GPU reads and writes, and
  // their address on the GPU: mapped once (never unmapped) and registered by the launching
  // thread that sets them up, before gate_state is kGateReady (release); read after it.
  std::atomic<uint32_t>* gate_words{};
  CUdeviceptr gate_dptr{};

  // ---- Bumped (release) by a launch that makes a device busy, and by anyone who wants the
  // monitor to look now (wake_monitor()); the monitor's futex word.
  alignas(64) std::atomic<uint32_t> wake{};

  // ---- The monitor's.
  // Held by the monitor's pass, against capture starts and the forgetting of streams,
  // contexts and devices (launching threads), and by the exit handler.
  alignas(64) std::mutex lock;
  // When the monitor's current pass began (0: none under way): stored (release) by the
  // monitor, loaded (acquire) by the watchdog.
  std::atomic<int64_t> pass_began{};
  // The context current on the monitor thread (under the lock): set only when it changes, as
  // a process mostly has one, and each set is a driver call competing with the launching
  // thread. nullptr: set it again at the next use.
  CUcontext monitor_ctx{};
  uint32_t slice_logged{};  // the time slice the debug log last reported (monitor only)
  // The context the gate words are registered in, and its device: written by the launching
  // thread that registers them; cleared under the lock when that context or device goes.
  CUcontext gate_ctx{};
  DeviceIndex gate_device;
  // The watchdog runs: exchanged (acq_rel) by the first set-up of the gate words.
  std::atomic<bool> watchdog_started{};
  // start()'s once (pthread_once).
  pthread_once_t started = PTHREAD_ONCE_INIT;
  // What the monitor has folded of the launch records so far, per device (monitor only;
  // atomic so that the count logged at exit may read them), and how many records were ever
  // claimed (raised, release, by claiming threads; loaded, acquire, by the monitor).
  std::atomic<int> records_used{};
  std::atomic<uint64_t> folded_begun[kRecordDevices]{};
  std::atomic<uint64_t> folded_done[kRecordDevices]{};

  // ---- The streams captures began on (0: free), so that destroying one ends its capture's
  // count: claimed and freed (compare-exchange, acq_rel) by the capturing threads.
  alignas(64) std::atomic<uintptr_t> capture_origins[kCaptureOrigins]{};

  // ---- The driver functions the monitor calls (monitor_driver.h): written once by start(),
  // before `running`; read by the monitor and launching threads after it.
  alignas(64) MonitorDriver drv{};

  Counts counts;

  // ---- The tables (each type says who writes which field).
  Slot slots[kSlots];
  Device devices[kMaxDevices];
  KernelTime kernels[kKernelSlots];
  Launch ring[kMaxDevices][kRing];
  LaunchRecord records[kLaunchRecords];
};

extern MonitorState g_state;

// Per launching thread (a thread-local cannot be a member). Initial-exec: the hook is
// preloaded, so its thread-locals are in the static TLS block and reading one is one load.
// The thread's launch record, as its index + 1 (0: none claimed), and whether it tried to
// claim one (thread_launches.cpp).
extern __attribute__((tls_model("initial-exec"))) constinit thread_local int t_record;
extern __attribute__((tls_model("initial-exec"))) constinit thread_local bool t_record_tried;
// The created stream this thread found the slot of last, and that slot (stream_slots.cpp;
// checked at each use: the slot is the stream's while its key and device are).
extern __attribute__((tls_model("initial-exec"))) constinit thread_local uintptr_t t_last_key;
extern __attribute__((tls_model("initial-exec"))) constinit thread_local Slot* t_last_slot;

// Wakes the monitor now (it may be asleep until its next poll).
inline void wake_monitor() {
  g_state.wake.fetch_add(1, std::memory_order_release);
  futex_wake_all(&g_state.wake);
}

}  // namespace cuslice::activity
