// The launch monitor (monitor.h): the thread's loop, and its pass in named phases:
//   1. look_at_stream: per tracked stream, record after new launches (alone, once they
//      stop), retire completed records, and read how far the GPU got (gates and marks
//      reached);
//   2. let_held_work_run: per device with held back work and the token, open gates as the
//      bound allows (all of them on a stall, a capture or exit);
//   3. settle_device: per device, give the token back once drained (after a short grace),
//      report GPU time, learn kernel times and set the throttle from the bound.
// May call monitor_state, monitor_driver, gate_words, stream_slots, kernel_estimates,
// queue_bound, parking, thread_launches, scheduler_link (gpu), channel_groups, the client and
// log.
#include "hook/monitor/monitor.h"

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>

#include <algorithm>

#include "hook/base/log.h"
#include "hook/bookkeeping/channel_groups.h"
#include "hook/link/client.h"
#include "hook/link/scheduler_link.h"
#include "hook/monitor/gate_words.h"
#include "hook/monitor/kernel_estimates.h"
#include "hook/monitor/monitor_driver.h"
#include "hook/monitor/monitor_state.h"
#include "hook/monitor/parking.h"
#include "hook/monitor/queue_bound.h"
#include "hook/monitor/stream_slots.h"
#include "hook/monitor/thread_launches.h"

namespace cuslice::activity {
namespace {

// How long a device may stay undrained while others wait before the debug log says why, and
// how often it says so again.
constexpr int64_t kNotDrainedLogNs = 200'000'000;

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

// Phase 1, one stream (under g_monitor): records after new launches, retires completed
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
  // Clear first: a launch after this point marks the stream again.
  if (!quiet && !marking && !hold && s.dirty.exchange(0, std::memory_order_seq_cst) && !record(s, key))
    s.dirty.store(1, std::memory_order_release);
  const int64_t done_before = s.done_ns;
  const int64_t enq = s.enq_ns.load(std::memory_order_seq_cst);  // before the records are looked at
  const bool outstanding = quiet ? s.count > 0 : retire(s);
  // Nothing outstanding and nothing new: all that was launched here is done (a record
  // covers a little more than the estimate read before it, so done_ns alone would lag
  // behind, and the bound would count work that is not there).
  if (!quiet && !outstanding && !s.dirty.load(std::memory_order_acquire)) s.done_ns = std::max(s.done_ns, enq);
  if (s.done_ns != done_before) look.progressed = true;
  if (g_gate_words == nullptr) {
    if (outstanding || s.dirty.load(std::memory_order_acquire)) look.pending = true;
    return;
  }
  // Records behind a closed gate are not runnable work: they wait for the token.
  const uint32_t word = gate_word(s).load(std::memory_order_relaxed);
  const uint32_t gates = s.gates.load(std::memory_order_acquire);
  see_gates_reached(s, device, gates, look);
  see_marks_reached(s, device, look);
  if (marking) look.marking = true;
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

// At debug level, when held back work stalled: where each of the device's streams stands
// (docs/benchmarks.md shows what a stall looked like).
void log_stall(int device, const Look& look, bool quiet) {
  if (!log::enabled(log::Level::kDebug)) return;
  CUSLICE_LOG(kDebug, "device %d: held back work stalled: let all of it run (runnable %lld us, quiet %d)", device,
              static_cast<long long>(look.runnable / 1000), static_cast<int>(quiet));
  for (const Slot& sl : g_slots) {
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

// Phase 2 (under g_monitor): held back work runs while the tenant holds the token: as the
// bound allows, or all of it when the bound cannot be kept (a capture holds off the records),
// the work stalled, or the process exits.
void let_held_work_run(int64_t now, bool quiet, Look (&looks)[kMaxDevices]) {
  for (int d = 0; d < kMaxDevices; ++d) {
    Device& dev = g_devices[d];
    Look& look = looks[d];
    if (!look.parked) {
      dev.stalled_ns = dev.stall_last = 0;
      continue;
    }
    const int gpu = scheduler_link::gpu(d);
    // Preempted by the time slices: work held back before that began runs now, all of it.
    const bool free_run = g_stop.load(std::memory_order_acquire) || g_sliced.load(std::memory_order_relaxed);
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
      g_counts.stalls++;
      log_stall(d, look, quiet);
    }
    if (open_gates(d, look, quiet || stalled || free_run)) look.pending = true;
    if (!look.parked) client::token_unpark(gpu);
  }
}

// At debug level: others wait while this process has not drained for long (say why).
void log_not_drained(int d, Device& dev, int64_t now, uint64_t launched, uint64_t completed) {
  if (!log::enabled(log::Level::kDebug) || now - dev.tracked_since < kNotDrainedLogNs ||
      now - dev.last_stuck_log < kNotDrainedLogNs)
    return;
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
              static_cast<unsigned long long>(dev.tickets.load() - launched), dirty, outstanding, g_captures.load());
}

// All that may run has run; the rest waits for the token. Not busy on the GPU (the daemon may
// hand the token on, and no GPU time is counted meanwhile), still wanting it.
void wait_for_token(Device& dev, int gpu, int64_t now) {
  if (dev.tracking) {
    account(dev, gpu, now, dev.completed.load(std::memory_order_acquire));
    dev.tracking = false;
    client::token_release(gpu);
  }
  dev.drained_since = 0;
  dev.disturbed = true;  // the time until the gates open is not the kernels'
  // A thread bounded on the CPU goes on to wait for the token instead.
  if (dev.throttle.load(std::memory_order_relaxed)) clear_throttle(dev);
  release_cap(dev);
}

// The queue bound: the estimated time of the launches in flight (the age of the oldest record
// is no measure: it includes the kernel running now). Learns kernel times on the way. True:
// too deep, launches must wait.
bool bound_queue(Device& dev, int d, int gpu, int64_t now, uint64_t launched, uint64_t completed) {
  if (dev.had_in_flight) dev.in_flight_ns += now - dev.last_look;
  const int64_t looked = dev.last_look;
  dev.last_look = now;
  dev.had_in_flight = launched != completed;
  if (!g_others.load(std::memory_order_relaxed)) {
    dev.learnt = dev.retired = completed;
    dev.learnt_at = 0;
    return false;
  }
  if (dev.had_in_flight && !client::holding(gpu)) dev.disturbed = true;
  learn(dev, d, now, looked, completed);
  retire_estimates(dev, d, completed);
  const bool deep = too_deep(dev, launched - completed, dev.queued());
  // While the token is elsewhere, a launch that could not be parked (a per-thread default
  // stream) waits for the token, not for room: the queue drains meanwhile anyway.
  return deep && !(parking() && !client::holding(gpu));
}

// Drained: account the interval and give the token back. A launch racing with this sets busy
// again and re-acquires the token first.
void drained(Device& dev, int d, int gpu, int64_t now, uint64_t completed) {
  dev.drained_since = 0;
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

// The flags a pass gives the monitor's loop: any device busy; revoked: a busy device's token
// was taken back (its drain is awaited: look again soon); throttled: a launch waits for room
// on the CPU; held: work is held back behind a gate, or marks are coming in; settling:
// launches stopped, and the records just made will show the drain.
struct PassOutcome {
  bool busy = false;
  bool revoked = false;
  bool throttled = false;
  bool held = false;
  bool settling = false;
};

// Whether this pass leaves a device's streams without records: alone, holding the token,
// nobody waiting for the drain, and launches since the last pass (it is busy anyway).
bool hold_records(int d, uint64_t launched_before) {
  Device& dev = g_devices[d];
  const bool coming = launched_before != dev.launched_last_pass;
  dev.launched_last_pass = launched_before;
  if (!coming || g_others.load(std::memory_order_relaxed) || g_capped.load(std::memory_order_relaxed) ||
      g_sliced.load(std::memory_order_relaxed) || !dev.busy.load(std::memory_order_acquire))
    return false;
  const int gpu = scheduler_link::gpu(d);
  return client::holding(gpu) && !client::lower_priority_waiting(gpu);
}

// Phase 3, one device: drained or not, the token, GPU time, the bound.
void settle_device(int d, int64_t now, const Look& look, uint64_t launched_before, PassOutcome& out) {
  Device& dev = g_devices[d];
  bool pending = look.pending;
  // A launch begun but not counted before the streams were looked at (its stream is marked
  // only once the driver has it, just before it counts): not drained.
  fold_begun(d);
  if (dev.tickets.load(std::memory_order_seq_cst) != launched_before) pending = true;
  if (!pending && !look.parked) raise_completed(d, launched_before);
  if (!dev.busy.load(std::memory_order_acquire)) {
    // A launching thread may have throttled itself against a device that has drained.
    if (dev.throttle.load(std::memory_order_acquire)) clear_throttle(dev);
    release_cap(dev);
    return;
  }
  const int gpu = scheduler_link::gpu(d);
  if (look.parked && !pending) {
    wait_for_token(dev, gpu, now);
    out.busy = out.revoked = true;  // look again soon: the token may come back any moment
    return;
  }
  if (!dev.tracking) {
    dev.tracking = true;
    dev.tracked_since = now;
    dev.busy_since = now;
    dev.had_in_flight = false;
  }
  const uint64_t launched = dev.launched.load(std::memory_order_acquire);
  const uint64_t completed = dev.completed.load(std::memory_order_acquire);
  const bool deep = bound_queue(dev, d, gpu, now, launched, completed);
  if (dev.throttle.load(std::memory_order_relaxed) != static_cast<uint32_t>(deep)) {
    dev.throttle.store(deep, std::memory_order_release);
    if (!deep) dev.throttle.notify_all();
  }
  if (deep) out.throttled = true;
  release_cap(dev);
  if (look.parked) out.held = true;  // held back work is let run in steps: look again soon
  // Marks coming in: look again soon too (a look is then a few loads, no driver call), so
  // that what completed counts off the bound at once.
  if (look.marking) out.held = true;
  // Keep the token through a short pause, unless a lower-priority tenant waits for it.
  const int64_t grace = pending || client::lower_priority_waiting(gpu) ? 0 : kReleaseGraceNs;
  if (!pending && now - (dev.drained_since ? dev.drained_since : now) >= grace) {
    drained(dev, d, gpu, now, completed);
    return;
  }
  if (pending)
    dev.drained_since = 0;
  else if (dev.drained_since == 0)
    dev.drained_since = now;
  out.busy = true;
  // Revoked, or a lower-priority tenant waits for this one to drain: look again soon. (Not
  // while preempted by the time slices: it holds no token, and nobody waits for its drain.)
  if (pending && !g_sliced.load(std::memory_order_relaxed) &&
      (!client::holding(gpu) || client::lower_priority_waiting(gpu)))
    out.revoked = true;
  if (out.revoked) log_not_drained(d, dev, now, launched, completed);
  if (now - dev.busy_since >= kReportNs) {
    account(dev, gpu, now, completed);
    dev.busy_since = now;
  }
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
    std::lock_guard<std::mutex> lock(g_monitor);
    for (int d = 0; d < kRecordDevices; ++d) fold(d);
    for (int d = 0; d < kMaxDevices; ++d) launched_before[d] = g_devices[d].launched.load(std::memory_order_acquire);
    g_pass_began.store(now, std::memory_order_release);
    g_counts.passes++;
    // While a capture is in progress the monitor calls the driver for nothing: recording on
    // the legacy stream would join a global capture, and even a cuEventQuery of a pending
    // record, from this relaxed-mode thread, can invalidate the application's capture
    // (tests/gpu/capture_stress.sh). A record outstanding then keeps the device busy.
    const bool quiet = g_captures.load(std::memory_order_acquire) != 0;
    bool hold[kMaxDevices];
    for (int d = 0; d < kMaxDevices; ++d) {
      hold[d] = hold_records(d, launched_before[d]);
      if (g_devices[d].records_held && !hold[d]) out.settling = true;
      g_devices[d].records_held = hold[d];
      if (hold[d]) g_devices[d].carry_unlearnt = true;
    }
    for (Slot& s : g_slots) {
      const uintptr_t key = s.key.load(std::memory_order_acquire);
      const int device = s.device.load(std::memory_order_acquire);
      if (key == 0 || device < 0) continue;
      look_at_stream(s, key, device, quiet, hold[device], looks[device]);
    }
    let_held_work_run(now, quiet, looks);
    g_pass_began.store(0, std::memory_order_release);
  }
  for (int d = 0; d < kMaxDevices; ++d) settle_device(d, now, looks[d], launched_before[d], out);
  return out;
}

}  // namespace

namespace {

uint32_t g_slice_logged = 0;  // the slice the debug log last reported (monitor thread only)

// Who else is registered decides what the launch path does (activity.h): alone, bounded
// beside others, parked below a higher tenant, or preempted by its time slices.
void look_at_neighbours() {
  const client::Neighbours n = client::neighbours();
  // Below a higher-priority tenant the GPU switches away from this process's kernels within
  // the short slice when the higher tenant's work arrives (channel_groups.h). Not beside
  // another process of the tenant: the two run at once under the same token, and short
  // slices on both sides are mostly switching (docs/benchmarks.md, "Time slices").
  const uint32_t slice = n.higher && !n.siblings ? n.lower_timeslice_us : 0;
  channel_groups::apply(slice);
  // The token still orders this tenant against tenants it does not yield to, and keeps a
  // cap; and a group the kernel did not confirm short would leave a kernel uncut.
  const bool sliced = slice != 0 && !n.peers && !n.capped && channel_groups::verify(slice);
  const bool was = g_sliced.load(std::memory_order_relaxed);
  g_capped.store(n.capped, std::memory_order_relaxed);
  if (sliced && !was) {
    // In this order: a launch that still sees itself bounded finds parking off; the gates
    // already closed open at this pass (let_held_work_run), and the token is not kept.
    g_sliced.store(true, std::memory_order_seq_cst);
    g_higher.store(false, std::memory_order_relaxed);
    g_others.store(false, std::memory_order_relaxed);
    for (int d = 0; d < kMaxDevices; ++d)
      if (g_devices[d].busy.load(std::memory_order_acquire)) client::token_release(scheduler_link::gpu(d));
  } else {
    g_others.store(n.others && !sliced, std::memory_order_relaxed);
    g_higher.store(n.higher && !sliced, std::memory_order_relaxed);
    g_sliced.store(sliced, std::memory_order_seq_cst);
  }
  if (sliced != was && log::enabled(log::Level::kDebug)) {
    if (sliced)
      CUSLICE_LOG(kDebug, "launches go on without the token: the GPU preempts them within the short slice "
                          "(%u channel groups at %u us)", channel_groups::counts().groups, slice);
    else
      CUSLICE_LOG(kDebug, "launches wait for the token again");
  }
  if (slice != g_slice_logged && log::enabled(log::Level::kDebug)) {
    const channel_groups::Counts c = channel_groups::counts();
    CUSLICE_LOG(kDebug, "GPU time slice %s: %u of %u channel groups shortened, %u controls refused",
                slice != 0 ? "shortened below a higher-priority tenant" : "the driver's", c.shortened, c.groups,
                c.refused);
  }
  g_slice_logged = slice;
}

}  // namespace

void* monitor_main(void*) {
  // Never run the application's signal handlers here.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  // Relaxed capture mode, so that its calls are not refused as unsafe while another thread
  // captures. Not enough on its own (its event queries can still invalidate a capture), so
  // pass() makes no driver call while any capture is in progress.
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (g_drv.exchange_mode) g_drv.exchange_mode(&mode);
  // Polls of 10-100 us must not be stretched by the default 50 us timer slack.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  int64_t next_neighbours = 0;
  bool was_revoked = false;
  while (!g_stop.load(std::memory_order_acquire)) {
    const uint32_t wake = g_wake.load(std::memory_order_acquire);
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
    // Busy: look again soon (very soon while revoked). Idle: sleep until a launch makes a
    // device busy, and re-check the scheduler connection now and then.
    // Parking, nothing held back: no thread waits for room and nothing is to be let run, so
    // the monitor looks as seldom as without a higher-priority tenant (each look is several
    // driver calls, which compete with the launching thread for the context).
    const bool tight = p.held || (g_higher.load(std::memory_order_relaxed) && !parking());
    const bool uncontended = !g_others.load(std::memory_order_relaxed) && !g_capped.load(std::memory_order_relaxed);
    const int64_t busy_poll = p.throttled ? kThrottledPollNs
                              : tight     ? kTightPollNs
                              : uncontended ? kUncontendedPollNs
                                            : kBusyPollNs;
    if (p.busy && busy_poll < kBusyPollNs) g_counts.tight_polls++;
    const int64_t poll = p.settling ? std::min(kSettlePollNs, busy_poll) : busy_poll;
    futex_wait(&g_wake, wake, p.revoked ? std::min(kDrainPollNs, poll) : p.busy ? poll : kIdleWaitNs);
  }
  return nullptr;
}

}  // namespace cuslice::activity
