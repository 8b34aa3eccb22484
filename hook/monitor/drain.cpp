// Whether a device drained, and what follows (drain.h). May call monitor_state, stream_slots,
// kernel_estimates, queue_bound, parking, thread_launches, scheduler_link (gpu), the client
// and log.
#include "hook/monitor/drain.h"

#include "hook/base/log.h"
#include "hook/link/client.h"
#include "hook/link/scheduler_link.h"
#include "hook/monitor/kernel_estimates.h"
#include "hook/monitor/parking.h"
#include "hook/monitor/queue_bound.h"
#include "hook/monitor/stream_slots.h"
#include "hook/monitor/thread_launches.h"

namespace cuslice::activity {
namespace {

// At debug level: others wait while this process has not drained for long (say why).
void log_not_drained(int d, Device& dev, int64_t now, uint64_t launched, uint64_t completed) {
  if (!log::enabled(log::Level::kDebug) || now - dev.tracked_since < kNotDrainedLogNs ||
      now - dev.last_stuck_log < kNotDrainedLogNs)
    return;
  dev.last_stuck_log = now;
  int dirty = 0, outstanding = 0;
  for (const Slot& sl : g_state.slots)
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
              g_state.captures.load());
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
  if (!g_state.others.load(std::memory_order_relaxed)) {
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

// Whether work is pending on the device: what its streams showed, or a launch begun but not
// counted before they were looked at (its stream is marked only once the driver has it, just
// before it counts). Nothing pending or held back: every launch counted before has completed.
bool still_pending(int d, Device& dev, const Look& look, uint64_t launched_before) {
  bool pending = look.pending;
  fold_begun(d);
  if (dev.tickets.load(std::memory_order_seq_cst) != launched_before) pending = true;
  if (!pending && !look.parked) raise_completed(d, launched_before);
  return pending;
}

// An idle device: a launching thread may have throttled itself against it after it drained.
void free_waiters_of_idle(Device& dev) {
  if (dev.throttle.load(std::memory_order_acquire)) clear_throttle(dev);
  release_cap(dev);
}

// A busy interval begins (the first pass that finds the device busy since it drained).
void begin_tracking(Device& dev, int64_t now) {
  if (dev.tracking) return;
  dev.tracking = true;
  dev.tracked_since = now;
  dev.busy_since = now;
  dev.had_in_flight = false;
}

// The device's launch counts, read once per pass (launched first).
struct Counted {
  uint64_t launched;
  uint64_t completed;
};

// Sets the throttle from the bound, and lets waiters at the parking cap go.
void apply_bound(Device& dev, int d, int gpu, int64_t now, const Look& look, Counted c, PassOutcome& out) {
  const bool deep = bound_queue(dev, d, gpu, now, c.launched, c.completed);
  if (dev.throttle.load(std::memory_order_relaxed) != static_cast<uint32_t>(deep)) {
    dev.throttle.store(deep, std::memory_order_release);
    if (!deep) dev.throttle.notify_all();
  }
  if (deep) out.throttled = true;
  release_cap(dev);
  // Held back work is let run in steps, and marks coming in count off the bound at once
  // (a look is then a few loads, no driver call): look again soon either way.
  if (look.parked || look.marking) out.held = true;
}

// Drained for the grace (none while a lower-priority tenant waits for the token): true once
// the token went back.
bool release_when_drained(Device& dev, int d, int gpu, int64_t now, bool pending, uint64_t completed) {
  const int64_t grace = pending || client::lower_priority_waiting(gpu) ? 0 : kReleaseGraceNs;
  if (!pending && now - (dev.drained_since ? dev.drained_since : now) >= grace) {
    drained(dev, d, gpu, now, completed);
    return true;
  }
  if (pending)
    dev.drained_since = 0;
  else if (dev.drained_since == 0)
    dev.drained_since = now;
  return false;
}

// Still busy: whether others wait for the drain, and the GPU time reported now and then.
void stay_busy(Device& dev, int d, int gpu, int64_t now, bool pending, Counted c, PassOutcome& out) {
  out.busy = true;
  // Revoked, or a lower-priority tenant waits for this one to drain: look again soon. (Not
  // while launched without the token, under short time slices: nobody waits for its drain.)
  if (pending && !g_state.sliced.load(std::memory_order_relaxed) &&
      (!client::holding(gpu) || client::lower_priority_waiting(gpu)))
    out.revoked = true;
  if (out.revoked) log_not_drained(d, dev, now, c.launched, c.completed);
  if (now - dev.busy_since >= kReportNs) {
    account(dev, gpu, now, c.completed);
    dev.busy_since = now;
  }
}

}  // namespace

void release_or_bound(int d, int64_t now, const Look& look, uint64_t launched_before, PassOutcome& out) {
  Device& dev = g_state.devices[d];
  const bool pending = still_pending(d, dev, look, launched_before);
  if (!dev.busy.load(std::memory_order_acquire)) {
    free_waiters_of_idle(dev);
    return;
  }
  const int gpu = scheduler_link::gpu(d);
  if (look.parked && !pending) {
    wait_for_token(dev, gpu, now);
    out.busy = out.revoked = true;  // look again soon: the token may come back any moment
    return;
  }
  begin_tracking(dev, now);
  const uint64_t launched = dev.launched.load(std::memory_order_acquire);
  const Counted c{launched, dev.completed.load(std::memory_order_acquire)};
  apply_bound(dev, d, gpu, now, look, c, out);
  if (release_when_drained(dev, d, gpu, now, pending, c.completed)) return;
  stay_busy(dev, d, gpu, now, pending, c, out);
}

}  // namespace cuslice::activity
