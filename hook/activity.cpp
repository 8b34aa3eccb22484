#include "activity.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "client.h"
#include "driver.h"
#include "futex.h"
#include "log.h"
#include "scheduler_link.h"
#include "settings.h"

namespace cuslice::activity {
namespace {

constexpr int kSlots = 256;         // streams tracked at once (a process uses few)
constexpr int kEventsPerSlot = 8;   // records in flight per stream
constexpr int64_t kBusyPollNs = 100'000;      // look again this soon while work is queued
constexpr int64_t kDrainPollNs = 10'000;      // ... and this soon while revoked: others wait
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

// Whether the queue bound matters: only when another tenant could need the GPU (alone, a
// tenant runs as fast as natively). Refreshed by the monitor every kNeighboursNs.
std::atomic<bool> g_others{false};
std::atomic<bool> g_higher{false};

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// A stream launched on. Keyed by the stream handle, or for the context's default (legacy)
// stream by the context pointer with its low bit set: a default stream has no handle of its
// own, and the monitor reaches it as CU_STREAM_LEGACY in that context.
struct Slot {
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
  // with a load: no record, no driver call of its own, which waits for the lock the launching
  // thread holds nearly all the time (on the H100 it kept the monitor's looks 50-70 us apart,
  // and the launches it had not seen complete made 4 us kernels look deep). Numbers only
  // grow, across streams that reuse the slot (as gates).
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

Slot g_slots[kSlots];
Device g_devices[kMaxDevices];
KernelTime g_kernels[kKernelSlots];
Launch g_ring[kMaxDevices][kRing];
std::atomic<uint32_t> g_wake{0};      // bumped when a device goes from idle to busy
std::atomic<int> g_captures{0};
// The streams captures began on (0: free), so that destroying one ends its capture's count.
std::atomic<uintptr_t> g_capture_origins[64];
std::atomic<bool> g_running{false};
std::atomic<bool> g_stop{false};
std::mutex g_monitor;  // the monitor's pass vs. capture start and stream destruction
int64_t g_max_queued_ns = 500'000;
int64_t g_preempt_queued_ns = 250'000;  // the bound while a higher-priority tenant exists
int64_t g_park_cap_ns = 20'000'000;     // CUSLICE_PARK_QUEUED; 0: no parking

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
Counts g_counts;
// The gate words: per stream slot, in host memory the GPU reads (set up at the first launch
// that needs one; kGateUnavailable: launches wait on the CPU instead). The memory is the hook's
// own and never freed, pinned (registered) in the context current at set-up: pinned memory
// goes with the context it was pinned in, and an application may destroy that context (or
// reset a primary one: cudaDeviceReset) and go on, or release it before exit. The words must
// stay readable by the monitor and the launching threads whatever the application does; only
// the registration goes, and is made again in the next context that parks (kGateUnset).
enum : int { kGateUnset, kGateSettingUp, kGateReady, kGateUnavailable };
std::atomic<int> g_gate_state{kGateUnset};
std::atomic<uint32_t>* g_gate_words = nullptr;
CUdeviceptr g_gate_dptr = 0;
constexpr size_t kGateWordsBytes = sizeof(std::atomic<uint32_t>) * kSlots * 3;
CUcontext g_gate_ctx = nullptr;  // the context the words are registered in
int g_gate_device = -1;          // ... and its device
// When the monitor's current pass began (0: none under way), for the watchdog.
std::atomic<int64_t> g_pass_began{0};
std::atomic<bool> g_watchdog_started{false};

using EventCreate = CUresult (*)(CUevent*, unsigned int);
using EventRecord = CUresult (*)(CUevent, CUstream);
using EventQuery = CUresult (*)(CUevent);
using EventDestroy = CUresult (*)(CUevent);
using CtxSet = CUresult (*)(CUcontext);
using CtxGet = CUresult (*)(CUcontext*);
using IsCapturing = CUresult (*)(CUstream, CUstreamCaptureStatus*);
using ExchangeMode = CUresult (*)(CUstreamCaptureMode*);
using WaitValue = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WriteValue = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using HostRegister = CUresult (*)(void*, size_t, unsigned int);
using HostDevicePointer = CUresult (*)(CUdeviceptr*, void*, unsigned int);

struct Driver {
  EventCreate event_create;
  EventRecord event_record;
  EventQuery event_query;
  EventDestroy event_destroy;
  CtxSet ctx_set;
  CtxGet ctx_get;
  IsCapturing is_capturing;
  ExchangeMode exchange_mode;
  WaitValue wait_value;
  WriteValue write_value;
  HostRegister host_register;
  HostDevicePointer host_device_pointer;
} g_drv;

// Per slot, two words: the gate the GPU may pass (written by the monitor), and the last gate
// the GPU reached (written by the GPU just before it waits there: all work before it is done).
std::atomic<uint32_t>& gate_word(const Slot& s) { return g_gate_words[&s - g_slots]; }
std::atomic<uint32_t>& reached_word(const Slot& s) { return g_gate_words[kSlots + (&s - g_slots)]; }
// ... and a third: the last mark the GPU reached (written by the GPU after the work before it).
std::atomic<uint32_t>& mark_word(const Slot& s) { return g_gate_words[2 * kSlots + (&s - g_slots)]; }
// A word's address as the GPU sees it, for the stream memory operations.
CUdeviceptr gpu_address(const std::atomic<uint32_t>& word) {
  return g_gate_dptr + static_cast<CUdeviceptr>(&word - g_gate_words) * sizeof(uint32_t);
}
// Gate k is still closed: the word has not reached it (cyclic, as the GPU compares).
bool gate_closed(uint32_t word, uint32_t k) { return static_cast<int32_t>(word - k) < 0; }
// Opens every gate on the slot's stream.
void open_all(Slot& s) {
  if (g_gate_words != nullptr) gate_word(s).store(s.gates.load(std::memory_order_acquire), std::memory_order_release);
}

// The context the gate words are registered in is about to go (under g_monitor): work held
// back anywhere runs, and the next launch to park registers them again in its own context.
void retire_gates() {
  if (g_gate_state.load(std::memory_order_acquire) != kGateReady) return;
  for (Slot& s : g_slots) open_all(s);
  g_gate_state.store(kGateUnset, std::memory_order_release);
}

size_t hash_key(uintptr_t k) { return static_cast<size_t>((k >> 4) * 0x9E3779B97F4A7C15ull >> 56); }

Slot* find_or_add(uintptr_t key, bool add) {
  size_t i = hash_key(key);
  for (int probe = 0; probe < kSlots; ++probe, ++i) {
    Slot& s = g_slots[i % kSlots];
    uintptr_t cur = s.key.load(std::memory_order_acquire);
    if (cur == key) return &s;
    if (cur == 0) {
      if (!add) return nullptr;
      if (s.key.compare_exchange_strong(cur, key, std::memory_order_acq_rel)) return &s;
      if (cur == key) return &s;
    }
  }
  return nullptr;  // full: this stream is not tracked (drain is then judged without it)
}

// The default stream (legacy, or a thread's per-thread one): the monitor reaches both through
// CU_STREAM_LEGACY, which orders after every blocking stream's work (including per-thread
// default streams).
bool is_default(CUstream s) { return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD; }

// The context current on the monitor thread (under g_monitor): set only when it changes, as a
// process mostly has one, and each set is a driver call competing with the launching thread.
CUcontext g_monitor_ctx = nullptr;

bool use_ctx(CUcontext ctx) {
  if (ctx == nullptr || ctx == g_monitor_ctx) return true;
  if (g_drv.ctx_set(ctx) != CUDA_SUCCESS) {
    g_monitor_ctx = nullptr;
    return false;
  }
  g_monitor_ctx = ctx;
  return true;
}

// Records an event after the work queued on the slot's stream. Monitor thread, under
// g_monitor, never while a capture is in progress. False: nothing recorded, try again later
// (the ring is full: its oldest record has not finished).
bool record(Slot& s, uintptr_t key) {
  if (s.count == kEventsPerSlot) return false;
  if (!use_ctx(s.ctx)) return true;  // context gone
  const bool legacy = key & 1;
  CUstream stream = legacy ? CU_STREAM_LEGACY : reinterpret_cast<CUstream>(key);
  if (!legacy) {
    // Captured work runs nothing; there is nothing to wait for on this stream.
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (g_drv.is_capturing(stream, &st) != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE) return true;
  }
  const int at = (s.head + s.count) % kEventsPerSlot;
  if (s.events[at] == nullptr && g_drv.event_create(&s.events[at], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
    return false;
  const uint64_t launched = g_devices[s.device.load(std::memory_order_relaxed)].launched.load(std::memory_order_acquire);
  // Read before the record: what it is taken to cover errs short (runnable work, left long).
  const int64_t enq = s.enq_ns.load(std::memory_order_acquire);
  const uint32_t gates = s.gates.load(std::memory_order_acquire);
  if (g_drv.event_record(s.events[at], stream) != CUDA_SUCCESS) return true;  // stream gone
  g_counts.records++;
  s.launches_at[at] = launched;
  s.rec_enq[at] = enq;
  s.rec_gates[at] = gates;
  s.count++;
  return true;
}

// Raises the device's completed-launch count to `to` (records, marks and gates seen reached).
void raise_completed(int device, uint64_t to) {
  std::atomic<uint64_t>& completed = g_devices[device].completed;
  uint64_t cur = completed.load(std::memory_order_relaxed);
  while (to > cur && !completed.compare_exchange_weak(cur, to, std::memory_order_release)) {
  }
}

// Drops the records that completed (raising the device's completed-launch count to what
// they cover); true while some record is outstanding.
bool retire(Slot& s) {
  while (s.count > 0) {
    use_ctx(s.ctx);
    const CUresult r = g_drv.event_query(s.events[s.head]);
    g_counts.queries++;
    if (r == CUDA_ERROR_NOT_READY) return true;
    // Completed, or the stream went away under it: either way nothing waits there.
    raise_completed(s.device.load(std::memory_order_relaxed), s.launches_at[s.head]);
    s.done_ns = std::max(s.done_ns, s.rec_enq[s.head]);
    s.head = (s.head + 1) % kEventsPerSlot;
    s.count--;
  }
  return false;
}

void release_slot(Slot& s) {
  // Work held back on the stream runs: nothing would open its gates once the slot is free.
  // The gate count stays: the word only grows.
  open_all(s);
  for (auto& at : s.gate_at) at.store(-1, std::memory_order_relaxed);
  s.enq_ns.store(0, std::memory_order_relaxed);
  s.done_ns = 0;
  // Marks of the stream gone are not the next one's (their numbers go on growing).
  s.mark_enq = 0;
  s.marks_seen = s.marks_last_pass = s.marks.load(std::memory_order_acquire);
  for (CUevent& e : s.events) {
    if (e != nullptr && g_drv.event_destroy) g_drv.event_destroy(e);
    e = nullptr;
  }
  s.head = s.count = 0;
  s.ctx = nullptr;
  s.device.store(-1, std::memory_order_relaxed);
  s.dirty.store(0, std::memory_order_relaxed);
  s.key.store(0, std::memory_order_release);
}

// The slot of a kernel's learnt time, added if new; -1 when the table is full (the kernel is
// then estimated at the mean).
int kernel_slot(uintptr_t key) {
  size_t i = static_cast<size_t>(key * 0x9E3779B97F4A7C15ull >> 52);  // 12 bits: kKernelSlots
  for (int probe = 0; probe < kKernelProbes; ++probe, ++i) {
    KernelTime& k = g_kernels[i % kKernelSlots];
    uintptr_t cur = k.key.load(std::memory_order_acquire);
    if (cur == key) return static_cast<int>(i % kKernelSlots);
    if (cur == 0 && (k.key.compare_exchange_strong(cur, key, std::memory_order_acq_rel) || cur == key))
      return static_cast<int>(i % kKernelSlots);
  }
  return -1;
}

// What a launch of the kernel in slot + 1 is expected to take.
uint32_t estimate(uint32_t kernel, const Device& dev) {
  const uint32_t learnt = kernel != 0 ? g_kernels[kernel - 1].ns.load(std::memory_order_relaxed) : 0;
  return learnt != 0 ? learnt : dev.mean_ns.load(std::memory_order_relaxed);
}

// Learns from the launches completed since the last look: together they took from when the
// first could start (the previous ones complete, or its submission if later) to now, shared
// among them in proportion to their current estimates. Estimates that are right are a fixed
// point of this; a wrong one moves towards the truth whenever its kernel completes alone or
// beside kernels measured well. Completion is seen late, by up to a poll, so the previous
// ones are taken to have completed at the look before they were seen complete (`looked`):
// both ends err towards a longer time, and a kernel is overestimated by up to two polls,
// never under: an underestimated long kernel would let a second one queue behind it. Not
// while the token was elsewhere: the time is then partly another tenant's.
void learn(Device& dev, int device, int64_t now, int64_t looked, uint64_t completed) {
  if (completed <= dev.learnt) return;
  const uint64_t n = completed - dev.learnt;
  Launch* ring = g_ring[device];
  const auto mine = [&](uint64_t i) { return ring[i % kRing].seq.load(std::memory_order_acquire) == i + 1; };
  if (n <= kRing && !dev.disturbed && dev.learnt_at != 0 && mine(dev.learnt)) {
    const int64_t start = std::max(dev.learnt_at, ring[dev.learnt % kRing].at.load(std::memory_order_relaxed));
    const double took = static_cast<double>(now - start);
    // Shared by the estimates the launches were made with: fixed while the loop updates the
    // table (a kernel launched n times in the batch moves n times).
    const auto made_with = [&](uint64_t i) -> double {
      return mine(i) ? ring[i % kRing].est_ns.load(std::memory_order_relaxed) : dev.mean_ns.load(std::memory_order_relaxed);
    };
    double total = 0;
    for (uint64_t i = dev.learnt; i < completed; ++i) total += made_with(i);
    if (took > 0 && total > 0) {
      for (uint64_t i = dev.learnt; i < completed; ++i) {
        const uint32_t kernel = mine(i) ? ring[i % kRing].kernel.load(std::memory_order_relaxed) : 0;
        if (kernel == 0) continue;
        std::atomic<uint32_t>& ns = g_kernels[kernel - 1].ns;
        const double share = took * made_with(i) / total;
        const double old = ns.load(std::memory_order_relaxed);
        const double next = old == 0 ? share : old + (share - old) / 8;
        ns.store(static_cast<uint32_t>(std::clamp(next, 1.0, 4e9)), std::memory_order_relaxed);
      }
    }
  }
  dev.learnt = completed;
  dev.learnt_at = looked != 0 ? looked : now;
  dev.disturbed = false;
}

// Takes the estimates of the launches completed since the last pass off the queued time. A
// launch adds its estimate before it marks its entry, so an entry that is marked is counted.
// (One that is not is skipped: made while nothing was bounded, or, rarely, by threads that
// launched at once and swapped places; the drain squares the sums.)
void retire_estimates(Device& dev, int device, uint64_t completed) {
  if (completed - dev.retired > kRing) dev.retired = completed - kRing;
  int64_t sum = 0;
  for (uint64_t i = dev.retired; i < completed; ++i) {
    const Launch& l = g_ring[device][i % kRing];
    if (l.seq.load(std::memory_order_acquire) == i + 1) sum += l.est_ns.load(std::memory_order_relaxed);
  }
  dev.retired = completed;
  if (sum != 0) dev.retired_ns.fetch_add(sum, std::memory_order_release);
}

// Whether a launch must wait: as much estimated work in flight as the bound holds (and more
// than the launches always allowed), or more launches than the ring remembers.
bool too_deep(const Device& dev, uint64_t in_flight, int64_t queued) {
  const bool higher = g_higher.load(std::memory_order_relaxed);
  if (in_flight < (higher ? kMinInFlightBelowHigher : kMinInFlight)) return false;
  if (in_flight >= kRing / 2) return true;
  return dev.mean_ns.load(std::memory_order_relaxed) != 0 &&
         queued >= (higher ? g_preempt_queued_ns : g_max_queued_ns);
}

// The bound on runnable work (estimated time) and the segment a gate closes.
int64_t bound_ns() { return g_higher.load(std::memory_order_relaxed) ? g_preempt_queued_ns : g_max_queued_ns; }
int64_t segment_ns() { return bound_ns() / 2; }

// Whether launches are held back on the GPU rather than waiting on the CPU (below a
// higher-priority tenant, with the gate words set up).
bool parking() {
  return g_park_cap_ns > 0 && g_higher.load(std::memory_order_relaxed) &&
         g_gate_state.load(std::memory_order_acquire) == kGateReady;
}

// Parking's own cap: launches wait on the CPU only past this much held back or in flight.
bool over_cap(const Device& dev) {
  return dev.launched.load(std::memory_order_acquire) - dev.completed.load(std::memory_order_acquire) >= kRing / 2 ||
         dev.queued() >= g_park_cap_ns;
}

// Lets launching threads waiting at the parking cap go once the work in flight is below it.
void release_cap(Device& dev) {
  if (!dev.cap.load(std::memory_order_acquire)) return;
  if (dev.busy.load(std::memory_order_acquire) && over_cap(dev)) return;
  dev.cap.store(0, std::memory_order_release);
  dev.cap.notify_all();
}

// What the monitor found on a device's streams in one pass.
struct Look {
  bool pending = false;   // runnable work not seen complete, or a launch not yet recorded
  bool parked = false;    // work held back behind a closed gate
  int64_t runnable = 0;   // estimated time let run and not seen complete
  bool progressed = false;  // some record completed
  bool marking = false;     // marks are being put: completions are seen by loads
};

// Held back work that has stalled this long, with the token and nothing completing, is let
// run in full: what is let run may wait for it (a kernel spinning on a flag another stream
// sets, a wait on an event recorded after a gate) and the bound must not deadlock the app.
// Counted only over passes that hold the token and find held back work: the clock once ran on
// while the token was elsewhere and while nothing was held, and every first pass with held
// work after such a time found it "stalled" and let all of it run (seen on the H100).
constexpr int64_t kGateStallNs = 20'000'000;
// What a launch counts for in its stream's segments before any kernel time is known, so that
// gates still let work run in bounded steps (a guess: many kernels of a training step).
constexpr uint32_t kUnknownKernelNs = 50'000;

// Opens the gates of the device's streams while the work let run stays within the bound,
// and on each stream while fewer than `min_ahead` of its segments are let run and not seen
// complete (so the GPU does not wait for the next pass; and per stream, so that a stream
// whose work waits for another's held back work cannot stop that one from being let run);
// everything when the bound does not apply. Under g_monitor. True when it opened some.
bool open_gates(int device, Look& look, bool everything) {
  bool opened = false;
  const int64_t bound = bound_ns();
  const int min_ahead = g_higher.load(std::memory_order_relaxed) ? 1 : 2;
  for (Slot& s : g_slots) {
    if (s.key.load(std::memory_order_acquire) == 0 || s.device.load(std::memory_order_acquire) != device) continue;
    if (everything) {
      opened |= gate_closed(gate_word(s).load(std::memory_order_relaxed), s.gates.load(std::memory_order_acquire));
      open_all(s);
      continue;
    }
    std::atomic<uint32_t>& word = gate_word(s);
    const uint32_t gates = s.gates.load(std::memory_order_acquire);
    uint32_t w = word.load(std::memory_order_relaxed);
    const uint32_t from = w;
    int ahead = 0;
    for (uint32_t j = w; j != 0 && gates - j < kGates - 1 && ahead < min_ahead; --j, ++ahead)
      if (s.gate_at[j % kGates].load(std::memory_order_relaxed) < s.done_ns) break;
    // Work let run before the first closed gate and not seen complete is a segment ahead.
    if (ahead == 0 && gate_closed(w, gates) &&
        s.gate_at[(w + 1) % kGates].load(std::memory_order_relaxed) > s.done_ns)
      ahead = 1;
    while (gate_closed(w, gates)) {
      const uint32_t next = w + 1;
      const int64_t end = next == gates ? s.enq_ns.load(std::memory_order_acquire)
                                        : s.gate_at[(next + 1) % kGates].load(std::memory_order_relaxed);
      const int64_t len = std::max<int64_t>(0, end - s.gate_at[next % kGates].load(std::memory_order_relaxed));
      if (look.runnable + len > bound && ahead >= min_ahead) break;
      look.runnable += len;
      ahead++;
      w = next;
    }
    if (w != from) {
      word.store(w, std::memory_order_release);
      opened = true;
    }
    if (gate_closed(w, gates)) look.parked = true;
  }
  return opened;
}

// Reports the busy interval ending now, and refines the mean kernel time (time with launches
// in flight per completed launch, decaying): the estimate of kernels not measured yet.
void account(Device& dev, int gpu, int64_t now, uint64_t completed) {
  const int64_t busy = now - dev.busy_since;
  client::report_gpu_time(gpu, static_cast<uint64_t>(busy));
  const uint64_t done = completed - dev.completed_accounted;
  dev.completed_accounted = completed;
  const int64_t in_flight = dev.in_flight_ns;
  dev.in_flight_ns = 0;
  if (done == 0) return;
  constexpr double kDecay = 0.9;
  dev.busy_ns = dev.busy_ns * kDecay + static_cast<double>(in_flight > 0 ? in_flight : busy);
  dev.busy_launches = dev.busy_launches * kDecay + static_cast<double>(done);
  const double mean = dev.busy_ns / dev.busy_launches;
  dev.mean_ns.store(static_cast<uint32_t>(std::clamp(mean, 1.0, 4e9)), std::memory_order_relaxed);
}

// One pass over every tracked stream. Returns true while any device is busy; revoked: a
// busy device's token was taken back (its drain is awaited: look again soon); throttled: a
// launch waits for room on the CPU; held: work is held back behind a gate.
bool pass(bool& revoked, bool& throttled, bool& held) {
  const int64_t now = now_ns();
  bool any_busy = false;
  Look looks[kMaxDevices];
  // Launches counted before the streams are looked at: each is either covered by a record or
  // still marks its stream, so once nothing is pending they have all completed.
  uint64_t launched_before[kMaxDevices];
  for (int d = 0; d < kMaxDevices; ++d) launched_before[d] = g_devices[d].launched.load(std::memory_order_acquire);
  {
    std::lock_guard<std::mutex> lock(g_monitor);
    g_pass_began.store(now, std::memory_order_release);
    g_counts.passes++;
    // While a capture is in progress the monitor calls the driver for nothing: recording on
    // the legacy stream would join a global capture, and on the H100 even a cuEventQuery of a
    // pending record, from this relaxed-mode thread, invalidated PyTorch's captures
    // (tests/gpu/capture_stress.sh). A record outstanding then keeps the device busy.
    const bool quiet = g_captures.load(std::memory_order_acquire) != 0;
    for (Slot& s : g_slots) {
      const uintptr_t key = s.key.load(std::memory_order_acquire);
      const int device = s.device.load(std::memory_order_acquire);
      if (key == 0 || device < 0) continue;
      // Marks put since the last pass: the launching thread is at it, and they will show its
      // work done; the monitor records only once they stop (the stream stays marked dirty, so
      // busy, meanwhile).
      const uint32_t marks = s.marks.load(std::memory_order_acquire);
      const bool marking = marks != s.marks_last_pass;
      s.marks_last_pass = marks;
      // Clear first: a launch after this point marks the stream again.
      if (!quiet && !marking && s.dirty.exchange(0, std::memory_order_seq_cst) && !record(s, key))
        s.dirty.store(1, std::memory_order_release);
      const int64_t done_before = s.done_ns;
      const int64_t enq = s.enq_ns.load(std::memory_order_seq_cst);  // before the records are looked at
      const bool outstanding = quiet ? s.count > 0 : retire(s);
      // Nothing outstanding and nothing new: all that was launched here is done (a record
      // covers a little more than the estimate read before it, so done_ns alone would lag
      // behind, and the bound would count work that is not there).
      if (!quiet && !outstanding && !s.dirty.load(std::memory_order_acquire)) s.done_ns = std::max(s.done_ns, enq);
      Look& look = looks[device];
      if (s.done_ns != done_before) look.progressed = true;
      if (g_gate_words == nullptr) {
        if (outstanding || s.dirty.load(std::memory_order_acquire)) look.pending = true;
        continue;
      }
      // Records behind a closed gate are not runnable work: they wait for the token.
      const uint32_t word = gate_word(s).load(std::memory_order_relaxed);
      const uint32_t gates = s.gates.load(std::memory_order_acquire);
      const uint32_t reached = reached_word(s).load(std::memory_order_acquire);
      if (reached != 0 && !gate_closed(gates, reached) && gates - reached < kGates - 1) {
        const int64_t at = s.gate_at[reached % kGates].load(std::memory_order_relaxed);
        if (at > s.done_ns) {
          s.done_ns = at;
          look.progressed = true;
          raise_completed(device, s.gate_launched[reached % kGates].load(std::memory_order_relaxed));
        }
      }
      // Marks the GPU reached: the work before each is done.
      const uint32_t mark_reached = mark_word(s).load(std::memory_order_acquire);
      while (gate_closed(s.marks_seen, mark_reached)) {
        const uint32_t k = s.marks_seen + 1;
        const Slot::Mark& m = s.mark_ring[k % kMarks];
        const uint32_t seq = m.seq.load(std::memory_order_acquire);
        if (seq != k) {
          if (!gate_closed(k, seq)) break;  // not written yet (the GPU was quicker): next pass
          s.marks_seen = k;                 // overwritten by a later mark: that one will tell
          continue;
        }
        s.marks_seen = k;
        const int64_t at = m.enq.load(std::memory_order_relaxed);
        if (at > s.done_ns) {
          s.done_ns = at;
          look.progressed = true;
        }
        raise_completed(device, m.launched.load(std::memory_order_relaxed));
      }
      if (marking) look.marking = true;
      const bool closed = gate_closed(word, gates);
      if ((outstanding && !(closed && gate_closed(word, s.rec_gates[s.head]))) ||
          s.dirty.load(std::memory_order_acquire))
        look.pending = true;
      const int64_t end = closed ? s.gate_at[(word + 1) % kGates].load(std::memory_order_relaxed)
                                 : s.enq_ns.load(std::memory_order_acquire);
      const int64_t runnable = std::max<int64_t>(0, end - s.done_ns);
      look.runnable += runnable;
      // Work let run before the first closed gate and not seen done may have no record of its
      // own (launched just before the gate, in one poll): the GPU has not reached the gate.
      if (closed && runnable > 0) look.pending = true;
      if (closed) look.parked = true;
    }
    // Held back work runs while the tenant holds the token: as the bound allows, or all of it
    // when the bound cannot be kept (a capture holds off the records) or the process exits.
    for (int d = 0; d < kMaxDevices; ++d) {
      Device& dev = g_devices[d];
      Look& look = looks[d];
      if (!look.parked) {
        dev.stalled_ns = dev.stall_last = 0;
        continue;
      }
      const int gpu = scheduler_link::gpu(d);
      if (!g_stop.load(std::memory_order_acquire) && !client::token_try(gpu)) {
        dev.stall_last = 0;
        continue;
      }
      look.parked = false;
      if (look.progressed || look.runnable == 0) dev.stalled_ns = 0;
      else if (dev.stall_last != 0) dev.stalled_ns += now - dev.stall_last;
      dev.stall_last = now;
      const bool stalled = dev.stalled_ns >= kGateStallNs;
      if (stalled) {
        dev.stalled_ns = 0;
        g_counts.stalls++;
      }
      // Say where each stream stands (docs/benchmarks.md: what a stall looked like on the H100).
      if (stalled && log::enabled(log::Level::kDebug)) {
        CUSLICE_LOG(kDebug, "device %d: held back work stalled: let all of it run (runnable %lld us, quiet %d)", d,
                    static_cast<long long>(look.runnable / 1000), static_cast<int>(quiet));
        for (const Slot& sl : g_slots) {
          if (sl.key.load(std::memory_order_relaxed) == 0 || sl.device.load(std::memory_order_relaxed) != d) continue;
          const uint32_t w = gate_word(sl).load(std::memory_order_relaxed);
          const uint32_t g = sl.gates.load(std::memory_order_relaxed);
          CUSLICE_LOG(kDebug,
                      "  stream %#llx: gates %u, open to %u, reached %u, marks %u seen %u, enq %lld us, done %lld us, "
                      "gate at %lld us, records %d, dirty %u",
                      static_cast<unsigned long long>(sl.key.load(std::memory_order_relaxed)), g, w,
                      reached_word(sl).load(std::memory_order_relaxed), sl.marks.load(std::memory_order_relaxed),
                      sl.marks_seen, static_cast<long long>(sl.enq_ns.load(std::memory_order_relaxed) / 1000),
                      static_cast<long long>(sl.done_ns / 1000),
                      static_cast<long long>(sl.gate_at[(w + 1) % kGates].load(std::memory_order_relaxed) / 1000),
                      sl.count, sl.dirty.load(std::memory_order_relaxed));
        }
      }
      if (open_gates(d, look, quiet || stalled || g_stop.load(std::memory_order_acquire))) look.pending = true;
      if (!look.parked) client::token_unpark(gpu);
    }
    g_pass_began.store(0, std::memory_order_release);
  }
  for (int d = 0; d < kMaxDevices; ++d) {
    Device& dev = g_devices[d];
    const Look& look = looks[d];
    bool pending = look.pending;
    // A launch begun but not counted before the streams were looked at (its stream is marked
    // only once the driver has it, just before it counts): not drained.
    if (dev.tickets.load(std::memory_order_seq_cst) != launched_before[d]) pending = true;
    if (!pending && !look.parked) {
      uint64_t cur = dev.completed.load(std::memory_order_relaxed);
      while (launched_before[d] > cur &&
             !dev.completed.compare_exchange_weak(cur, launched_before[d], std::memory_order_release)) {
      }
    }
    if (!dev.busy.load(std::memory_order_acquire)) {
      // A launching thread may have throttled itself against a device that has drained.
      if (dev.throttle.load(std::memory_order_acquire)) {
        dev.throttle.store(0, std::memory_order_release);
        dev.throttle.notify_all();
      }
      release_cap(dev);
      continue;
    }
    const int gpu = scheduler_link::gpu(d);
    if (look.parked && !pending) {
      // All that may run has run; the rest waits for the token. Not busy on the GPU (the
      // daemon may hand the token on, and no GPU time is counted meanwhile), still wanting it.
      if (dev.tracking) {
        account(dev, gpu, now, dev.completed.load(std::memory_order_acquire));
        dev.tracking = false;
        client::token_release(gpu);
      }
      dev.drained_since = 0;
      dev.disturbed = true;  // the time until the gates open is not the kernels'
      any_busy = revoked = true;  // look again soon: the token may come back any moment
      // A thread bounded on the CPU goes on to wait for the token instead.
      if (dev.throttle.load(std::memory_order_relaxed)) {
        dev.throttle.store(0, std::memory_order_release);
        dev.throttle.notify_all();
      }
      release_cap(dev);
      continue;
    }
    if (!dev.tracking) {
      dev.tracking = true;
      dev.tracked_since = now;
      dev.busy_since = now;
      dev.had_in_flight = false;
    }
    // Queue bound: the estimated time of the launches in flight. (The age of the oldest record
    // is no measure: it includes the kernel running now.)
    const uint64_t launched = dev.launched.load(std::memory_order_acquire);
    const uint64_t completed = dev.completed.load(std::memory_order_acquire);
    if (dev.had_in_flight) dev.in_flight_ns += now - dev.last_look;
    const int64_t looked = dev.last_look;
    dev.last_look = now;
    dev.had_in_flight = launched != completed;
    bool deep = false;
    if (g_others.load(std::memory_order_relaxed)) {
      if (dev.had_in_flight && !client::holding(gpu)) dev.disturbed = true;
      learn(dev, d, now, looked, completed);
      retire_estimates(dev, d, completed);
      const int64_t queued = dev.queued();
      deep = too_deep(dev, launched - completed, queued);
      // While the token is elsewhere, a launch that could not be parked (a per-thread default
      // stream) waits for the token, not for room: the queue drains meanwhile anyway.
      if (deep && parking() && !client::holding(gpu)) deep = false;
    } else {
      dev.learnt = dev.retired = completed;
      dev.learnt_at = 0;
    }
    if (dev.throttle.load(std::memory_order_relaxed) != static_cast<uint32_t>(deep)) {
      dev.throttle.store(deep, std::memory_order_release);
      if (!deep) dev.throttle.notify_all();
    }
    if (deep) throttled = true;
    release_cap(dev);
    if (look.parked) held = true;  // held back work is let run in steps: look again soon
    // Marks coming in: look again soon too (a look is then a few loads, no driver call), so
    // that what completed counts off the bound at once.
    if (look.marking) held = true;
    // Keep the token through a short pause, unless a lower-priority tenant waits for it.
    const int64_t grace = pending || client::lower_priority_waiting(gpu) ? 0 : kReleaseGraceNs;
    if (pending || now - (dev.drained_since ? dev.drained_since : now) < grace) {
      if (pending)
        dev.drained_since = 0;
      else if (dev.drained_since == 0)
        dev.drained_since = now;
      any_busy = true;
      // Revoked, or a lower-priority tenant waits for this one to drain: look again soon.
      if (pending && (!client::holding(gpu) || client::lower_priority_waiting(gpu))) revoked = true;
      // Debug: others wait while this process has not drained for long (say why).
      if (log::enabled(log::Level::kDebug) && revoked && now - dev.tracked_since >= 200'000'000 &&
          now - dev.last_stuck_log >= 200'000'000) {
        dev.last_stuck_log = now;
        int dirty = 0, outstanding = 0;
        for (const Slot& sl : g_slots)
          if (sl.key.load(std::memory_order_relaxed) != 0 && sl.device.load(std::memory_order_relaxed) == d) {
            dirty += sl.dirty.load(std::memory_order_relaxed) != 0;
            outstanding += sl.count;
          }
        CUSLICE_LOG(kDebug,
                    "device %d not drained for %lld ms while others wait: launched %llu, completed %llu, "
                    "under way %llu, streams marked %d, records outstanding %d, captures %d",
                    d, static_cast<long long>((now - dev.tracked_since) / 1'000'000),
                    static_cast<unsigned long long>(launched), static_cast<unsigned long long>(completed),
                    static_cast<unsigned long long>(dev.tickets.load() - launched), dirty, outstanding,
                    g_captures.load());
      }
      if (now - dev.busy_since >= kReportNs) {
        account(dev, gpu, now, completed);
        dev.busy_since = now;
      }
      continue;
    }
    dev.drained_since = 0;
    // Drained: account the interval and give the token back. A launch racing with this
    // sets busy again and re-acquires the token first.
    account(dev, gpu, now, completed);
    dev.tracking = false;
    // Nothing in flight: square the queued time, unless a launch is under way. (Added is read
    // first: a launch that took its ticket after the check adds after that read.)
    retire_estimates(dev, d, completed);
    const int64_t added = dev.added_ns.load(std::memory_order_seq_cst);
    if (dev.tickets.load(std::memory_order_seq_cst) == completed) dev.retired_ns.store(added, std::memory_order_release);
    dev.busy.store(0, std::memory_order_release);
    client::token_release(gpu);
  }
  return any_busy;
}

void* monitor(void*) {
  // Never run the application's signal handlers here.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  // Relaxed capture mode, so that its calls are not refused as unsafe while another thread
  // captures. Not enough on its own: on the H100 its event queries still invalidated
  // captures, so pass() makes no driver call while any capture is in progress.
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (g_drv.exchange_mode) g_drv.exchange_mode(&mode);
  // Polls of 10-100 us must not be stretched by the default 50 us timer slack.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  int64_t next_neighbours = 0;
  while (!g_stop.load(std::memory_order_acquire)) {
    const uint32_t wake = g_wake.load(std::memory_order_acquire);
    if (now_ns() >= next_neighbours) {
      const client::Neighbours n = client::neighbours();
      g_others.store(n.others, std::memory_order_relaxed);
      g_higher.store(n.higher, std::memory_order_relaxed);
      next_neighbours = now_ns() + kNeighboursNs;
    }
    bool revoked = false, throttled = false, held = false;
    const bool busy = pass(revoked, throttled, held);
    client::maintain();
    // Busy: look again soon (very soon while revoked). Idle: sleep until a launch makes a
    // device busy, and re-check the scheduler connection now and then.
    // Parking, nothing held back: no thread waits for room and nothing is to be let run, so
    // the monitor looks as seldom as without a higher-priority tenant (each look is several
    // driver calls, which compete with the launching thread for the context).
    const bool tight = held || (g_higher.load(std::memory_order_relaxed) && !parking());
    const int64_t busy_poll = throttled ? kThrottledPollNs : tight ? kTightPollNs : kBusyPollNs;
    if (busy && busy_poll != kBusyPollNs) g_counts.tight_polls++;
    futex_wait(&g_wake, wake, revoked ? std::min(kDrainPollNs, busy_poll) : busy ? busy_poll : kIdleWaitNs);
  }
  return nullptr;
}

// A pass this long is stuck in the driver: the monitor's records and queries wait for a lock
// that an application thread holds while it waits, inside the driver, for work of its own
// held back behind a gate (seen on the H100: a cudaMemcpyAsync to pageable memory behind held
// launches hung the process for good, the monitor blocked in the driver). Only the monitor
// opens gates, so nothing would ever move again.
constexpr int64_t kStuckNs = 10'000'000;

// The watchdog: while a pass is stuck, lets all held back work run (a store to each gate word:
// no driver call, no lock), so the GPU reaches what the application waits for, its call
// returns and the monitor goes on. Started with the gate words; wakes every few ms, does
// nothing else. The bound on queued work is lost only while the monitor is stuck.
void* watchdog(void*) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  const timespec tick{0, 5'000'000};
  int64_t logged = 0;
  while (!g_stop.load(std::memory_order_acquire)) {
    nanosleep(&tick, nullptr);
    const int64_t began = g_pass_began.load(std::memory_order_acquire);
    if (began == 0 || now_ns() - began < kStuckNs || g_gate_words == nullptr) continue;
    bool opened = false;
    for (Slot& s : g_slots) {
      if (s.key.load(std::memory_order_acquire) == 0) continue;
      if (gate_closed(gate_word(s).load(std::memory_order_acquire), s.gates.load(std::memory_order_acquire))) {
        open_all(s);
        opened = true;
      }
    }
    if (!opened) continue;
    g_counts.unstuck.fetch_add(1, std::memory_order_relaxed);
    if (began != logged) {
      logged = began;
      CUSLICE_LOG(kDebug, "the monitor has been in the driver for %lld ms: let all held back work run",
                  static_cast<long long>((now_ns() - began) / 1'000'000));
    }
  }
  return nullptr;
}

void start_watchdog() {
  if (g_watchdog_started.exchange(true, std::memory_order_acq_rel)) return;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &attr, &watchdog, nullptr) == 0)
    pthread_setname_np(t, "cuslice-watch");
  else
    CUSLICE_LOG(kWarn, "cannot start the monitor's watchdog: a launch held back may wait for a blocked monitor");
  pthread_attr_destroy(&attr);
}

void stop_at_exit() {
  // The driver is torn down at exit: the monitor must not be inside it then, and no
  // launching thread may stay throttled by a monitor that is gone.
  g_stop.store(true, std::memory_order_release);
  g_wake.fetch_add(1, std::memory_order_release);
  futex_wake_all(&g_wake);
  std::lock_guard<std::mutex> lock(g_monitor);
  if (log::enabled(log::Level::kDebug)) {
    uint64_t launched = 0;
    for (const Device& d : g_devices) launched += d.launched.load(std::memory_order_relaxed);
    CUSLICE_LOG(kDebug,
                "at exit: %llu launches; monitor: %llu passes (%llu at the short poll), %llu records, %llu queries; "
                "launches held back %llu, gates %llu, marks %llu, waits at the parking cap %llu, on the CPU for "
                "room %llu; gates opened by the watchdog %llu; stalls %llu",
                static_cast<unsigned long long>(launched), static_cast<unsigned long long>(g_counts.passes),
                static_cast<unsigned long long>(g_counts.tight_polls), static_cast<unsigned long long>(g_counts.records),
                static_cast<unsigned long long>(g_counts.queries),
                static_cast<unsigned long long>(g_counts.held.load()), static_cast<unsigned long long>(g_counts.gates.load()),
                static_cast<unsigned long long>(g_counts.marks.load()),
                static_cast<unsigned long long>(g_counts.cap_waits.load()),
                static_cast<unsigned long long>(g_counts.cpu_waits.load()),
                static_cast<unsigned long long>(g_counts.unstuck.load()),
                static_cast<unsigned long long>(g_counts.stalls));
  }
  // Held back work must run, or tearing the contexts down would wait for it forever.
  for (Slot& s : g_slots) open_all(s);
  for (Device& d : g_devices) {
    d.throttle.store(0, std::memory_order_release);
    d.throttle.notify_all();
    d.cap.store(0, std::memory_order_release);
    d.cap.notify_all();
  }
}

}  // namespace

void start() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_drv = Driver{cuda_function<EventCreate>("cuEventCreate"), cuda_function<EventRecord>("cuEventRecord"),
                   cuda_function<EventQuery>("cuEventQuery"), cuda_function<EventDestroy>("cuEventDestroy_v2"),
                   cuda_function<CtxSet>("cuCtxSetCurrent"), cuda_function<CtxGet>("cuCtxGetCurrent"),
                   cuda_function<IsCapturing>("cuStreamIsCapturing"),
                   cuda_function<ExchangeMode>("cuThreadExchangeStreamCaptureMode"),
                   cuda_function<WaitValue>("cuStreamWaitValue32_v2"),
                   cuda_function<WriteValue>("cuStreamWriteValue32_v2"), cuda_function<HostRegister>("cuMemHostRegister_v2"),
                   cuda_function<HostDevicePointer>("cuMemHostGetDevicePointer_v2")};
    if (!g_drv.event_create || !g_drv.event_record || !g_drv.event_query || !g_drv.ctx_set ||
        !g_drv.ctx_get || !g_drv.is_capturing) {
      CUSLICE_LOG(kWarn, "the driver lacks event functions: launches are not gated");
      return;
    }
    g_max_queued_ns = static_cast<int64_t>(settings().max_queued_ns);
    g_preempt_queued_ns = static_cast<int64_t>(settings().preempt_queued_ns);
    g_park_cap_ns = static_cast<int64_t>(settings().park_queued_ns);
    if (!g_drv.wait_value || !g_drv.write_value || !g_drv.host_register || !g_drv.host_device_pointer) g_park_cap_ns = 0;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, &monitor, nullptr) != 0) {
      CUSLICE_LOG(kWarn, "cannot start the launch monitor: launches are not gated");
      pthread_attr_destroy(&attr);
      return;
    }
    pthread_attr_destroy(&attr);
    pthread_setname_np(t, "cuslice-monitor");
    std::atexit(&stop_at_exit);
    g_running.store(true, std::memory_order_release);
  });
}

bool running() { return g_running.load(std::memory_order_acquire); }

namespace {

// The slot of the stream launched on (nullptr: the table is full).
Slot* slot_of(int device, CUstream stream) {
  uintptr_t key;
  if (is_default(stream)) {
    CUcontext ctx = nullptr;
    g_drv.ctx_get(&ctx);
    key = reinterpret_cast<uintptr_t>(ctx) | 1;
  } else {
    key = reinterpret_cast<uintptr_t>(stream);
  }
  Slot* s = find_or_add(key, true);
  if (s == nullptr) return nullptr;
  int expected = -1;
  if (s->device.load(std::memory_order_acquire) < 0) {
    // First launch on this stream: the monitor needs its context. Published by the device
    // store; a racing first launch on the same stream writes the same context.
    CUcontext ctx = nullptr;
    g_drv.ctx_get(&ctx);
    s->ctx = ctx;
    s->device.compare_exchange_strong(expected, device, std::memory_order_acq_rel);
  }
  return s;
}

// Marks the stream launched on, so that the monitor records after it (and so cannot take the
// device for drained while the launch is under way), and adds the launch's estimate to it.
void mark(int device, CUstream stream, uint32_t est) {
  Slot* s = slot_of(device, stream);
  if (s == nullptr) return;
  // Marked before its estimate counts: the monitor, having read the sum with it, must not then
  // find the stream unmarked and take all of the sum for done.
  if (!s->dirty.load(std::memory_order_seq_cst)) s->dirty.store(1, std::memory_order_seq_cst);
  if (est != 0) s->enq_ns.fetch_add(est, std::memory_order_seq_cst);
}

// Sets up the gate words (from a launching thread, whose context is current): maps them the
// first time, and registers them in this context while no live context has them registered.
void setup_gates(int device) {
  int expected = kGateUnset;
  if (!g_gate_state.compare_exchange_strong(expected, kGateSettingUp, std::memory_order_acq_rel)) return;
  if (g_gate_words == nullptr) {
    void* words = mmap(nullptr, kGateWordsBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (words == MAP_FAILED) {
      g_gate_state.store(kGateUnavailable, std::memory_order_release);
      return;
    }
    g_gate_words = static_cast<std::atomic<uint32_t>*>(words);  // zero-filled
  }
  CUcontext ctx = nullptr;
  g_drv.ctx_get(&ctx);
  const CUresult rc =
      g_drv.host_register(g_gate_words, kGateWordsBytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
  CUdeviceptr dptr = 0;
  // Already registered: the context that registered them is alive after all (the primary
  // context of a device was reset, and they were registered in another context of it).
  if ((rc != CUDA_SUCCESS && rc != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) ||
      g_drv.host_device_pointer(&dptr, g_gate_words, 0) != CUDA_SUCCESS) {
    CUSLICE_LOG(kDebug, "host memory cannot be pinned for the GPU-side gates: launches wait on the CPU");
    g_gate_state.store(kGateUnavailable, std::memory_order_release);
    return;
  }
  if (rc == CUDA_SUCCESS) {
    g_gate_ctx = ctx;
    g_gate_device = device;
  }
  g_gate_dptr = dptr;
  start_watchdog();
  g_gate_state.store(kGateReady, std::memory_order_release);
}

// Puts a mark on the stream before the launch about to be forwarded (under `inserting`): the
// work launched before it (enq_ns `enq`, the device's launches so far) is done when the GPU
// writes it. A mark that cannot be put is skipped: the monitor's records still tell.
void put_mark(Slot& s, CUstream stream, const Device& dev, int64_t enq) {
  const uint32_t k = s.marks.load(std::memory_order_relaxed) + 1;
  if (g_drv.write_value(stream, gpu_address(mark_word(s)), k, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS) return;
  Slot::Mark& m = s.mark_ring[k % kMarks];
  m.enq.store(enq, std::memory_order_relaxed);
  m.launched.store(dev.launched.load(std::memory_order_acquire), std::memory_order_relaxed);
  m.seq.store(k, std::memory_order_release);
  s.marks.store(k, std::memory_order_release);
  s.mark_enq = enq;
  g_counts.marks.fetch_add(1, std::memory_order_relaxed);
}

// Waits while the throttle is set (first spinning: the monitor usually clears it at once).
void wait_throttle(Device& dev) {
  if (dev.throttle.load(std::memory_order_acquire)) {
    const int64_t until = now_ns() + kThrottleSpinNs;
    while (dev.throttle.load(std::memory_order_acquire) && now_ns() < until) __builtin_ia32_pause();
  }
  while (dev.throttle.load(std::memory_order_acquire)) dev.throttle.wait(1, std::memory_order_acquire);
}

void raise_throttle(Device& dev) {
  dev.throttle.store(1, std::memory_order_release);
  g_wake.fetch_add(1, std::memory_order_release);  // the monitor may be asleep: it clears it
  futex_wake_all(&g_wake);
}

}  // namespace

Noted note_launch(int device) {
  if (!g_running.load(std::memory_order_relaxed) ||
      static_cast<unsigned>(device) >= static_cast<unsigned>(kMaxDevices))
    return {};
  Device& dev = g_devices[device];
  const uint64_t ticket = dev.tickets.fetch_add(1, std::memory_order_seq_cst);
  // Idle to busy: wake the monitor (one system call per busy period, not per launch).
  if (!dev.busy.load(std::memory_order_relaxed) && !dev.busy.exchange(1, std::memory_order_acq_rel)) {
    g_wake.fetch_add(1, std::memory_order_release);
    futex_wake_all(&g_wake);
  }
  return {device, ticket};
}

void launched(Noted noted, CUstream stream, uintptr_t kernel) {
  const int device = noted.device;
  if (device < 0) return;
  Device& dev = g_devices[device];
  // Marked and counted only now that the driver has it: a record the monitor makes for the
  // mark follows it, so it is never seen complete before it ran; until it counts, its ticket
  // keeps the device from draining. Its entry in the ring is written before it counts, so the
  // monitor finds it there. (From one thread the ticket is the launch's index; threads
  // launching at once may swap two.)
  const uint64_t index = noted.ticket;
  uint32_t est = 0;
  if (g_others.load(std::memory_order_relaxed)) {
    // Bounded: remember what this launch is expected to take (alone, nothing is bounded and
    // this costs nothing).
    const int slot = kernel_slot(kernel != 0 ? kernel : 1);
    const uint32_t k = slot < 0 ? 0 : static_cast<uint32_t>(slot) + 1;
    est = estimate(k, dev);
    dev.added_ns.fetch_add(est, std::memory_order_seq_cst);
    Launch& l = g_ring[device][index % kRing];
    l.kernel.store(k, std::memory_order_relaxed);
    l.est_ns.store(est, std::memory_order_relaxed);
    l.at.store(now_ns(), std::memory_order_relaxed);
    l.seq.store(index + 1, std::memory_order_release);
  }
  mark(device, stream, est != 0 ? est : kUnknownKernelNs);
  dev.launched.fetch_add(1, std::memory_order_seq_cst);
  // Below a higher-priority tenant, the bound is a few launches and the monitor must tell
  // when each one completes, not a batch of them: wake it to record after every launch.
  // Not while parking: launches then wait for room behind gates, not on the CPU, and the
  // monitor's own polls keep up (a wake per launch is a system call on the app's thread).
  if (g_higher.load(std::memory_order_relaxed) && !parking()) {
    g_wake.fetch_add(1, std::memory_order_release);
    futex_wake_all(&g_wake);
  }
}

void wait_for_room(int device) {
  if (!g_running.load(std::memory_order_relaxed) ||
      static_cast<unsigned>(device) >= static_cast<unsigned>(kMaxDevices))
    return;
  // Queue too deep (as much estimated work in flight as the bound holds): wait until the
  // monitor sees work finish.
  Device& dev = g_devices[device];
  if (g_others.load(std::memory_order_relaxed) &&
      too_deep(dev, dev.launched.load(std::memory_order_relaxed) - dev.completed.load(std::memory_order_acquire),
               dev.queued())) {
    g_counts.cpu_waits.fetch_add(1, std::memory_order_relaxed);
    raise_throttle(dev);
  }
  wait_throttle(dev);
}

bool park(int device, int gpu, CUstream stream) {
  if (!g_running.load(std::memory_order_relaxed) || g_park_cap_ns == 0 ||
      static_cast<unsigned>(device) >= static_cast<unsigned>(kMaxDevices) ||
      !g_higher.load(std::memory_order_relaxed) || g_stop.load(std::memory_order_relaxed) ||
      stream == CU_STREAM_PER_THREAD || g_captures.load(std::memory_order_relaxed) != 0)
    return false;
  if (g_gate_state.load(std::memory_order_acquire) != kGateReady) {
    setup_gates(device);
    if (g_gate_state.load(std::memory_order_acquire) != kGateReady) return false;
  }
  Device& dev = g_devices[device];
  if (over_cap(dev)) {
    g_counts.cap_waits.fetch_add(1, std::memory_order_relaxed);
    dev.cap.store(1, std::memory_order_release);
    g_wake.fetch_add(1, std::memory_order_release);
    futex_wake_all(&g_wake);
    while (dev.cap.load(std::memory_order_acquire)) dev.cap.wait(1, std::memory_order_acquire);
  }
  Slot* s = slot_of(device, stream);
  if (s == nullptr) return false;
  const bool hold = client::token_try(gpu);
  // One thread at a time decides and puts a gate on a stream (rarely contended: threads
  // seldom launch on one stream at once), so that no launch that must wait slips past.
  while (s->inserting.exchange(1, std::memory_order_acquire) != 0) __builtin_ia32_pause();
  const uint32_t gates = s->gates.load(std::memory_order_relaxed);
  const bool closed = gate_closed(gate_word(*s).load(std::memory_order_acquire), gates);
  const int64_t enq = s->enq_ns.load(std::memory_order_acquire);
  // Holding the token with room: the launch goes as it is (token_try took the token's fast
  // path). Without room it is held back too, rather than stopping the launching thread until
  // the GPU has room: the monitor lets it run as room comes, and the application runs on
  // (its Python keeps the queue full, as it does natively; waiting on the CPU for room cost
  // a ResNet-50 trainer 15-20% beside an idle higher-priority service on the H100).
  if (!closed && hold &&
      !too_deep(dev, dev.launched.load(std::memory_order_relaxed) - dev.completed.load(std::memory_order_acquire),
                dev.queued())) {
    if (enq - s->mark_enq >= segment_ns()) put_mark(*s, stream, dev, enq);
    s->inserting.store(0, std::memory_order_release);
    return true;
  }
  g_counts.held.fetch_add(1, std::memory_order_relaxed);
  // Else held back: behind the closed gate already there (a new one when its segment is full,
  // so that the monitor lets work run in bounded steps), or behind a new one.
  const bool gate = closed ? enq - s->gate_at[gates % kGates].load(std::memory_order_relaxed) >= segment_ns() &&
                                 gates - gate_word(*s).load(std::memory_order_relaxed) < kGates - 1
                           : true;
  bool ok = true;
  if (gate) {
    const uint32_t k = gates + 1;
    // The GPU says when it reaches the gate, so the monitor sees the work before it complete
    // with no event (records are coarser than segments).
    if (g_drv.write_value(stream, gpu_address(reached_word(*s)), k, CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS &&
        g_drv.wait_value(stream, gpu_address(gate_word(*s)), k, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS) {
      s->gate_at[k % kGates].store(enq, std::memory_order_relaxed);
      s->gate_launched[k % kGates].store(dev.launched.load(std::memory_order_acquire), std::memory_order_relaxed);
      s->gates.store(k, std::memory_order_release);
      g_counts.gates.fetch_add(1, std::memory_order_relaxed);
    } else if (!closed) {
      ok = false;  // not held back: this launch waits on the CPU
    }
  }
  s->inserting.store(0, std::memory_order_release);
  return ok;
}

void begin_capture(CUstream stream) {
  std::lock_guard<std::mutex> lock(g_monitor);
  g_captures.fetch_add(1, std::memory_order_acq_rel);
  for (std::atomic<uintptr_t>& origin : g_capture_origins) {
    uintptr_t none = 0;
    if (origin.compare_exchange_strong(none, reinterpret_cast<uintptr_t>(stream), std::memory_order_acq_rel)) break;
  }
}

void end_capture(CUstream stream) {
  for (std::atomic<uintptr_t>& origin : g_capture_origins) {
    uintptr_t mine = reinterpret_cast<uintptr_t>(stream);
    if (origin.compare_exchange_strong(mine, 0, std::memory_order_acq_rel)) break;
  }
  g_captures.fetch_sub(1, std::memory_order_acq_rel);
}

bool capturing() { return g_captures.load(std::memory_order_relaxed) != 0; }

void forget_stream(CUstream stream) {
  // A stream destroyed while it captures ends its capture: the monitor must not stay quiet.
  for (std::atomic<uintptr_t>& origin : g_capture_origins) {
    uintptr_t mine = reinterpret_cast<uintptr_t>(stream);
    if (mine != 0 && origin.compare_exchange_strong(mine, 0, std::memory_order_acq_rel)) {
      g_captures.fetch_sub(1, std::memory_order_acq_rel);
      break;
    }
  }
  if (!running()) return;
  std::lock_guard<std::mutex> lock(g_monitor);
  if (Slot* s = find_or_add(reinterpret_cast<uintptr_t>(stream), false)) release_slot(*s);
}

void forget_context(CUcontext ctx) {
  if (!running()) return;
  std::lock_guard<std::mutex> lock(g_monitor);
  for (Slot& s : g_slots)
    if (s.key.load(std::memory_order_acquire) != 0 && s.device.load(std::memory_order_acquire) >= 0 && s.ctx == ctx)
      release_slot(s);
  // A new context may come at the same address: set it again then.
  if (g_monitor_ctx == ctx) g_monitor_ctx = nullptr;
  if (ctx == g_gate_ctx) {
    retire_gates();
    g_gate_ctx = nullptr;
  }
}

void forget_device(int device) {
  if (!running()) return;
  std::lock_guard<std::mutex> lock(g_monitor);
  for (Slot& s : g_slots)
    if (s.key.load(std::memory_order_acquire) != 0 && s.device.load(std::memory_order_acquire) == device)
      release_slot(s);
  g_monitor_ctx = nullptr;  // the primary context is reset: set it again
  // The words may be registered in it (if not, in another context of the device, registering
  // again finds them still registered).
  if (device == g_gate_device) retire_gates();
}

void after_fork_child() {
  // The child has no monitor thread and none of the parent's queued work.
  g_running.store(false, std::memory_order_relaxed);
  // The parent's pinned words may not be mapped here (the driver keeps pinned memory out of
  // children): the child maps its own at its first park.
  g_gate_words = nullptr;
  g_gate_state.store(kGateUnset, std::memory_order_relaxed);
  g_gate_ctx = nullptr;
  g_gate_device = -1;
  g_watchdog_started.store(false, std::memory_order_relaxed);  // threads do not survive a fork
  g_pass_began.store(0, std::memory_order_relaxed);
  g_monitor_ctx = nullptr;  // a new monitor thread has no context current
  for (Slot& s : g_slots) {
    s.gates.store(0, std::memory_order_relaxed);
    s.inserting.store(0, std::memory_order_relaxed);
    // The child's words start at 0: so do its marks.
    s.marks.store(0, std::memory_order_relaxed);
    s.mark_enq = 0;
    s.marks_seen = s.marks_last_pass = 0;
    for (Slot::Mark& m : s.mark_ring) m.seq.store(0, std::memory_order_relaxed);
    s.enq_ns.store(0, std::memory_order_relaxed);
    s.done_ns = 0;
    s.key.store(0, std::memory_order_relaxed);
    s.dirty.store(0, std::memory_order_relaxed);
    s.count = s.head = 0;
    s.device.store(-1, std::memory_order_relaxed);
    s.ctx = nullptr;
    for (CUevent& e : s.events) e = nullptr;
  }
  for (Device& d : g_devices) {
    d.busy.store(0, std::memory_order_relaxed);
    d.throttle.store(0, std::memory_order_relaxed);
    d.cap.store(0, std::memory_order_relaxed);
    d.launched.store(0, std::memory_order_relaxed);
    d.tickets.store(0, std::memory_order_relaxed);
    d.completed.store(0, std::memory_order_relaxed);
    d.added_ns.store(0, std::memory_order_relaxed);
    d.retired_ns.store(0, std::memory_order_relaxed);
    d.retired = 0;
    d.mean_ns.store(0, std::memory_order_relaxed);
    d.learnt = 0;
    d.learnt_at = 0;
    d.disturbed = false;
    d.tracking = false;
    d.busy_ns = d.busy_launches = 0;
    d.completed_accounted = 0;
    d.in_flight_ns = 0;
    d.had_in_flight = false;
    d.stalled_ns = d.stall_last = 0;
  }
  g_captures.store(0, std::memory_order_relaxed);
  for (std::atomic<uintptr_t>& origin : g_capture_origins) origin.store(0, std::memory_order_relaxed);
  new (&g_monitor) std::mutex();
}

}  // namespace cuslice::activity
