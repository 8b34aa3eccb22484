// Parking (parking.h): setting up the gate words, holding launches back behind gates, marks,
// opening gates as the bound allows, and the watchdog. May call monitor_state,
// monitor_driver, gate_words, stream_slots, queue_bound, the client (token_try) and log.
#include "hook/monitor/parking.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>

#include "hook/base/detached_thread.h"
#include "hook/base/log.h"
#include "hook/link/client.h"
#include "hook/monitor/monitor_driver.h"
#include "hook/monitor/queue_bound.h"
#include "hook/monitor/stream_slots.h"

namespace cuslice::activity {

namespace {

// A pass that lasts kStuckNs is stuck in the driver: the monitor's records and queries wait
// for a lock that an application thread holds while it waits, inside the driver, for work of
// its own held back behind a gate (a copy to pageable memory behind held launches does).
// Only the monitor opens gates, so nothing would ever move again. The watchdog then lets all
// held back work run (a store to each gate word: no driver call, no lock), so the GPU reaches
// what the application waits for, its call returns and the monitor goes on. Started with the
// gate words; wakes every few ms, does nothing else. The bound on queued work is lost only
// while the monitor is stuck.
void* watchdog(void*) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  const timespec tick{0, 5'000'000};
  int64_t logged = 0;
  while (!g_state.stop.load(std::memory_order_acquire)) {
    nanosleep(&tick, nullptr);
    const int64_t began = g_state.pass_began.load(std::memory_order_acquire);
    if (began == 0 || now_ns() - began < kStuckNs || g_state.gate_words == nullptr) continue;
    bool opened = false;
    for (Slot& s : g_state.slots) {
      if (s.key.load(std::memory_order_acquire) == 0) continue;
      if (gate_closed(gate_word(s).load(std::memory_order_acquire), s.gates.load(std::memory_order_acquire))) {
        open_all(s);
        opened = true;
      }
    }
    if (!opened) continue;
    g_state.counts.unstuck.fetch_add(1, std::memory_order_relaxed);
    if (began != logged) {
      logged = began;
      CUSLICE_LOG(kDebug, "the monitor has been in the driver for %lld ms: let all held back work run",
                  static_cast<long long>((now_ns() - began) / 1'000'000));
    }
  }
  return nullptr;
}

void start_watchdog() {
  if (g_state.watchdog_started.exchange(true, std::memory_order_acq_rel)) return;
  if (!start_detached_thread(&watchdog, "cuslice-watch"))
    CUSLICE_LOG(kWarn, "cannot start the monitor's watchdog: a launch held back may wait for a blocked monitor");
}

// Sets up the gate words (from a launching thread, whose context is current): maps them the
// first time, and registers them in this context while no live context has them registered.
void setup_gates(int device) {
  int expected = kGateUnset;
  if (!g_state.gate_state.compare_exchange_strong(expected, kGateSettingUp, std::memory_order_acq_rel)) return;
  if (g_state.gate_words == nullptr) {
    void* words = mmap(nullptr, kGateWordsBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (words == MAP_FAILED) {
      g_state.gate_state.store(kGateUnavailable, std::memory_order_release);
      return;
    }
    g_state.gate_words = static_cast<std::atomic<uint32_t>*>(words);  // zero-filled
  }
  CUcontext ctx = nullptr;
  g_state.drv.ctx_get(&ctx);
  const CUresult rc =
      g_state.drv.host_register(g_state.gate_words, kGateWordsBytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
  CUdeviceptr dptr = 0;
  // Already registered: the context that registered them is alive after all (the primary
  // context of a device was reset, and they were registered in another context of it).
  if ((rc != CUDA_SUCCESS && rc != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) ||
      g_state.drv.host_device_pointer(&dptr, g_state.gate_words, 0) != CUDA_SUCCESS) {
    CUSLICE_LOG(kDebug, "host memory cannot be pinned for the GPU-side gates: launches wait on the CPU");
    g_state.gate_state.store(kGateUnavailable, std::memory_order_release);
    return;
  }
  if (rc == CUDA_SUCCESS) {
    g_state.gate_ctx = ctx;
    g_state.gate_device.store(device, std::memory_order_relaxed);
  }
  g_state.gate_dptr = dptr;
  start_watchdog();
  g_state.gate_state.store(kGateReady, std::memory_order_release);
}

// Puts a mark on the stream before the launch about to be forwarded (under `inserting`): the
// work launched before it (enq_ns `enq`, the device's launches so far) is done when the GPU
// writes it. A mark that cannot be put is skipped: the monitor's records still tell.
void put_mark(Slot& s, CUstream stream, const Device& dev, int64_t enq) {
  const uint32_t k = s.marks.load(std::memory_order_relaxed) + 1;
  if (g_state.drv.write_value(stream, gpu_address(mark_word(s)), k, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS) return;
  Slot::Mark& m = s.mark_ring[k % kMarks];
  m.enq.store(enq, std::memory_order_relaxed);
  m.launched.store(dev.launched.load(std::memory_order_acquire), std::memory_order_relaxed);
  m.seq.store(k, std::memory_order_release);
  s.marks.store(k, std::memory_order_release);
  s.mark_enq = enq;
  g_state.counts.marks.fetch_add(1, std::memory_order_relaxed);
}

// Waits on the CPU while the work in flight is past parking's cap (the monitor frees it).
void wait_at_cap(Device& dev) {
  g_state.counts.cap_waits.fetch_add(1, std::memory_order_relaxed);
  dev.cap.store(1, std::memory_order_release);
  wake_monitor();
  while (dev.cap.load(std::memory_order_acquire)) dev.cap.wait(1, std::memory_order_acquire);
}

// Puts gate k on the stream before the launch about to be forwarded (under `inserting`), at
// enq_ns `enq`. The GPU says when it reaches the gate, so the monitor sees the work before it
// complete with no event (records are coarser than segments). False: it could not be put.
bool put_gate(Slot& s, CUstream stream, const Device& dev, uint32_t k, int64_t enq) {
  if (g_state.drv.write_value(stream, gpu_address(reached_word(s)), k, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS ||
      g_state.drv.wait_value(stream, gpu_address(gate_word(s)), k, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS)
    return false;
  s.gate_at[k % kGates].store(enq, std::memory_order_relaxed);
  s.gate_launched[k % kGates].store(dev.launched.load(std::memory_order_acquire), std::memory_order_relaxed);
  s.gates.store(k, std::memory_order_release);
  g_state.counts.gates.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// Under `inserting`: lets the launch go (marked when its segment is full), or holds it back.
// True: launch now (let go, or held back behind a gate); false: wait on the CPU instead.
bool let_go_or_hold_back(Slot& s, CUstream stream, const Device& dev, bool holding) {
  const uint32_t gates = s.gates.load(std::memory_order_relaxed);
  const bool closed = gate_closed(gate_word(s).load(std::memory_order_acquire), gates);
  const int64_t enq = s.enq_ns.load(std::memory_order_acquire);
  // Holding the token with room: the launch goes as it is (token_try took the token's fast
  // path). Without room it is held back too, rather than stopping the launching thread until
  // the GPU has room: the monitor lets it run as room comes, and the application runs on (its
  // Python keeps the queue full, as it does natively; waiting on the CPU stops it, which
  // costs a trainer much of its speed: docs/evidence/benchmarks.md, parking).
  if (!closed && holding &&
      !too_deep(dev, dev.launched.load(std::memory_order_relaxed) - dev.completed.load(std::memory_order_acquire),
                dev.queued())) {
    if (enq - s.mark_enq >= segment_ns()) put_mark(s, stream, dev, enq);
    return true;
  }
  g_state.counts.held.fetch_add(1, std::memory_order_relaxed);
  const bool gate = !closed || wants_new_gate(enq, s.gate_at[gates % kGates].load(std::memory_order_relaxed), gates,
                                              gate_word(s).load(std::memory_order_relaxed), segment_ns());
  // Not held back where no gate was there and none could be put: it waits on the CPU.
  return !gate || put_gate(s, stream, dev, gates + 1, enq) || closed;
}

}  // namespace

bool wants_new_gate(int64_t enq, int64_t last_gate_at, uint32_t gates, uint32_t word, int64_t segment) {
  return enq - last_gate_at >= segment && gates - word < kGates - 1;
}

// Out of line, also when the hook is optimised across files: every launch entry point reaches
// it, and inlined there it would lengthen the code of the lone launch path too.
[[gnu::noinline]] bool park_on_stream(int device, int gpu, CUstream stream) {
  if (g_state.gate_state.load(std::memory_order_acquire) != kGateReady) {
    setup_gates(device);
    if (g_state.gate_state.load(std::memory_order_acquire) != kGateReady) return false;
  }
  Device& dev = g_state.devices[device];
  if (over_cap(dev)) wait_at_cap(dev);
  Slot* s = slot_of(device, stream);
  if (s == nullptr) return false;
  const bool holding = client::token_try(gpu);
  // One thread at a time decides and puts a gate on a stream (rarely contended: threads
  // seldom launch on one stream at once), so that no launch that must wait slips past.
  while (s->inserting.exchange(1, std::memory_order_acquire) != 0) __builtin_ia32_pause();
  const bool ok = let_go_or_hold_back(*s, stream, dev, holding);
  s->inserting.store(0, std::memory_order_release);
  return ok;
}

namespace {

// Segments let run on the stream (gate word `w`) and not seen complete, up to `min_ahead`.
// Work let run before the first closed gate and not seen complete is a segment ahead.
int segments_ahead(const Slot& s, uint32_t w, uint32_t gates, int min_ahead) {
  int ahead = 0;
  for (uint32_t j = w; j != 0 && gates - j < kGates - 1 && ahead < min_ahead; --j, ++ahead)
    if (s.gate_at[j % kGates].load(std::memory_order_relaxed) < s.done_ns) break;
  if (ahead == 0 && gate_closed(w, gates) && s.gate_at[(w + 1) % kGates].load(std::memory_order_relaxed) > s.done_ns)
    ahead = 1;
  return ahead;
}

// The estimated work behind gate `next`: up to the next gate, or all launched after the last.
int64_t segment_behind(const Slot& s, uint32_t next, uint32_t gates) {
  const int64_t end = next == gates ? s.enq_ns.load(std::memory_order_acquire)
                                    : s.gate_at[(next + 1) % kGates].load(std::memory_order_relaxed);
  return std::max<int64_t>(0, end - s.gate_at[next % kGates].load(std::memory_order_relaxed));
}

// Opens the stream's gates while the work let run stays within `bound`, or while fewer than
// `min_ahead` of its segments are ahead. True when it opened some.
bool open_within_bound(Slot& s, Look& look, int64_t bound, int min_ahead) {
  std::atomic<uint32_t>& word = gate_word(s);
  const uint32_t gates = s.gates.load(std::memory_order_acquire);
  const uint32_t from = word.load(std::memory_order_relaxed);
  uint32_t w = from;
  int ahead = segments_ahead(s, w, gates, min_ahead);
  while (gate_closed(w, gates)) {
    const int64_t len = segment_behind(s, w + 1, gates);
    if (look.runnable + len > bound && ahead >= min_ahead) break;
    look.runnable += len;
    ahead++;
    w++;
  }
  if (w != from) word.store(w, std::memory_order_release);
  if (gate_closed(w, gates)) look.parked = true;
  return w != from;
}

}  // namespace

// Opens the gates of the device's streams while the work let run stays within the bound,
// and on each stream while fewer than `min_ahead` of its segments are let run and not seen
// complete (so the GPU does not wait for the next pass; and per stream, so that a stream
// whose work waits for another's held back work cannot stop that one from being let run);
// everything when the bound does not apply.
bool open_gates(int device, Look& look, bool everything) {
  bool opened = false;
  const int64_t bound = bound_ns();
  const int min_ahead = g_state.higher.load(std::memory_order_relaxed) ? 1 : 2;
  for (Slot& s : g_state.slots) {
    if (s.key.load(std::memory_order_acquire) == 0 || s.device.load(std::memory_order_acquire) != device) continue;
    if (everything) {
      opened |= gate_closed(gate_word(s).load(std::memory_order_relaxed), s.gates.load(std::memory_order_acquire));
      open_all(s);
      continue;
    }
    opened |= open_within_bound(s, look, bound, min_ahead);
  }
  return opened;
}

}  // namespace cuslice::activity
