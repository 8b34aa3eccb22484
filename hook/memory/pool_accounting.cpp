// Pool and graph memory reserves (pool_accounting.h). Above quota: may call quota, driver,
// settings and log; quota reaches replace_precharges() and trim() only as registered by startup.cpp.
#include "hook/memory/pool_accounting.h"

#include <atomic>
#include <mutex>

#include "hook/base/fork_child.h"
#include "hook/base/log.h"
#include "hook/base/settings.h"
#include "hook/driver/driver.h"
#include "hook/memory/quota.h"

namespace cuslice::pool_accounting {
namespace {

constexpr int kMaxPools = 256;
// Pre-charges are drawn from a credit the ledger is charged for a batch at a time: most
// stream-ordered allocations then make no reservation of their own (in a tenant, none on the
// tenant's shared counter), only a compare-and-swap on the credit. The credit goes back at
// every replace_precharges(), so the ledger holds at most this much more than the pre-charges
// between two readings (which already hold up to a pool chunk per allocation).
constexpr uint64_t kCreditBatch = 8 * quota::kPoolChunk;

struct alignas(64) DeviceState {
  // Pre-charges not yet replaced by a reading (see replace_precharges()).
  std::atomic<uint64_t> since{0};
  // Pre-charges of allocations whose driver call has not returned yet.
  std::atomic<uint64_t> inflight{0};
  // Charged to the ledger, not drawn by a pre-charge yet (see kCreditBatch).
  std::atomic<uint64_t> credit{0};
  // Graph memory node pre-charges, kept until a graph launch/upload on the device.
  std::atomic<uint64_t> graph_pending{0};
  std::atomic<bool> graph_launched{false};
  // What pools and graph memory reserved at the last reading (guarded by quota's mutex).
  uint64_t last_reading = 0;
  std::atomic<CUmemoryPool> default_pool{nullptr};
};

struct PoolSlot {
  std::atomic<CUmemoryPool> pool{nullptr};
  std::atomic<int> device{-1};
};

DeviceState g_dev[kMaxDevices];
PoolSlot g_pools[kMaxPools];
std::mutex g_registry;  // pool create/destroy only

using GetAttr = CUresult (*)(CUmemoryPool, CUmemPool_attribute, void*);
using GraphAttr = CUresult (*)(CUdevice, CUgraphMem_attribute, void*);
using DefaultPool = CUresult (*)(CUmemoryPool*, CUdevice);
using TrimTo = CUresult (*)(CUmemoryPool, size_t);
using GraphTrim = CUresult (*)(CUdevice);
using StreamGetDevice = CUresult (*)(CUstream, CUdevice*);

DeviceState* state(int device) {
  return device >= 0 && device < kMaxDevices ? &g_dev[device] : nullptr;
}

CUmemoryPool default_pool(int device) {
  DeviceState& d = g_dev[device];
  CUmemoryPool p = d.default_pool.load(std::memory_order_acquire);
  if (p == nullptr) {
    // Racing threads ask the driver for the same pool and store the same value.
    if (auto get = cuda_function<DefaultPool>("cuDeviceGetDefaultMemPool"); get && get(&p, device) == CUDA_SUCCESS)
      d.default_pool.store(p, std::memory_order_release);
  }
  return p;
}

uint64_t pool_attr(GetAttr get, CUmemoryPool pool, CUmemPool_attribute attr) {
  cuuint64_t v = 0;
  return get(pool, attr, &v) == CUDA_SUCCESS ? v : 0;
}

// What every known pool of `device` and its graph memory reserve now.
uint64_t reserved_now(int device) {
  uint64_t total = 0;
  if (auto get = cuda_function<GetAttr>("cuMemPoolGetAttribute")) {
    if (CUmemoryPool p = default_pool(device))
      total += pool_attr(get, p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    for (PoolSlot& s : g_pools) {
      CUmemoryPool p = s.pool.load(std::memory_order_acquire);
      if (p != nullptr && s.device.load(std::memory_order_relaxed) == device)
        total += pool_attr(get, p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    }
  }
  if (auto graph = cuda_function<GraphAttr>("cuDeviceGetGraphMemAttribute")) {
    cuuint64_t v = 0;
    if (graph(device, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v) == CUDA_SUCCESS) total += v;
  }
  return total;
}

bool draw(DeviceState& d, uint64_t p) {
  uint64_t c = d.credit.load(std::memory_order_relaxed);
  do {
    if (c < p) return false;
  } while (!d.credit.compare_exchange_weak(c, c - p, std::memory_order_acq_rel, std::memory_order_relaxed));
  return true;
}

// The pre-charge p from the credit; the credit run out, a new batch if it fits now (without
// the slow path), else p alone as any allocation is charged (slow path and all).
bool pre_charge(DeviceState& d, int device, uint64_t p) {
  if (draw(d, p)) return true;
  if (p < kCreditBatch && quota::try_charge(device, kCreditBatch)) {
    d.credit.fetch_add(kCreditBatch - p, std::memory_order_acq_rel);
    return true;
  }
  return quota::charge(device, p);
}

}  // namespace

bool begin(int device, uint64_t bytes, uint64_t* charged) {
  DeviceState* d = state(device);
  *charged = 0;
  if (d == nullptr || !quota::accounted(device)) return true;
  const uint64_t p = quota::round_up(bytes == 0 ? 1 : bytes, quota::kPoolChunk);
  if (!pre_charge(*d, device, p)) return false;
  // inflight before since: replace_precharges() relies on this order (see there).
  d->inflight.fetch_add(p, std::memory_order_acq_rel);
  d->since.fetch_add(p, std::memory_order_acq_rel);
  *charged = p;
  return true;
}

void end(int device, uint64_t charged, bool succeeded) {
  DeviceState* d = state(device);
  if (d == nullptr || charged == 0) return;
  d->inflight.fetch_sub(charged, std::memory_order_acq_rel);
  if (!succeeded) {
    d->since.fetch_sub(charged, std::memory_order_acq_rel);
    quota::uncharge(device, charged);
  }
}

bool begin_graph_node(int device, uint64_t bytes) {
  DeviceState* d = state(device);
  if (d == nullptr || !quota::accounted(device)) return true;
  const uint64_t p = quota::round_up(bytes == 0 ? 1 : bytes, quota::kPoolChunk);
  if (!quota::charge(device, p)) return false;
  d->graph_pending.fetch_add(p, std::memory_order_acq_rel);
  return true;
}

void note_graph_launch(int device) {
  DeviceState* d = state(device);
  // One relaxed load on the graph launch path; the store only while node charges wait.
  if (d != nullptr && d->graph_pending.load(std::memory_order_relaxed) != 0 &&
      !d->graph_launched.load(std::memory_order_relaxed))
    d->graph_launched.store(true, std::memory_order_release);
}

void register_pool(CUmemoryPool pool, int device) {
  std::lock_guard<std::mutex> lock(g_registry);
  for (PoolSlot& s : g_pools) {
    if (s.pool.load(std::memory_order_relaxed) == nullptr) {
      s.device.store(device, std::memory_order_relaxed);
      s.pool.store(pool, std::memory_order_release);
      return;
    }
  }
  CUSLICE_LOG(kWarn, "more than %d memory pools: pool %p is charged by allocation only", kMaxPools,
              static_cast<void*>(pool));
}

void unregister_pool(CUmemoryPool pool) {
  std::lock_guard<std::mutex> lock(g_registry);
  for (PoolSlot& s : g_pools)
    if (s.pool.load(std::memory_order_relaxed) == pool) s.pool.store(nullptr, std::memory_order_release);
}

int pool_device(CUmemoryPool pool) {
  for (PoolSlot& s : g_pools)
    if (s.pool.load(std::memory_order_acquire) == pool) return s.device.load(std::memory_order_relaxed);
  for (int d = 0; d < kMaxDevices; ++d) {
    if (!quota::accounted(d)) continue;
    if (default_pool(d) == pool) return d;
  }
  return -1;
}

int stream_device(CUstream stream, bool per_thread) {
  // One device visible: no driver call.
  if (quota::single_device()) return 0;
  static const StreamGetDevice legacy = cuda_function<StreamGetDevice>("cuStreamGetDevice");
  static const StreamGetDevice ptsz = cuda_function<StreamGetDevice>("cuStreamGetDevice_ptsz");
  const int current = quota::current_device();
  StreamGetDevice get = per_thread ? ptsz : legacy;
  CUdevice dev = -1;
  if (get != nullptr && stream != nullptr && get(stream, &dev) == CUDA_SUCCESS) return dev;
  return current;
}

CUmemoryPool current_pool(int device) {
  using GetPool = CUresult (*)(CUmemoryPool*, CUdevice);
  static const GetPool get = cuda_function<GetPool>("cuDeviceGetMemPool");
  CUmemoryPool pool = nullptr;
  return get != nullptr && get(&pool, device) == CUDA_SUCCESS ? pool : nullptr;
}

bool pool_reserve(CUmemoryPool pool, uint64_t* reserved, uint64_t* used) {
  static const GetAttr get = cuda_function<GetAttr>("cuMemPoolGetAttribute");
  cuuint64_t r = 0, u = 0;
  if (pool == nullptr || get == nullptr || get(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r) != CUDA_SUCCESS ||
      get(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &u) != CUDA_SUCCESS)
    return false;
  *reserved = r;
  *used = u;
  return true;
}

bool charge_growth(int device, uint64_t bytes) {
  DeviceState* d = state(device);
  if (d == nullptr) return true;
  const bool fits = quota::charge(device, bytes);
  if (!fits) quota::adjust(device, static_cast<int64_t>(bytes));  // held all the same
  // Counted like a completed pre-charge: the next reading contains it.
  d->since.fetch_add(bytes, std::memory_order_acq_rel);
  return fits;
}

// Replacing pre-charges by a reading R of what the device's pools reserve.
// Allocations race with it; the ordering that keeps the ledger >= the truth:
//   begin(): charge p (or draw it from the credit), then inflight += p, then since += p;
//   end(): inflight -= p.
//   replace_precharges(): s = since, then i = inflight, then R = reading; since -= (s - i).
// An allocation whose p is in s either (a) is still in flight when i is read — then p is
// also in i and stays charged — or (b) finished before i was read, hence before R was read,
// so R contains its growth. p added after s was read is simply not subtracted. Graph node
// pre-charges are dropped only after a graph launch/upload, when their reserve exists.
uint64_t replace_precharges(int device) {
  DeviceState* d = state(device);
  if (d == nullptr) return 0;
  const uint64_t s = d->since.load(std::memory_order_acquire);
  const uint64_t i = d->inflight.load(std::memory_order_acquire);
  const bool launched = d->graph_launched.exchange(false, std::memory_order_acq_rel);
  const uint64_t g = launched ? d->graph_pending.load(std::memory_order_acquire) : 0;
  const uint64_t reading = reserved_now(device);
  const uint64_t drop = s > i ? s - i : 0;
  d->since.fetch_sub(drop, std::memory_order_acq_rel);
  d->graph_pending.fetch_sub(g, std::memory_order_acq_rel);
  // The credit goes back too: after a reading the ledger holds no more than what the pools
  // reserve and the pre-charges in flight.
  const uint64_t credit = d->credit.exchange(0, std::memory_order_acq_rel);
  const int64_t delta = static_cast<int64_t>(reading) - static_cast<int64_t>(d->last_reading) -
                        static_cast<int64_t>(drop) - static_cast<int64_t>(g) - static_cast<int64_t>(credit);
  d->last_reading = reading;
  quota::adjust(device, delta);
  return reading;
}

bool trim(int device) {
  auto trim_to = cuda_function<TrimTo>("cuMemPoolTrimTo");
  auto get = cuda_function<GetAttr>("cuMemPoolGetAttribute");
  if (trim_to == nullptr || get == nullptr) return false;
  bool any = false;
  auto trim_pool = [&](CUmemoryPool p) {
    if (p == nullptr) return;
    if (pool_attr(get, p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) >
        pool_attr(get, p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT)) {
      trim_to(p, 0);  // releases only memory that backs no allocation
      any = true;
    }
  };
  trim_pool(default_pool(device));
  for (PoolSlot& s : g_pools)
    if (s.device.load(std::memory_order_relaxed) == device) trim_pool(s.pool.load(std::memory_order_acquire));
  if (auto graph_trim = cuda_function<GraphTrim>("cuDeviceGraphMemTrim")) {
    auto graph = cuda_function<GraphAttr>("cuDeviceGetGraphMemAttribute");
    cuuint64_t reserved = 0, used = 0;
    if (graph && graph(device, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) == CUDA_SUCCESS &&
        graph(device, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used) == CUDA_SUCCESS && reserved > used) {
      graph_trim(device);
      any = true;
    }
  }
  return any;
}

void reset_after_fork() {
  for (DeviceState& d : g_dev) renew_in_child(d);
  for (PoolSlot& s : g_pools) s.pool.store(nullptr);
  renew_in_child(g_registry);
}

}  // namespace cuslice::pool_accounting
