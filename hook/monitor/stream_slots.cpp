// The stream slot table and the monitor's event records (stream_slots.h). May call
// monitor_state, monitor_driver and gate_words.
#include "hook/monitor/stream_slots.h"

#include <algorithm>

#include "hook/monitor/gate_words.h"
#include "hook/monitor/monitor_driver.h"

namespace cuslice::activity {

namespace {

size_t hash_key(uintptr_t k) { return static_cast<size_t>((k >> 4) * 0x9E3779B97F4A7C15ull >> 56); }

// The default stream (legacy, or a thread's per-thread one): the monitor reaches both through
// CU_STREAM_LEGACY, which orders after every blocking stream's work (including per-thread
// default streams).
bool is_default(CUstream s) { return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD; }

bool use_ctx(CUcontext ctx) {
  if (ctx == nullptr || ctx == g_state.monitor_ctx) return true;
  if (g_state.drv.ctx_set(ctx) != CUDA_SUCCESS) {
    g_state.monitor_ctx = nullptr;
    return false;
  }
  g_state.monitor_ctx = ctx;
  return true;
}

}  // namespace

Slot* find_or_add(uintptr_t key, bool add) {
  size_t i = hash_key(key);
  for (int probe = 0; probe < kSlots; ++probe, ++i) {
    Slot& s = g_state.slots[i % kSlots];
    uintptr_t cur = s.key.load(std::memory_order_acquire);
    if (cur == key) return &s;
    if (cur == 0) {
      if (!add) return nullptr;
      if (s.key.compare_exchange_strong(cur, key, std::memory_order_acq_rel)) return &s;
      if (cur == key) return &s;
    }
  }
  return nullptr;
}

namespace {

// The table searched (the thread's first launch on this stream, or a default stream), and the
// slot of a created stream remembered for the thread's next launch.
[[gnu::noinline]] Slot* slot_searched(int device, CUstream stream) {
  uintptr_t key;
  if (is_default(stream)) {
    CUcontext ctx = nullptr;
    g_state.drv.ctx_get(&ctx);
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
    g_state.drv.ctx_get(&ctx);
    s->ctx = ctx;
    s->device.compare_exchange_strong(expected, device, std::memory_order_acq_rel);
  }
  // A default stream's slot is its context's, which may change between launches.
  if (!is_default(stream)) {
    t_last_key = key;
    t_last_slot = s;
  }
  return s;
}

}  // namespace

Slot* slot_of(int device, CUstream stream) {
  const uintptr_t key = reinterpret_cast<uintptr_t>(stream);
  Slot* s = t_last_slot;
  if (key == t_last_key && s != nullptr && s->key.load(std::memory_order_acquire) == key &&
      s->device.load(std::memory_order_acquire) == device)
    return s;
  return slot_searched(device, stream);
}

void mark(int device, CUstream stream, uint32_t est) {
  Slot* s = slot_of(device, stream);
  if (s == nullptr) return;
  // Marked before its estimate counts: the monitor, having read the sum with it, must not then
  // find the stream unmarked and take all of the sum for done.
  if (!s->dirty.load(std::memory_order_seq_cst)) s->dirty.store(1, std::memory_order_seq_cst);
  if (est != 0) s->enq_ns.fetch_add(est, std::memory_order_seq_cst);
}

bool record(Slot& s, uintptr_t key) {
  if (s.count == kEventsPerSlot) return false;
  if (!use_ctx(s.ctx)) return true;  // context gone
  const bool legacy = key & 1;
  CUstream stream = legacy ? CU_STREAM_LEGACY : reinterpret_cast<CUstream>(key);
  if (!legacy) {
    // Captured work runs nothing; there is nothing to wait for on this stream.
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (g_state.drv.is_capturing(stream, &st) != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE) return true;
  }
  const int at = (s.head + s.count) % kEventsPerSlot;
  if (s.events[at] == nullptr && g_state.drv.event_create(&s.events[at], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
    return false;
  const uint64_t launched = g_state.devices[s.device.load(std::memory_order_relaxed)].launched.load(std::memory_order_acquire);
  // Read before the record: what it is taken to cover errs short (runnable work, left long).
  const int64_t enq = s.enq_ns.load(std::memory_order_acquire);
  const uint32_t gates = s.gates.load(std::memory_order_acquire);
  if (g_state.drv.event_record(s.events[at], stream) != CUDA_SUCCESS) return true;  // stream gone
  g_state.counts.records++;
  s.launches_at[at] = launched;
  s.rec_enq[at] = enq;
  s.rec_gates[at] = gates;
  s.count++;
  return true;
}

void raise_completed(int device, uint64_t to) {
  std::atomic<uint64_t>& completed = g_state.devices[device].completed;
  uint64_t cur = completed.load(std::memory_order_relaxed);
  while (to > cur && !completed.compare_exchange_weak(cur, to, std::memory_order_release)) {
  }
}

bool retire(Slot& s) {
  while (s.count > 0) {
    use_ctx(s.ctx);
    const CUresult r = g_state.drv.event_query(s.events[s.head]);
    g_state.counts.queries++;
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
    if (e != nullptr && g_state.drv.event_destroy) g_state.drv.event_destroy(e);
    e = nullptr;
  }
  s.head = s.count = 0;
  s.ctx = nullptr;
  s.device.store(-1, std::memory_order_relaxed);
  s.dirty.store(0, std::memory_order_relaxed);
  s.key.store(0, std::memory_order_release);
}

}  // namespace cuslice::activity
