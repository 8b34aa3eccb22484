// The launch monitor (monitor.h): the thread's loop, and its pass in named phases:
//   1. look_at_stream: per tracked stream, record after new launches (alone, once they
//      stop), retire completed records, and read how far the GPU got (gates and marks
//      reached);
//   2. let_held_work_run: per device with held back work and the token, open gates as the
//      bound allows (all of them on a stall, a capture or exit);
//   3. release_or_bound (drain.h): per device, give the token back once drained (after a
//      short grace), report GPU time, learn kernel times and set the throttle from the bound.
// Between passes it looks who else is registered (launch_regime.h).
// May call monitor_state, monitor_driver, gate_words, stream_slots, queue_bound, parking,
// thread_launches, drain, launch_regime, scheduler_link (gpu), the client and log.
#include "hook/monitor/monitor.h"

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>

#include <algorithm>

#include "hook/base/log.h"
#include "hook/link/client.h"
#include "hook/link/scheduler_link.h"
#include "hook/monitor/drain.h"
#include "hook/monitor/gate_words.h"
#include "hook/monitor/launch_regime.h"
#include "hook/monitor/monitor_driver.h"
#include "hook/monitor/monitor_state.h"
#include "hook/monitor/parking.h"
#include "hook/monitor/queue_bound.h"
#include "hook/monitor/stream_slots.h"
#include "hook/monitor/thread_launches.h"

namespace cuslice::activity {
namespace {

// Gates the GPU reached: the work before the last one is done.
void see_gates_reached(Slot& s, int device, uint32_t gates, Look& look) {
  const uint32_t reached = reached_word(s).load(std::memory_order_acquire);
  if (reached == 0 || gate_closed(gates, reached) || gates - reached >= kGates - 1) return;
  const int64_t at = s.gate_at[reached % kGates].load(std::memory_order_relaxed);
  if (at > s.done_ns) {
    s.done_ns = at;
    look.progressed = true;
    raise_completed(device, s.gate_launched[reached % kGates].load(std::memory_order_relaxed));
  }
}

// Marks the GPU reached: the work before each is done.
void see_marks_reached(Slot& s, int device, Look& look) {
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
}

// Records after new launches unless `record_now` is false, retires completed records, and
// raises done_ns; true while some record is outstanding. Quiet: a capture is in progress, so
// no driver call at all.
bool record_and_retire(Slot& s, uintptr_t key, bool quiet, bool record_now, Look& look) {
  // Clear first: a launch after this point marks the stream again.
  if (!quiet && record_now && s.dirty.exchange(0, std::memory_order_seq_cst) && !record(s, key))
    s.dirty.store(1, std::memory_order_release);
  const int64_t done_before = s.done_ns;
  const int64_t enq = s.enq_ns.load(std::memory_order_seq_cst);  // before the records are looked at
  const bool outstanding = quiet ? s.count > 0 : retire(s);
  // Nothing outstanding and nothing new: all that was launched here is done (a record
  // covers a little more than the estimate read before it, so done_ns alone would lag
  // behind, and the bound would count work that is not there).
  if (!quiet && !outstanding && !s.dirty.load(std::memory_order_acquire)) s.done_ns = std::max(s.done_ns, enq);
  if (s.done_ns != done_before) look.progressed = true;
  return outstanding;
}

// With the gate words: how far the GPU got (gates and marks reached), and what of the
// stream's work is runnable, pending, or held back. Records behind a closed gate are not
// runnable work: they wait for the token.
void look_behind_gates(Slot& s, int device, bool outstanding, Look& look) {
  const uint32_t word = gate_word(s).load(std::memory_order_relaxed);
  const uint32_t gates = s.gates.load(std::memory_order_acquire);
  see_gates_reached(s, device, gates, look);
  see_marks_reached(s, device, look);
  const bool closed = gate_closed(word, gates);
  if ((outstanding && !(closed && gate_closed(word, s.rec_gates[s.head]))) || s.dirty.load(std::memory_order_acquire))
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

// Phase 1, one stream (under g_state.lock): records after new launches, retires completed
// records, reads how far the GPU got, and adds what it found to its device's look. Quiet: a
// capture is in progress, so no driver call at all. Hold: launches keep coming on the device
// (hold_records()), so no record yet; the stream stays marked, so busy.
void look_at_stream(Slot& s, uintptr_t key, int device, bool quiet, bool hold, Look& look) {
  // Marks put since the last pass: the launching thread is at it, and they will show its
  // work done; the monitor records only once they stop (the stream stays marked dirty, so
  // busy, meanwhile).
  const uint32_t marks = s.marks.load(std::memory_order_acquire);
  const bool marking = marks != s.marks_last_pass;
  s.marks_last_pass = marks;
  const bool outstanding = record_and_retire(s, key, quiet, !marking && !hold, look);
  if (g_state.gate_words == nullptr) {
    if (outstanding || s.dirty.load(std::memory_order_acquire)) look.pending = true;
    return;
  }
  if (marking) look.marking = true;
  look_behind_gates(s, device, outstanding, look);
}

// At debug level, when held back work stalled: where each of the device's streams stands
// (docs/evidence/benchmarks.md shows what a stall looked like).
void log_stall(int device, const Look& look, bool quiet) {
  if (!log::enabled(log::Level::kDebug)) return;
  CUSLICE_LOG(kDebug, "device %d: held back work stalled: let all of it run (runnable %lld us, quiet %d)", device,
              static_cast<long long>(look.runnable / 1000), static_cast<int>(quiet));
  for (const Slot& sl : g_state.slots) {
    if (sl.key.load(std::memory_order_relaxed) == 0 || sl.device.load(std::memory_order_relaxed) != device) continue;
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

// Phase 2 (under g_state.lock): held back work runs while the tenant holds the token: as the
// bound allows, or all of it when the bound cannot be kept (a capture holds off the records),
// the work stalled, or the process exits.
void let_held_work_run(int64_t now, bool quiet, Look (&looks)[kMaxDevices]) {
  for (int d = 0; d < kMaxDevices; ++d) {
    Device& dev = g_state.devices[d];
    Look& look = looks[d];
    if (!look.parked) {
      dev.stalled_ns = dev.stall_last = 0;
      continue;
    }
    const int gpu = scheduler_link::gpu(d);
    // Preempted by the time slices: work held back before that began runs now, all of it.
    const bool free_run = g_state.stop.load(std::memory_order_acquire) || g_state.sliced.load(std::memory_order_relaxed);
    if (!free_run && !client::token_try(gpu)) {
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
      g_state.counts.stalls++;
      log_stall(d, look, quiet);
    }
    if (open_gates(d, look, quiet || stalled || free_run)) look.pending = true;
    if (!look.parked) client::token_unpark(gpu);
  }
}

// Whether this pass leaves a device's streams without records: alone, holding the token,
// nobody waiting for the drain, and launches since the last pass (it is busy anyway).
bool hold_records(int d, uint64_t launched_before) {
  Device& dev = g_state.devices[d];
  const bool coming = launched_before != dev.launched_last_pass;
  dev.launched_last_pass = launched_before;
  if (!coming || g_state.others.load(std::memory_order_relaxed) || g_state.capped.load(std::memory_order_relaxed) ||
      g_state.sliced.load(std::memory_order_relaxed) || !dev.busy.load(std::memory_order_acquire))
    return false;
  const int gpu = scheduler_link::gpu(d);
  return client::holding(gpu) && !client::lower_priority_waiting(gpu);
}

// One pass over every tracked stream and device.
PassOutcome pass() {
  const int64_t now = now_ns();
  PassOutcome out;
  Look looks[kMaxDevices];
  // Launches counted before the streams are looked at: each is either covered by a record or
  // still marks its stream, so once nothing is pending they have all completed.
  uint64_t launched_before[kMaxDevices];
  {
    // Folded under the lock, so the count logged at exit (which holds it) is never taken
    // halfway through a fold.
    std::lock_guard<std::mutex> lock(g_state.lock);
    for (int d = 0; d < kRecordDevices; ++d) fold(d);
    for (int d = 0; d < kMaxDevices; ++d) launched_before[d] = g_state.devices[d].launched.load(std::memory_order_acquire);
    g_state.pass_began.store(now, std::memory_order_release);
    g_state.counts.passes++;
    // While a capture is in progress the monitor calls the driver for nothing: recording on
    // the legacy stream would join a global capture, and even a cuEventQuery of a pending
    // record, from this relaxed-mode thread, can invalidate the application's capture
    // (tests/gpu/capture_stress.sh). A record outstanding then keeps the device busy.
    const bool quiet = g_state.captures.load(std::memory_order_acquire) != 0;
    bool hold[kMaxDevices];
    for (int d = 0; d < kMaxDevices; ++d) {
      hold[d] = hold_records(d, launched_before[d]);
      if (g_state.devices[d].records_held && !hold[d]) out.records_resumed = true;
      g_state.devices[d].records_held = hold[d];
      if (hold[d]) g_state.devices[d].carry_unlearnt = true;
    }
    for (Slot& s : g_state.slots) {
      const uintptr_t key = s.key.load(std::memory_order_acquire);
      const int device = s.device.load(std::memory_order_acquire);
      if (key == 0 || device < 0) continue;
      look_at_stream(s, key, device, quiet, hold[device], looks[device]);
    }
    let_held_work_run(now, quiet, looks);
    g_state.pass_began.store(0, std::memory_order_release);
  }
  for (int d = 0; d < kMaxDevices; ++d) release_or_bound(d, now, looks[d], launched_before[d], out);
  return out;
}

// How long the monitor sleeps after a pass (unless woken). Busy: look again soon (very soon
// while revoked). Idle: sleep until a launch makes a device busy, and re-check the scheduler
// connection now and then. Parking, nothing held back: no thread waits for room and nothing
// is to be let run, so the monitor looks as seldom as without a higher-priority tenant (each
// look is several driver calls, which compete with the launching thread for the context).
int64_t sleep_after(const PassOutcome& p) {
  const bool tight = p.held || (g_state.higher.load(std::memory_order_relaxed) && !parking());
  const bool uncontended =
      !g_state.others.load(std::memory_order_relaxed) && !g_state.capped.load(std::memory_order_relaxed);
  const int64_t busy_poll = p.throttled ? kThrottledPollNs
                            : tight     ? kTightPollNs
                            : uncontended ? kUncontendedPollNs
                                          : kBusyPollNs;
  if (p.busy && busy_poll < kBusyPollNs) g_state.counts.tight_polls++;
  const int64_t poll = p.records_resumed ? std::min(kRecordsResumedPollNs, busy_poll) : busy_poll;
  return p.revoked ? std::min(kDrainPollNs, poll) : p.busy ? poll : kIdleWaitNs;
}

// The monitor thread's own settings: no signal handlers of the application, relaxed capture
// mode, and a timer slack that does not stretch its polls.
void prepare_monitor_thread() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  // Relaxed capture mode, so that its calls are not refused as unsafe while another thread
  // captures. Not enough on its own (its event queries can still invalidate a capture), so
  // pass() makes no driver call while any capture is in progress.
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (g_state.drv.exchange_mode) g_state.drv.exchange_mode(&mode);
  // Polls of 10-100 us must not be stretched by the default 50 us timer slack.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
}

}  // namespace

void* monitor_main(void*) {
  prepare_monitor_thread();
  int64_t next_neighbours = 0;
  bool was_revoked = false;
  while (!g_state.stop.load(std::memory_order_acquire)) {
    const uint32_t wake = g_state.wake.load(std::memory_order_acquire);
    if (now_ns() >= next_neighbours) {
      look_at_neighbours();
      next_neighbours = now_ns() + kNeighboursNs;
    }
    const PassOutcome p = pass();
    // The token taken back may be a tenant of higher priority arriving: look at the neighbours
    // now, not up to 50 ms later, so that this process's slices are short (and its launches
    // go on without the token) before that tenant's first requests wait behind its kernels.
    if (p.revoked && !was_revoked) next_neighbours = 0;
    was_revoked = p.revoked;
    client::maintain();
    futex_wait(&g_state.wake, wake, sleep_after(p));
  }
  return nullptr;
}

}  // namespace cuslice::activity
