// The per-device ledgers and their slow paths, and the tenant's reconciliation (quota.h).
// May call driver, allocation_table, process_usage, scheduler_link, settings, log and the
// client; the pools' reserves only through the functions registered with set_pool_reserves()
// (pool_accounting.cpp sits above this file: it charges the ledger).
#include "quota.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "allocation_table.h"
#include "client.h"
#include "clock.h"
#include "driver.h"
#include "fork_child.h"
#include "log.h"
#include "process_usage.h"
#include "scheduler_link.h"
#include "saturating.h"
#include "settings.h"
#include "shm_protocol.h"

namespace cuslice::quota {
namespace {

// One device's ledger. `used` is what the process holds by the hook's account; under a
// scheduler every change to it is mirrored to the tenant's counter in the shared segment
// (grow / shrink / reserve below are the only writers).
struct alignas(64) Ledger {
  std::atomic<uint64_t> used{0};
  std::atomic<uint64_t> limit{kUnlimited};       // CUSLICE_MEMORY_LIMIT, resolved
  std::atomic<unsigned> checkpoint_shift{64};    // log2 of the checkpoint step; 64: none
  std::atomic<uint64_t> context_charge{0};
  std::atomic<uint64_t> small_bytes{0};          // live allocations under kGranule, summed
  std::atomic<int64_t> last_measure_ns{0};
  std::atomic<uint64_t> measured_checkpoint{0};  // highest checkpoint a reading was taken at
  std::atomic<uint64_t> unexplained{0};          // measured memory no hooked call accounts for
  std::atomic<uint64_t> ops_started{0};          // Operations begun / ended: equal when none runs
  std::atomic<uint64_t> ops_finished{0};
  std::atomic<int64_t> last_reconcile_ns{0};     // the tenant's, at a sixteenth of its quota
};

// Memory the driver takes without an allocation call (code of kernels loaded at their first
// launch) is found by reading the process's usage. Besides the slow path, that reading is
// taken whenever a charge carries `used` past one of about kCheckpoints steps of the limit
// for the first time, or again once kMeasureIntervalNs have passed (usage going up and down across
// one checkpoint must not read NVML every time), so such memory is charged long before the
// limit is reached.
constexpr uint64_t kCheckpoints = 16;
constexpr int64_t kMeasureIntervalNs = 50'000'000;

Ledger g_ledger[kMaxDevices];
std::atomic<int> g_device_count{0};  // 0 until cuInit succeeded through the hook
std::atomic<bool> g_limits_resolved{false};
std::mutex g_slow;  // slow paths only: limit resolution, refresh

using CtxGetDevice = CUresult (*)(CUdevice*);
std::atomic<CtxGetDevice> g_ctx_get_device{nullptr};

// The pools' part of the ledger (set_pool_reserves(); none registered: no pools to settle).
std::atomic<uint64_t (*)(int)> g_settle_pools{nullptr};
std::atomic<bool (*)(int)> g_trim_pools{nullptr};

uint64_t settle_pool_reserves(int device) {
  auto settle = g_settle_pools.load(std::memory_order_acquire);
  return settle != nullptr ? settle(device) : 0;
}

bool trim_pool_reserves(int device) {
  auto trim = g_trim_pools.load(std::memory_order_acquire);
  return trim != nullptr && trim(device);
}

Ledger* ledger(int device) {
  return device >= 0 && device < kMaxDevices ? &g_ledger[device] : nullptr;
}

// The ledger of a device whose memory is counted (a local limit, or a scheduler), else null.
Ledger* counted(int device) {
  Ledger* l = ledger(device);
  return l != nullptr && (settings().has_limit[device] || scheduler_link::enabled()) ? l : nullptr;
}

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

// The tenant's reconciliation: what every process of the tenant must leave free of its quota
// besides the headroom (client.h, shm::TenantGpuUse::kept_free), computed again from the
// driver's figures: for each of the tenant's processes, what NVML says it holds beyond what
// it charged (memory its own hook has not measured yet), or its warm-up allowance while it is
// young if that is more. Buffers for the slow path, under g_slow.
constexpr unsigned kMaxListed = 256;
client::TenantProcess g_tenant_processes[shm::kMaxProcesses];
process_usage::Usage g_listed[kMaxListed];

uint64_t tenant_keep_locked(int device, int gpu) {
  unsigned listed = 0;
  if (!process_usage::device_processes(device, g_listed, kMaxListed, &listed)) listed = 0;
  const size_t n = client::tenant_processes(gpu, now_ns(), g_tenant_processes, shm::kMaxProcesses);
  const uint64_t allowance = settings().context_headroom;
  const uint32_t self = static_cast<uint32_t>(getpid());
  uint64_t keep = 0;
  for (size_t i = 0; i < n; ++i) {
    const client::TenantProcess& p = g_tenant_processes[i];
    // This process by its own pid: the daemon's namespace may differ from NVML's.
    const uint32_t pid = p.self ? self : static_cast<uint32_t>(p.pid);
    uint64_t held = 0;
    for (unsigned j = 0; j < listed; ++j)
      if (g_listed[j].pid == pid) {
        held = g_listed[j].bytes;
        break;
      }
    uint64_t beyond = held > p.charged ? held - p.charged : 0;
    if (p.young && beyond < allowance) beyond = allowance;
    keep = saturating_add(keep, beyond);
  }
  return keep;
}

// Computes the tenant's kept_free again and stores it, unless another process changed it
// meanwhile (then again, a few times; after that the other's value stands). `give_up`: this
// process needs the room itself, so its own warm-up allowance ends first.
void reconcile(int device, bool give_up) {
  if (!scheduler_link::enabled()) return;
  const int gpu = scheduler_link::gpu(device);
  std::lock_guard<std::mutex> lock(g_slow);
  if (give_up) client::memory_end_warmup(gpu);
  for (int attempt = 0; attempt < 4; ++attempt) {
    const uint64_t before = client::tenant_memory_kept(gpu);
    const uint64_t keep = tenant_keep_locked(device, gpu);
    if (client::tenant_memory_replace_kept(gpu, before, keep)) {
      if (keep != before)
        CUSLICE_LOG(kDebug, "device %d: the tenant keeps %llu bytes free (was %llu)", device,
                    static_cast<unsigned long long>(keep), static_cast<unsigned long long>(before));
      return;
    }
  }
}

void reconcile_if_due(int device, Ledger& l) {
  const int64_t now = coarse_now_ns();
  int64_t last = l.last_reconcile_ns.load(std::memory_order_relaxed);
  if (now - last < kMeasureIntervalNs ||
      !l.last_reconcile_ns.compare_exchange_strong(last, now, std::memory_order_relaxed))
    return;
  reconcile(device, /*give_up=*/false);
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
  settle_pools(device);
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

void refresh(int device) {
  Ledger* l = counted(device);
  if (l == nullptr) return;
  std::lock_guard<std::mutex> lock(g_slow);
  // A reading is exact only if nothing changed while it was taken: no hooked allocation or
  // free under way or begun, and the pools' reserve the same before and after.
  const uint64_t started = l->ops_started.load(std::memory_order_acquire);
  const uint64_t finished = l->ops_finished.load(std::memory_order_acquire);
  const uint64_t pools = settle_pool_reserves(device);
  uint64_t actual = 0;
  if (!process_usage::device_bytes(device, &actual)) return;
  const bool quiet = started == finished && settle_pool_reserves(device) == pools &&
                     l->ops_started.load(std::memory_order_acquire) == started &&
                     l->ops_finished.load(std::memory_order_acquire) == finished;
  l->last_measure_ns.store(coarse_now_ns(), std::memory_order_relaxed);
  // What the process holds beyond what the ledger can explain is charged as unexplained
  // (the headroom stays free beside it: charges keep it free of the limit). Such a charge is
  // raised by any reading, but lowered (memory given back, e.g. pages small allocations no
  // longer share) only by a quiet one: an allocation in flight is in the ledger and not yet
  // in the reading, and would otherwise pass for memory given back.
  const uint64_t old = l->unexplained.load(std::memory_order_acquire);
  const uint64_t known = l->used.load(std::memory_order_acquire) - old;
  const uint64_t want = actual > known ? actual - known : 0;
  if (want == old || (want < old && !quiet)) return;
  l->unexplained.store(want, std::memory_order_release);
  adjust(device, static_cast<int64_t>(want) - static_cast<int64_t>(old));
  CUSLICE_LOG(kDebug, "device %d: %llu bytes held outside hooked calls are charged", device,
              static_cast<unsigned long long>(want));
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

void calibrate_context(int device) {
  Ledger* l = counted(device);
  if (l == nullptr) return;
  std::lock_guard<std::mutex> lock(g_slow);
  const uint64_t started = l->ops_started.load(std::memory_order_acquire);
  const uint64_t finished = l->ops_finished.load(std::memory_order_acquire);
  uint64_t actual = 0;
  if (!process_usage::device_bytes(device, &actual)) return;  // keep the estimate
  // Right after a context is created the process holds little else; what the driver
  // reports beyond the ledger's other charges is the contexts' own memory. Other threads'
  // allocations in flight would pass for context memory given back: then only raise.
  const uint64_t ctx = l->context_charge.load(std::memory_order_acquire);
  const uint64_t others = l->used.load(std::memory_order_acquire) - ctx;
  uint64_t target = actual > others ? actual - others : 0;
  const bool quiet = started == finished && l->ops_started.load(std::memory_order_acquire) == started;
  if (target < ctx && !quiet) target = ctx;
  l->last_measure_ns.store(coarse_now_ns(), std::memory_order_relaxed);
  l->context_charge.store(target, std::memory_order_release);
  adjust(device, static_cast<int64_t>(target) - static_cast<int64_t>(ctx));
  CUSLICE_LOG(kDebug, "device %d: contexts hold %llu bytes (estimate was %llu)", device,
              static_cast<unsigned long long>(target), static_cast<unsigned long long>(ctx));
}

void begin_warmup(int device) {
  const uint64_t warmup = settings().context_warmup_ns;
  if (counted(device) == nullptr || !scheduler_link::enabled() || warmup == 0) return;
  const int64_t now = now_ns();
  const uint64_t left = static_cast<uint64_t>(INT64_MAX - now);
  const int64_t until = now + static_cast<int64_t>(warmup < left ? warmup : left);
  client::memory_begin_warmup(scheduler_link::gpu(device), now, until, settings().context_headroom);
}

void refresh_view(int device) {
  Ledger* l = counted(device);
  if (l == nullptr) return;
  // Pools settle cheaply. Memory measured outside hooked calls is measured again (an NVML
  // reading, microseconds) so that what was given back shows; so is what the tenant keeps
  // free (warm-ups end, peers measure what they hold).
  if (l->unexplained.load(std::memory_order_relaxed) > 0)
    refresh(device);
  else
    settle_pools(device);
  // At most once a measuring interval: a reconciliation reads NVML for the tenant's
  // processes (about 17 µs on an H100), and some applications ask for free memory often.
  if (scheduler_link::enabled() && client::tenant_memory_kept(scheduler_link::gpu(device)) > 0)
    reconcile_if_due(device, *l);
}

void settle_pools(int device) {
  if (counted(device) == nullptr) return;
  std::lock_guard<std::mutex> lock(g_slow);
  settle_pool_reserves(device);
}

void forget_allocations(int device) {
  if (counted(device) == nullptr) return;
  const uint64_t freed = device_pointers().forget_device(device) + arrays().forget_device(device);
  uncharge(device, freed);
  refresh(device);
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

void set_pool_reserves(PoolReserves reserves) {
  g_settle_pools.store(reserves.settle, std::memory_order_release);
  g_trim_pools.store(reserves.trim, std::memory_order_release);
}

}  // namespace cuslice::quota
