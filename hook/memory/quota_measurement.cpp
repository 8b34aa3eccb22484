// Corrections of the ledgers from measurement (quota.h): the pools' real reserves, the
// process's usage as NVML reads it (memory held outside hooked calls, charged as unexplained),
// the contexts' calibration, and what cuMemGetInfo needs before it shows the view. Slow paths
// only, under the slow-path mutex. Owns the pools' registration (set_pool_reserves()):
// pool_accounting.cpp sits above quota and is reached only through it. Writes a ledger's
// measured figures (unexplained, context charge, when last measured) and `used` only through
// adjust() and uncharge(). May call driver, allocation_table, process_usage, scheduler_link,
// settings, log and the client.
#include <atomic>
#include <mutex>

#include "hook/base/log.h"
#include "hook/bookkeeping/allocation_table.h"
#include "hook/bookkeeping/process_usage.h"
#include "hook/link/client.h"
#include "hook/link/scheduler_link.h"
#include "hook/memory/quota.h"
#include "hook/memory/quota_ledger.h"
#include "protocol/clock.h"

namespace cuslice::quota {
namespace {

// The pools' part of the ledger (set_pool_reserves(); none registered: no pools to measure).
std::atomic<uint64_t (*)(int)> g_measure_pools{nullptr};
std::atomic<bool (*)(int)> g_trim_pools{nullptr};

uint64_t measure_pool_reserves(int device) {
  auto measure = g_measure_pools.load(std::memory_order_acquire);
  return measure != nullptr ? measure(device) : 0;
}

// What the driver says the process holds on a device (NVML), with the ledger's operation
// counts read before it, and between the two what the pools reserve where asked.
struct Reading {
  uint64_t started = 0;
  uint64_t finished = 0;
  uint64_t pools = 0;
  uint64_t actual = 0;
};

// Under g_slow. False: no reading.
bool read_usage(int device, const internal::Ledger& l, bool with_pools, Reading* r) {
  r->started = l.ops_started.load(std::memory_order_acquire);
  r->finished = l.ops_finished.load(std::memory_order_acquire);
  if (with_pools) r->pools = measure_pool_reserves(device);
  return process_usage::device_bytes(device, &r->actual);
}

}  // namespace

namespace internal {

bool trim_pool_reserves(int device) {
  auto trim = g_trim_pools.load(std::memory_order_acquire);
  return trim != nullptr && trim(device);
}

void measure_if_due(int device, Ledger& l, uint64_t checkpoint) {
  uint64_t highest = l.measured_checkpoint.load(std::memory_order_relaxed);
  bool due = false;
  while (checkpoint > highest && !due)
    due = l.measured_checkpoint.compare_exchange_weak(highest, checkpoint, std::memory_order_relaxed);
  if (!due) {
    const int64_t now = coarse_now_ns();
    int64_t last = l.last_measure_ns.load(std::memory_order_relaxed);
    if (now - last < kMeasureIntervalNs ||
        !l.last_measure_ns.compare_exchange_strong(last, now, std::memory_order_relaxed))
      return;
  }
  refresh(device);
}

}  // namespace internal

using namespace internal;

void refresh(int device) {
  Ledger* l = counted(device);
  if (l == nullptr) return;
  std::lock_guard<std::mutex> lock(g_slow);
  // A reading is exact only if nothing changed while it was taken: no hooked allocation or
  // free under way or begun, and the pools' reserve the same before and after.
  Reading r;
  if (!read_usage(device, *l, true, &r)) return;
  const bool quiet = r.started == r.finished && measure_pool_reserves(device) == r.pools &&
                     l->ops_started.load(std::memory_order_acquire) == r.started &&
                     l->ops_finished.load(std::memory_order_acquire) == r.finished;
  l->last_measure_ns.store(coarse_now_ns(), std::memory_order_relaxed);
  // What the process holds beyond what the ledger can explain is charged as unexplained
  // (the headroom stays free beside it: charges keep it free of the limit). Such a charge is
  // raised by any reading, but lowered (memory given back, e.g. pages small allocations no
  // longer share) only by a quiet one: an allocation in flight is in the ledger and not yet
  // in the reading, and would otherwise pass for memory given back.
  const uint64_t old = l->unexplained.load(std::memory_order_acquire);
  const uint64_t known = l->used.load(std::memory_order_acquire) - old;
  const uint64_t want = r.actual > known ? r.actual - known : 0;
  if (want == old || (want < old && !quiet)) return;
  l->unexplained.store(want, std::memory_order_release);
  adjust(device, static_cast<int64_t>(want) - static_cast<int64_t>(old));
  CUSLICE_LOG(kDebug, "device %d: %llu bytes held outside hooked calls are charged", device,
              static_cast<unsigned long long>(want));
}

void calibrate_context(int device) {
  Ledger* l = counted(device);
  if (l == nullptr) return;
  std::lock_guard<std::mutex> lock(g_slow);
  Reading r;
  if (!read_usage(device, *l, false, &r)) return;  // keep the estimate
  // Right after a context is created the process holds little else; what the driver
  // reports beyond the ledger's other charges is the contexts' own memory. Other threads'
  // allocations in flight would pass for context memory given back: then only raise.
  const uint64_t ctx = l->context_charge.load(std::memory_order_acquire);
  const uint64_t others = l->used.load(std::memory_order_acquire) - ctx;
  uint64_t target = r.actual > others ? r.actual - others : 0;
  const bool quiet = r.started == r.finished && l->ops_started.load(std::memory_order_acquire) == r.started;
  if (target < ctx && !quiet) target = ctx;
  l->last_measure_ns.store(coarse_now_ns(), std::memory_order_relaxed);
  l->context_charge.store(target, std::memory_order_release);
  adjust(device, static_cast<int64_t>(target) - static_cast<int64_t>(ctx));
  CUSLICE_LOG(kDebug, "device %d: contexts hold %llu bytes (estimate was %llu)", device,
              static_cast<unsigned long long>(target), static_cast<unsigned long long>(ctx));
}

void refresh_view(int device) {
  Ledger* l = counted(device);
  if (l == nullptr) return;
  // Pools are measured cheaply. Memory measured outside hooked calls is measured again (an NVML
  // reading, microseconds) so that what was given back shows; so is what the tenant keeps
  // free (warm-ups end, peers measure what they hold).
  if (l->unexplained.load(std::memory_order_relaxed) > 0)
    refresh(device);
  else
    measure_pools(device);
  // At most once a measuring interval: a reconciliation reads NVML for the tenant's
  // processes (about 17 µs on an H100), and some applications ask for free memory often.
  if (scheduler_link::enabled() && client::tenant_memory_kept(scheduler_link::gpu(device)) > 0)
    reconcile_if_due(device, *l);
}

void measure_pools(int device) {
  if (counted(device) == nullptr) return;
  std::lock_guard<std::mutex> lock(g_slow);
  measure_pool_reserves(device);
}

void forget_allocations(int device) {
  if (counted(device) == nullptr) return;
  const uint64_t freed = device_pointers().forget_device(device) + arrays().forget_device(device);
  uncharge(device, freed);
  refresh(device);
}

void set_pool_reserves(PoolReserves reserves) {
  g_measure_pools.store(reserves.measure, std::memory_order_release);
  g_trim_pools.store(reserves.trim, std::memory_order_release);
}

}  // namespace cuslice::quota
