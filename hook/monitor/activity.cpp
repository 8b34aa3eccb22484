// The public surface of the launch monitor (activity.h): the launch path's entry points,
// capture and stream bookkeeping, and the monitor's lifecycle (start, exit, fork).
//
// May call every monitor file (monitor_state, monitor_driver, gate_words, stream_slots,
// kernel_estimates, queue_bound, parking, thread_launches, monitor), settings, the client and
// log. Called by the hooks (launch_hooks.cpp, context_hooks.cpp) and startup.cpp; calls
// nothing above it.
#include "hook/monitor/activity.h"

#include <pthread.h>

#include <cstdlib>
#include <mutex>

#include "hook/base/detached_thread.h"
#include "hook/base/fork_child.h"
#include "hook/base/log.h"
#include "hook/base/settings.h"
#include "hook/monitor/gate_words.h"
#include "hook/monitor/kernel_estimates.h"
#include "hook/monitor/monitor.h"
#include "hook/monitor/monitor_driver.h"
#include "hook/monitor/monitor_state.h"
#include "hook/monitor/parking.h"
#include "hook/monitor/queue_bound.h"
#include "hook/monitor/stream_slots.h"
#include "hook/monitor/thread_launches.h"

namespace cuslice::activity {
namespace {

void stop_at_exit() {
  // The driver is torn down at exit: the monitor must not be inside it then, and no
  // launching thread may stay throttled by a monitor that is gone.
  g_state.stop.store(true, std::memory_order_release);
  wake_monitor();
  std::lock_guard<std::mutex> lock(g_state.lock);
  if (log::enabled(log::Level::kDebug)) {
    uint64_t launched = 0;
    for (const Device& d : g_state.devices) launched += d.launched.load(std::memory_order_relaxed);
    for (int d = 0; d < kRecordDevices; ++d) launched += unfolded_done(d);
    CUSLICE_LOG(kDebug,
                "at exit: %llu launches; monitor: %llu passes (%llu at the short poll), %llu records, %llu queries; "
                "launches held back %llu, gates %llu, marks %llu, waits at the parking cap %llu, on the CPU for "
                "room %llu; gates opened by the watchdog %llu; stalls %llu",
                static_cast<unsigned long long>(launched), static_cast<unsigned long long>(g_state.counts.passes),
                static_cast<unsigned long long>(g_state.counts.tight_polls), static_cast<unsigned long long>(g_state.counts.records),
                static_cast<unsigned long long>(g_state.counts.queries),
                static_cast<unsigned long long>(g_state.counts.held.load()), static_cast<unsigned long long>(g_state.counts.gates.load()),
                static_cast<unsigned long long>(g_state.counts.marks.load()),
                static_cast<unsigned long long>(g_state.counts.cap_waits.load()),
                static_cast<unsigned long long>(g_state.counts.cpu_waits.load()),
                static_cast<unsigned long long>(g_state.counts.unstuck.load()),
                static_cast<unsigned long long>(g_state.counts.stalls));
  }
  // Held back work must run, or tearing the contexts down would wait for it forever.
  for (Slot& s : g_state.slots) open_all(s);
  for (Device& d : g_state.devices) {
    clear_throttle(d);
    d.cap.store(0, std::memory_order_release);
    d.cap.notify_all();
  }
}

bool valid_device(int device) { return static_cast<unsigned>(device) < static_cast<unsigned>(kMaxDevices); }

// Idle to busy: wake the monitor (one system call per busy period, not per launch). Out of
// line, so the launch path does not save registers for it.
[[gnu::noinline, gnu::cold]] void become_busy(Device& dev) {
  if (!dev.busy.exchange(1, std::memory_order_acq_rel)) wake_monitor();
}

// The monitor starts once per process (start()).
void start_once() {
  if (!load_monitor_driver()) {
    CUSLICE_LOG(kWarn, "the driver lacks event functions: launches are not gated");
    return;
  }
  g_state.max_queued_ns = static_cast<int64_t>(settings().max_queued_ns);
  g_state.higher_queued_ns = static_cast<int64_t>(settings().preempt_queued_ns);
  g_state.park_cap_ns = static_cast<int64_t>(settings().park_queued_ns);
  if (!monitor_driver_can_park()) g_state.park_cap_ns = 0;
  if (!start_detached_thread(&monitor_main, "cuslice-monitor")) {
    CUSLICE_LOG(kWarn, "cannot start the launch monitor: launches are not gated");
    return;
  }
  std::atexit(&stop_at_exit);
  g_state.running.store(true, std::memory_order_release);
}

}  // namespace

void start() { pthread_once(&g_state.started, &start_once); }

bool running() { return g_state.running.load(std::memory_order_acquire); }
bool bounded() { return g_state.others.load(std::memory_order_relaxed); }
bool sliced() { return g_state.sliced.load(std::memory_order_relaxed); }

namespace {

// The launch begun without a record of its thread's (bounded, a device beyond the records', or
// the thread's first launch): a ticket, unless the thread claims a record now.
[[gnu::noinline]] Noted note_launch_on_device(int device) {
  Device& dev = g_state.devices[device];
  Noted noted{device, 0, 0};
  if (device < kRecordDevices && !g_state.others.load(std::memory_order_relaxed)) noted.record = claim_record();
  if (noted.record != 0)
    count_begun(g_state.records[noted.record - 1], device);
  else
    noted.ticket = dev.tickets.fetch_add(1, std::memory_order_seq_cst);
  if (!dev.busy.load(std::memory_order_relaxed)) become_busy(dev);
  return noted;
}

// A launch that took a ticket, after the driver has it.
[[gnu::noinline]] void launched_on_device(Noted noted, CUstream stream, uintptr_t kernel) {
  const int device = noted.device;
  Device& dev = g_state.devices[device];
  // Marked and counted only now that the driver has it: a record the monitor makes for the
  // mark follows it, so it is never seen complete before it ran; until it counts, its ticket
  // keeps the device from draining. Its entry in the ring is written before it counts, so the
  // monitor finds it there. (From one thread the ticket is the launch's index; threads
  // launching at once may swap two.)
  const uint64_t index = noted.ticket;
  uint32_t est = 0;
  const bool bounded_now = g_state.others.load(std::memory_order_relaxed);
  if (bounded_now) {
    // Bounded: remember what this launch is expected to take (alone, nothing is bounded and
    // this costs nothing).
    const int slot = kernel_slot(kernel != 0 ? kernel : 1);
    const uint32_t k = slot < 0 ? 0 : static_cast<uint32_t>(slot) + 1;
    est = estimate(k, dev);
    dev.added_ns.fetch_add(est, std::memory_order_seq_cst);
    Launch& l = g_state.ring[device][index % kRing];
    l.kernel.store(k, std::memory_order_relaxed);
    l.est_ns.store(est, std::memory_order_relaxed);
    l.at.store(now_ns(), std::memory_order_relaxed);
    l.seq.store(index + 1, std::memory_order_release);
  }
  // Alone, nothing reads the stream's estimated sum (it places gates and marks): no locked add.
  mark(device, stream, !bounded_now ? 0 : est != 0 ? est : kUnknownKernelNs);
  dev.launched.fetch_add(1, std::memory_order_seq_cst);
  // Below a higher-priority tenant, the bound is a few launches and the monitor must tell
  // when each one completes, not a batch of them: wake it to record after every launch.
  // Not while parking: launches then wait for room behind gates, not on the CPU, and the
  // monitor's own polls keep up (a wake per launch is a system call on the app's thread).
  if (g_state.higher.load(std::memory_order_relaxed) && !parking()) wake_monitor();
}

}  // namespace

// The launch that is not bounded, from a thread with a record: two stores to the record's
// line, one load of the device's, and the stream's mark (the rest is out of line).
Noted note_launch(int device) {
  if (!g_state.running.load(std::memory_order_relaxed) || !valid_device(device)) return {};
  const int record = t_record;
  if (record == 0 || device >= kRecordDevices || g_state.others.load(std::memory_order_relaxed))
    return note_launch_on_device(device);
  count_begun(g_state.records[record - 1], device);
  Device& dev = g_state.devices[device];
  if (!dev.busy.load(std::memory_order_relaxed)) become_busy(dev);
  return {device, record, 0};
}

void launched(Noted noted, CUstream stream, uintptr_t kernel) {
  if (noted.record != 0) {
    // Counted after the mark, as below: the monitor that folds the count finds the stream
    // marked. Nothing is estimated: it was not bounded when it began.
    mark(noted.device, stream, 0);
    count_done(g_state.records[noted.record - 1], noted.device);
    return;
  }
  if (noted.device >= 0) launched_on_device(noted, stream, kernel);
}

void wait_for_room(int device) {
  if (!g_state.running.load(std::memory_order_relaxed) || !valid_device(device)) return;
  // Queue too deep (as much estimated work in flight as the bound holds): wait until the
  // monitor sees work finish.
  Device& dev = g_state.devices[device];
  if (g_state.others.load(std::memory_order_relaxed) &&
      too_deep(dev, dev.launched.load(std::memory_order_relaxed) - dev.completed.load(std::memory_order_acquire),
               dev.queued())) {
    g_state.counts.cpu_waits.fetch_add(1, std::memory_order_relaxed);
    raise_throttle(dev);
  }
  wait_throttle(dev);
}

bool park(int device, int gpu, CUstream stream) {
  if (!g_state.running.load(std::memory_order_relaxed) || g_state.park_cap_ns == 0 || !valid_device(device) ||
      !g_state.higher.load(std::memory_order_relaxed) || g_state.stop.load(std::memory_order_relaxed) ||
      stream == CU_STREAM_PER_THREAD || g_state.captures.load(std::memory_order_relaxed) != 0)
    return false;
  return park_on_stream(device, gpu, stream);
}

void begin_capture(CUstream stream) {
  std::lock_guard<std::mutex> lock(g_state.lock);
  g_state.captures.fetch_add(1, std::memory_order_acq_rel);
  for (std::atomic<uintptr_t>& origin : g_state.capture_origins) {
    uintptr_t none = 0;
    if (origin.compare_exchange_strong(none, reinterpret_cast<uintptr_t>(stream), std::memory_order_acq_rel)) break;
  }
}

void end_capture(CUstream stream) {
  for (std::atomic<uintptr_t>& origin : g_state.capture_origins) {
    uintptr_t mine = reinterpret_cast<uintptr_t>(stream);
    if (origin.compare_exchange_strong(mine, 0, std::memory_order_acq_rel)) break;
  }
  g_state.captures.fetch_sub(1, std::memory_order_acq_rel);
}

bool capturing() { return g_state.captures.load(std::memory_order_relaxed) != 0; }

void forget_stream(CUstream stream) {
  // A stream destroyed while it captures ends its capture: the monitor must not stay quiet.
  for (std::atomic<uintptr_t>& origin : g_state.capture_origins) {
    uintptr_t mine = reinterpret_cast<uintptr_t>(stream);
    if (mine != 0 && origin.compare_exchange_strong(mine, 0, std::memory_order_acq_rel)) {
      g_state.captures.fetch_sub(1, std::memory_order_acq_rel);
      break;
    }
  }
  if (!running()) return;
  std::lock_guard<std::mutex> lock(g_state.lock);
  if (Slot* s = find_or_add(reinterpret_cast<uintptr_t>(stream), false)) release_slot(*s);
}

void forget_context(CUcontext ctx) {
  if (!running()) return;
  std::lock_guard<std::mutex> lock(g_state.lock);
  for (Slot& s : g_state.slots)
    if (s.key.load(std::memory_order_acquire) != 0 && s.device.load(std::memory_order_acquire) >= 0 && s.ctx == ctx)
      release_slot(s);
  // A new context may come at the same address: set it again then.
  if (g_state.monitor_ctx == ctx) g_state.monitor_ctx = nullptr;
  if (ctx == g_state.gate_ctx) {
    retire_gates();
    g_state.gate_ctx = nullptr;
  }
}

void forget_device(int device) {
  if (!running()) return;
  std::lock_guard<std::mutex> lock(g_state.lock);
  for (Slot& s : g_state.slots)
    if (s.key.load(std::memory_order_acquire) != 0 && s.device.load(std::memory_order_acquire) == device)
      release_slot(s);
  g_state.monitor_ctx = nullptr;  // the primary context is reset: set it again
  // The words may be registered in it (if not, in another context of the device, registering
  // again finds them still registered).
  if (device == g_state.gate_device.load(std::memory_order_relaxed)) retire_gates();
}

void after_fork_child() {
  // The child has no monitor thread and none of the parent's queued work: its streams and
  // devices start as a fresh process's.
  g_state.running.store(false, std::memory_order_relaxed);
  // The parent's pinned words may not be mapped here (the driver keeps pinned memory out of
  // children): the child maps its own at its first park, and its gates and marks start at 0.
  g_state.gate_words = nullptr;
  g_state.gate_state.store(kGateUnset, std::memory_order_relaxed);
  g_state.gate_ctx = nullptr;
  g_state.gate_device.store(-1, std::memory_order_relaxed);
  g_state.watchdog_started.store(false, std::memory_order_relaxed);  // threads do not survive a fork
  g_state.pass_began.store(0, std::memory_order_relaxed);
  g_state.monitor_ctx = nullptr;  // a new monitor thread has no context current
  // The parent's events are not the child's to destroy: renewing forgets them.
  for (Slot& s : g_state.slots) renew_in_child(s);
  for (Device& d : g_state.devices) renew_in_child(d);
  reset_records_in_child();
  g_state.captures.store(0, std::memory_order_relaxed);
  for (std::atomic<uintptr_t>& origin : g_state.capture_origins) origin.store(0, std::memory_order_relaxed);
  renew_in_child(g_state.lock);
}

}  // namespace cuslice::activity
