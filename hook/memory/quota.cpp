// The per-device ledgers and their charges (quota.h): limits resolved, the check and the
// reservation in one step, small allocations and contexts charged, the views, fork. Defines
// the ledgers' state (quota_ledger.h); quota_measurement.cpp corrects it from readings and
// quota_tenant.cpp reconciles the tenant, and this file reaches those two only through their
// slow paths. May call driver, allocation_table, scheduler_link, settings, log and the client.
#include "hook/memory/quota.h"

#include <atomic>
#include <mutex>

#include "hook/base/fork_child.h"
#include "hook/base/log.h"
#include "hook/base/settings.h"
#include "hook/bookkeeping/allocation_table.h"
#include "hook/driver/driver.h"
#include "hook/link/client.h"
#include "hook/link/scheduler_link.h"
#include "hook/memory/quota_ledger.h"
#include "protocol/saturating.h"

namespace cuslice::quota {
namespace internal {

Ledger g_ledger[kMaxDevices];
std::mutex g_slow;

}  // namespace internal

using namespace internal;

namespace {

// Memory the driver takes without an allocation call (code of kernels loaded at their first
// launch) is found by reading the process's usage. Besides the slow path, that reading is
// taken whenever a charge carries `used` past one of about kCheckpoints steps of the limit
// for the first time, or again once kMeasureIntervalNs have passed (usage going up and down across
// one checkpoint must not read NVML every time), so such memory is charged long before the
// limit is reached.
constexpr uint64_t kCheckpoints = 16;

std::atomic<int> g_device_count{0};  // 0 until cuInit succeeded through the hook
std::atomic<bool> g_limits_resolved{false};

using CtxGetDevice = CUresult (*)(CUdevice*);
std::atomic<CtxGetDevice> g_ctx_get_device{nullptr};

void grow(Ledger& l, int device, uint64_t bytes) {
  l.used.fetch_add(bytes, std::memory_order_acq_rel);
  if (scheduler_link::enabled()) client::memory_charge(scheduler_link::gpu(device), bytes);
}

void shrink(Ledger& l, int device, uint64_t bytes) {
  l.used.fetch_sub(bytes, std::memory_order_acq_rel);
  if (scheduler_link::enabled()) client::memory_release(scheduler_link::gpu(device), bytes);
}

void resolve_limits_locked() {
  if (g_limits_resolved.load(std::memory_order_acquire)) return;
  const Settings& s = settings();
  int count = 0;
  auto get_count = reinterpret_cast<CUresult (*)(int*)>(cuda_symbol("cuDeviceGetCount"));
  auto total_mem = real<Sym::cuDeviceTotalMem_v2>();
  if (get_count == nullptr || total_mem == nullptr || get_count(&count) != CUDA_SUCCESS) return;
  if (count > kMaxDevices) count = kMaxDevices;
  for (int d = 0; d < count; ++d) {
    if (!s.has_limit[d]) continue;
    size_t total = 0;
    if (total_mem(&total, d) != CUDA_SUCCESS) continue;
    uint64_t want = s.limit[d].resolve(total);
    if (want > total) {
      CUSLICE_LOG(kWarn, "device %d: quota of %llu bytes exceeds the device's %zu bytes; the device is the limit",
                  d, static_cast<unsigned long long>(want), total);
      want = total;
    }
    g_ledger[d].limit.store(want, std::memory_order_release);
    // Checkpoints every power of two near a sixteenth of the limit: a shift, not a division,
    // on the allocation path.
    const uint64_t step = want / kCheckpoints;
    g_ledger[d].checkpoint_shift.store(step == 0 ? 64 : 63 - __builtin_clzll(step), std::memory_order_release);
    CUSLICE_LOG(kInfo, "device %d: memory quota %llu bytes", d, static_cast<unsigned long long>(want));
  }
  scheduler_link::on_cuda_initialised(count);
  g_ctx_get_device.store(reinterpret_cast<CtxGetDevice>(cuda_symbol("cuCtxGetDevice")),
                         std::memory_order_release);
  g_device_count.store(count, std::memory_order_release);
  g_limits_resolved.store(true, std::memory_order_release);
}

// What charges may take of a limit: all of it but the headroom kept free for memory the
// driver takes without an allocation call (unlimited stays unlimited).
uint64_t allocatable(uint64_t limit, uint64_t keep) {
  if (limit == kUnlimited) return kUnlimited;
  return limit > keep ? limit - keep : 0;
}

enum class Outcome { kReserved, kOverLocal, kOverTenant };

// The check and the reservation in one step: the local limit by one compare-and-swap, then
// the tenant's quota by another (client.h); a refusal of the second undoes the first.
// *checkpoint: the checkpoint the charge carried `used` into, 0 if it crossed none;
// *tenant_step: the charge carried the tenant's counter past a sixteenth of its quota.
Outcome try_reserve(Ledger& l, int device, uint64_t bytes, uint64_t* checkpoint, bool* tenant_step) {
  const uint64_t keep = settings().context_headroom;
  const uint64_t room = allocatable(l.limit.load(std::memory_order_relaxed), keep);
  uint64_t cur = l.used.load(std::memory_order_relaxed);
  do {
    if (bytes > room || cur > room - bytes) return Outcome::kOverLocal;
  } while (!l.used.compare_exchange_weak(cur, cur + bytes, std::memory_order_acq_rel,
                                         std::memory_order_relaxed));
  if (scheduler_link::enabled() &&
      client::memory_try_reserve(scheduler_link::gpu(device), bytes, keep, tenant_step) ==
          client::Reserve::kOverQuota) {
    l.used.fetch_sub(bytes, std::memory_order_acq_rel);
    return Outcome::kOverTenant;
  }
  const unsigned shift = l.checkpoint_shift.load(std::memory_order_relaxed);
  *checkpoint = shift < 64 && (cur >> shift) != ((cur + bytes) >> shift) ? (cur + bytes) >> shift : 0;
  return Outcome::kReserved;
}

Outcome try_reserve(Ledger& l, int device, uint64_t bytes) {
  uint64_t checkpoint;
  return try_reserve(l, device, bytes, &checkpoint, nullptr);
}

}  // namespace

void on_cuda_initialised() {
  if (g_limits_resolved.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(g_slow);
  resolve_limits_locked();
}

bool active() { return settings().any_limit || scheduler_link::enabled(); }

bool accounted(int device) { return counted(device) != nullptr; }

int current_device() {
  if (!g_limits_resolved.load(std::memory_order_acquire)) on_cuda_initialised();
  // One device visible: no need to ask the driver on every allocation.
  if (g_device_count.load(std::memory_order_relaxed) == 1) return 0;
  CtxGetDevice get = g_ctx_get_device.load(std::memory_order_acquire);
  CUdevice dev = -1;
  if (get == nullptr || get(&dev) != CUDA_SUCCESS) return -1;
  return dev;
}

bool single_device() {
  if (!g_limits_resolved.load(std::memory_order_acquire)) on_cuda_initialised();
  return g_device_count.load(std::memory_order_relaxed) == 1;
}

uint64_t limit(int device) {
  Ledger* l = ledger(device);
  if (l == nullptr || !settings().has_limit[device]) return kUnlimited;
  if (!g_limits_resolved.load(std::memory_order_acquire)) on_cuda_initialised();
  return l->limit.load(std::memory_order_relaxed);
}

uint64_t used(int device) {
  Ledger* l = ledger(device);
  return l ? l->used.load(std::memory_order_relaxed) : 0;
}

View view(int device) {
  // Free is what charges may still take: what is kept free (the headroom, and in a tenant
  // what the tenant keeps for its processes' unmeasured memory and warm-ups) counts as used.
  const uint64_t keep = settings().context_headroom;
  View v{limit(device), used(device)};
  if (v.total != kUnlimited) v.used = v.total - allocatable(v.total, keep) + v.used;
  if (scheduler_link::enabled()) {
    // Inside a tenant the device is the tenant's quota, shared by all its processes.
    const int gpu = scheduler_link::gpu(device);
    const uint64_t tenant_quota = client::tenant_memory_quota(gpu);
    if (tenant_quota != kUnlimited) {
      const uint64_t tenant_used = client::tenant_memory_used(gpu);
      const uint64_t kept = saturating_add(keep, client::tenant_memory_kept(gpu));
      const uint64_t tenant_room = allocatable(tenant_quota, kept);
      const uint64_t local_free = v.total > v.used ? v.total - v.used : 0;
      const uint64_t tenant_free = tenant_room > tenant_used ? tenant_room - tenant_used : 0;
      if (tenant_quota < v.total) v.total = tenant_quota;
      const uint64_t free = tenant_free < local_free ? tenant_free : local_free;
      v.used = v.total > free ? v.total - free : 0;
    }
  }
  return v;
}

bool try_charge(int device, uint64_t bytes) {
  Ledger* l = counted(device);
  if (l == nullptr) return true;
  if (!g_limits_resolved.load(std::memory_order_acquire)) on_cuda_initialised();
  uint64_t checkpoint = 0;
  bool tenant_step = false;
  if (try_reserve(*l, device, bytes, &checkpoint, &tenant_step) != Outcome::kReserved) return false;
  if (checkpoint != 0) [[unlikely]] measure_if_due(device, *l, checkpoint);
  if (tenant_step) [[unlikely]] reconcile_if_due(device, *l);
  return true;
}

bool charge(int device, uint64_t bytes) {
  if (try_charge(device, bytes)) return true;
  Ledger* l = counted(device);
  Outcome o;
  // Slow path, cheapest correction first: pool pre-charges replaced by what the pools really
  // reserve (tens of ns per pool), then a reading of the process's usage (microseconds), then
  // (the tenant's quota refused) the tenant's reconciliation: what it keeps free may be
  // allowances no longer needed (warm-ups over, this process's own given up) or memory its
  // processes have measured since.
  measure_pools(device);
  if ((o = try_reserve(*l, device, bytes)) == Outcome::kReserved) return true;
  refresh(device);
  if ((o = try_reserve(*l, device, bytes)) == Outcome::kReserved) return true;
  if (o == Outcome::kOverTenant) {
    reconcile(device, /*give_up=*/true);
    if ((o = try_reserve(*l, device, bytes)) == Outcome::kReserved) return true;
  }
  // Last resort before refusing: pools may hold memory no allocation uses.
  if (trim_pool_reserves(device)) {
    refresh(device);
    if (o == Outcome::kOverTenant) reconcile(device, /*give_up=*/true);
    if ((o = try_reserve(*l, device, bytes)) == Outcome::kReserved) return true;
  }
  if (o == Outcome::kOverTenant) client::note_oom_refusal(scheduler_link::gpu(device));
  CUSLICE_LOG(kInfo, "device %d: refused %llu bytes (used %llu of %llu)", device,
              static_cast<unsigned long long>(bytes),
              static_cast<unsigned long long>(l->used.load(std::memory_order_relaxed)),
              static_cast<unsigned long long>(l->limit.load(std::memory_order_relaxed)));
  return false;
}

void uncharge(int device, uint64_t bytes) {
  if (Ledger* l = counted(device)) shrink(*l, device, bytes);
}

// Each change of the small-allocation total charges the change in whole pages it causes.
// Computed from the value each fetch_add saw, the per-call deltas add up exactly to the pages
// of the final total, whatever the interleaving.
bool charge_small(int device, uint64_t bytes) {
  Ledger* l = counted(device);
  if (l == nullptr) return true;
  const uint64_t before = l->small_bytes.fetch_add(bytes, std::memory_order_acq_rel);
  const uint64_t pages = round_up(before + bytes, kGranule) - round_up(before, kGranule);
  if (pages == 0 || charge(device, pages)) return true;
  // Refused: apply our share of the telescoping sum anyway, then undo the whole step.
  grow(*l, device, pages);
  uncharge_small(device, bytes);
  return false;
}

void uncharge_small(int device, uint64_t bytes) {
  Ledger* l = counted(device);
  if (l == nullptr) return;
  const uint64_t before = l->small_bytes.fetch_sub(bytes, std::memory_order_acq_rel);
  const uint64_t pages = round_up(before, kGranule) - round_up(before - bytes, kGranule);
  if (pages != 0) shrink(*l, device, pages);
}

void adjust(int device, int64_t delta) {
  Ledger* l = counted(device);
  if (l == nullptr || delta == 0) return;
  if (delta > 0)
    grow(*l, device, static_cast<uint64_t>(delta));
  else
    shrink(*l, device, static_cast<uint64_t>(-delta));
}

bool charge_context(int device, uint64_t bytes) {
  Ledger* l = counted(device);
  if (l == nullptr) return true;
  if (!charge(device, bytes)) return false;
  l->context_charge.fetch_add(bytes, std::memory_order_acq_rel);
  return true;
}

void release_context(int device, uint64_t bytes) {
  Ledger* l = counted(device);
  if (l == nullptr) return;
  uint64_t cur = l->context_charge.load(std::memory_order_relaxed), take;
  do {
    take = bytes < cur ? bytes : cur;
  } while (!l->context_charge.compare_exchange_weak(cur, cur - take, std::memory_order_acq_rel));
  shrink(*l, device, take);
}

Operation::Operation(int device) : device_(device) {
  if (Ledger* l = ledger(device)) l->ops_started.fetch_add(1, std::memory_order_acq_rel);
}

Operation::~Operation() {
  if (Ledger* l = ledger(device_)) l->ops_finished.fetch_add(1, std::memory_order_acq_rel);
}

uint64_t unexplained(int device) {
  Ledger* l = ledger(device);
  return l ? l->unexplained.load(std::memory_order_relaxed) : 0;
}

uint64_t context_charge(int device) {
  Ledger* l = ledger(device);
  return l ? l->context_charge.load(std::memory_order_relaxed) : 0;
}

void reset_after_fork() {
  for (Ledger& l : g_ledger) {
    l.used.store(0, std::memory_order_relaxed);
    l.context_charge.store(0, std::memory_order_relaxed);
    l.small_bytes.store(0, std::memory_order_relaxed);
    l.last_measure_ns.store(0, std::memory_order_relaxed);
    l.measured_checkpoint.store(0, std::memory_order_relaxed);
    l.unexplained.store(0, std::memory_order_relaxed);
    l.ops_started.store(0, std::memory_order_relaxed);
    l.ops_finished.store(0, std::memory_order_relaxed);
    l.last_reconcile_ns.store(0, std::memory_order_relaxed);
  }
  device_pointers().reset();
  vmm_handles().reset();
  arrays().reset();
  contexts().reset();
  // The parent may have held the slow-path mutex at fork: the child gets a fresh one.
  renew_in_child(g_slow);
}

}  // namespace cuslice::quota
