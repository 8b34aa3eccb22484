#include "quota.h"

#include <atomic>
#include <mutex>

#include "allocation_table.h"
#include "driver.h"
#include "log.h"
#include "pool_accounting.h"
#include "process_usage.h"
#include "settings.h"

namespace cuslice::quota {
namespace {

struct alignas(64) Ledger {
  std::atomic<uint64_t> used{0};
  std::atomic<uint64_t> limit{kUnlimited};
  std::atomic<uint64_t> context_charge{0};
};

Ledger g_ledger[kMaxDevices];
std::atomic<int> g_device_count{0};  // 0 until cuInit succeeded through the hook
std::atomic<bool> g_limits_resolved{false};
std::mutex g_slow;  // slow paths only: limit resolution, refresh

using CtxGetDevice = CUresult (*)(CUdevice*);
std::atomic<CtxGetDevice> g_ctx_get_device{nullptr};

Ledger* ledger(int device) {
  return device >= 0 && device < kMaxDevices ? &g_ledger[device] : nullptr;
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
    CUSLICE_LOG(kInfo, "device %d: memory quota %llu bytes", d, static_cast<unsigned long long>(want));
  }
  g_ctx_get_device.store(reinterpret_cast<CtxGetDevice>(cuda_symbol("cuCtxGetDevice")),
                         std::memory_order_release);
  g_device_count.store(count, std::memory_order_release);
  g_limits_resolved.store(true, std::memory_order_release);
}

bool try_reserve(Ledger& l, uint64_t bytes) {
  const uint64_t lim = l.limit.load(std::memory_order_relaxed);
  uint64_t cur = l.used.load(std::memory_order_relaxed);
  do {
    if (bytes > lim || cur > lim - bytes) return false;
  } while (!l.used.compare_exchange_weak(cur, cur + bytes, std::memory_order_acq_rel,
                                         std::memory_order_relaxed));
  return true;
}

}  // namespace

void on_cuda_initialised() {
  if (g_limits_resolved.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(g_slow);
  resolve_limits_locked();
}

bool active() { return settings().any_limit; }

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

bool charge(int device, uint64_t bytes) {
  Ledger* l = ledger(device);
  if (l == nullptr || !settings().has_limit[device]) return true;
  if (!g_limits_resolved.load(std::memory_order_acquire)) on_cuda_initialised();
  if (try_reserve(*l, bytes)) return true;
  refresh(device);
  if (try_reserve(*l, bytes)) return true;
  // Last resort before refusing: pools may hold memory no allocation uses.
  if (pool_accounting::trim(device)) {
    refresh(device);
    if (try_reserve(*l, bytes)) return true;
  }
  CUSLICE_LOG(kInfo, "device %d: refused %llu bytes (used %llu of %llu)", device,
              static_cast<unsigned long long>(bytes),
              static_cast<unsigned long long>(l->used.load(std::memory_order_relaxed)),
              static_cast<unsigned long long>(l->limit.load(std::memory_order_relaxed)));
  return false;
}

void uncharge(int device, uint64_t bytes) {
  if (Ledger* l = ledger(device); l != nullptr && settings().has_limit[device])
    l->used.fetch_sub(bytes, std::memory_order_acq_rel);
}

void adjust(int device, int64_t delta) {
  if (Ledger* l = ledger(device); l != nullptr && settings().has_limit[device])
    l->used.fetch_add(static_cast<uint64_t>(delta), std::memory_order_acq_rel);
}

void refresh(int device) {
  Ledger* l = ledger(device);
  if (l == nullptr || !settings().has_limit[device]) return;
  std::lock_guard<std::mutex> lock(g_slow);
  pool_accounting::settle(device);
  // Memory the process holds beyond what the ledger knows was taken by no hooked call
  // (context growth, modules loaded lazily at a kernel's first launch). Charge it. Only ever
  // raised here: a reading taken while another thread is between its reservation and its
  // allocation undercounts, never overcounts.
  uint64_t actual = 0;
  if (!process_usage::device_bytes(device, &actual)) return;
  const uint64_t known = l->used.load(std::memory_order_acquire);
  if (actual > known) {
    const uint64_t extra = actual - known;
    l->context_charge.fetch_add(extra, std::memory_order_relaxed);
    l->used.fetch_add(extra, std::memory_order_acq_rel);
    CUSLICE_LOG(kDebug, "device %d: %llu bytes held outside allocations now charged", device,
                static_cast<unsigned long long>(extra));
  }
}

bool charge_context(int device, uint64_t bytes) {
  Ledger* l = ledger(device);
  if (l == nullptr || !settings().has_limit[device]) return true;
  if (!charge(device, bytes)) return false;
  l->context_charge.fetch_add(bytes, std::memory_order_acq_rel);
  return true;
}

void release_context(int device, uint64_t bytes) {
  Ledger* l = ledger(device);
  if (l == nullptr || !settings().has_limit[device]) return;
  uint64_t cur = l->context_charge.load(std::memory_order_relaxed), take;
  do {
    take = bytes < cur ? bytes : cur;
  } while (!l->context_charge.compare_exchange_weak(cur, cur - take, std::memory_order_acq_rel));
  l->used.fetch_sub(take, std::memory_order_acq_rel);
}

void calibrate_context(int device) {
  Ledger* l = ledger(device);
  if (l == nullptr || !settings().has_limit[device]) return;
  std::lock_guard<std::mutex> lock(g_slow);
  uint64_t actual = 0;
  if (!process_usage::device_bytes(device, &actual)) return;  // keep the estimate
  // Right after a context is created the process holds little else; what the driver
  // reports beyond the ledger's other charges is the contexts' own memory.
  const uint64_t ctx = l->context_charge.load(std::memory_order_acquire);
  const uint64_t others = l->used.load(std::memory_order_acquire) - ctx;
  const uint64_t target = actual > others ? actual - others : 0;
  l->context_charge.store(target, std::memory_order_release);
  l->used.fetch_add(target - ctx, std::memory_order_acq_rel);
  CUSLICE_LOG(kDebug, "device %d: contexts hold %llu bytes (estimate was %llu)", device,
              static_cast<unsigned long long>(target), static_cast<unsigned long long>(ctx));
}

void settle_pools(int device) {
  if (ledger(device) == nullptr || !settings().has_limit[device]) return;
  std::lock_guard<std::mutex> lock(g_slow);
  pool_accounting::settle(device);
}

void forget_allocations(int device) {
  if (ledger(device) == nullptr || !settings().has_limit[device]) return;
  const uint64_t freed = device_pointers().forget_device(device) + arrays().forget_device(device);
  uncharge(device, freed);
  refresh(device);
}

uint64_t context_charge(int device) {
  Ledger* l = ledger(device);
  return l ? l->context_charge.load(std::memory_order_relaxed) : 0;
}

void reset_after_fork() {
  for (Ledger& l : g_ledger) {
    l.used.store(0, std::memory_order_relaxed);
    l.context_charge.store(0, std::memory_order_relaxed);
  }
  device_pointers().reset();
  vmm_handles().reset();
  arrays().reset();
  contexts().reset();
  pool_accounting::reset_after_fork();
  // The parent may have held the slow-path mutex at fork: the child gets a fresh one.
  new (&g_slow) std::mutex();
}

}  // namespace cuslice::quota
