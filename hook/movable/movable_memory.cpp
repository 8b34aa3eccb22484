// Making and freeing movable device memory (movable_memory.h), on the records of
// movable_chunks.h, under their lock; the moves are chunk_moves.cpp's. May call driver,
// settings, the client, host_pool, work_hold and mover (start).
#include "hook/movable/movable_memory.h"

#include <sys/mman.h>

#include <algorithm>

#include "hook/link/client.h"
#include "hook/movable/movable_chunks.h"
#include "hook/movable/mover.h"
#include "hook/movable/work_hold.h"

namespace cuslice::movable {
namespace {

bool storage() {
  Records& g = g_records;
  if (g.chunks != nullptr) return true;
  const size_t bytes = sizeof(Chunk) * kMaxChunks + sizeof(uint32_t) * kMaxChunks;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  g.chunks = static_cast<Chunk*>(p);  // zero pages: every record free
  g.picked = reinterpret_cast<uint32_t*>(g.chunks + kMaxChunks);
  return true;
}

// The devices whose kernels can reach `device`'s memory as a peer: given access too, as they
// would have to cuMemAlloc's memory once peer access is enabled.
void learn_peers(int device) {
  Records& g = g_records;
  if (g.peers_known[device]) return;
  g.peers_known[device] = true;
  int count = 0;
  if (api().device_count(&count) != CUDA_SUCCESS) return;
  for (int d = 0; d < count && d < kMaxDevices; ++d) {
    int can = 0;
    if (d != device && api().can_access_peer(&can, d, device) == CUDA_SUCCESS && can)
      g.peer_list[device][g.peers[device]++] = static_cast<int8_t>(d);
  }
}

// The device's allocation granularity (learnt once): 0 when the driver gives none that
// divides a chunk.
uint64_t granularity(int device) {
  Records& g = g_records;
  if (g.granularity[device] == 0) {
    const CUmemAllocationProp prop = prop_of(device);
    size_t gran = 0;
    if (api().granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || gran == 0 ||
        movable::kChunkBytes % gran != 0)
      return 0;
    g.granularity[device] = gran;
  }
  return g.granularity[device];
}

// A free record, or kMaxChunks when none is left.
uint32_t free_record(uint32_t from) {
  Records& g = g_records;
  for (uint32_t i = from; i < g.used; ++i)
    if (g.chunks[i].base == 0) return i;
  return g.used < kMaxChunks ? g.used++ : kMaxChunks;
}

// Backs the reserved range [va, va + size) with chunks of physical memory, a record each.
CUresult map_chunks(int device, CUdeviceptr va, uint64_t size) {
  const CUmemAllocationProp prop = prop_of(device);
  uint32_t record = 0;
  for (uint64_t offset = 0; offset < size; offset += kChunkBytes) {
    const uint64_t n = std::min(kChunkBytes, size - offset);
    record = free_record(record);
    if (record == kMaxChunks) return CUDA_ERROR_OUT_OF_MEMORY;
    CUmemGenericAllocationHandle h = 0;
    CUresult r = real<Sym::cuMemCreate>()(&h, n, &prop, 0);
    if (r != CUDA_SUCCESS) return r;
    r = api().map(va + offset, n, 0, h, 0);
    if (r != CUDA_SUCCESS) {
      real<Sym::cuMemRelease>()(h);
      return r;
    }
    g_records.chunks[record] = Chunk{va, size, va + offset, n, h, nullptr, device, false};
    g_records.on_gpu.fetch_add(n, std::memory_order_relaxed);
  }
  return CUDA_SUCCESS;
}

// Frees the allocation at `base` (its chunks and its range).
void free_allocation(CUdeviceptr base, uint64_t size, uint32_t from) {
  for (uint32_t i = from; i < g_records.used; ++i)
    if (g_records.chunks[i].base == base) drop(i);
  api().address_free(base, size);
}

}  // namespace

bool enabled() noexcept {
  Records& g = g_records;
  const int d = g.decided.load(std::memory_order_acquire);
  if (d != 0) return d > 0;
  // Decided once, at the first allocation with the scheduler's word available: memory made
  // one way stays that way until freed.
  if (!client::attached()) return false;
  const bool yes = settings().movable_memory && client::fast_allowed() && api().complete();
  int expected = 0;
  if (g.decided.compare_exchange_strong(expected, yes ? 1 : -1, std::memory_order_acq_rel) && yes) {
    work_hold::arm();
    mover::start();
  }
  return g.decided.load(std::memory_order_acquire) > 0;
}

CUcontext context(int device) noexcept {
  const Lock lock;
  return primary(device);
}

CUresult allocate(int device, size_t bytes, CUdeviceptr* out) noexcept {
  if (!valid(device) || out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const Lock lock;
  if (!storage()) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t gran = granularity(device);
  if (gran == 0) return CUDA_ERROR_NOT_SUPPORTED;
  learn_peers(device);
  const uint64_t size = (bytes + gran - 1) / gran * gran;
  CUdeviceptr va = 0;
  CUresult r = api().reserve(&va, size, 0, 0, 0);
  if (r != CUDA_SUCCESS) return r;
  r = map_chunks(device, va, size);
  if (r == CUDA_SUCCESS) r = grant(device, va, size);
  if (r != CUDA_SUCCESS) {
    free_allocation(va, size, 0);
    return r;
  }
  g_records.devices.fetch_or(uint32_t{1} << (device & 31), std::memory_order_relaxed);
  // The scheduler decides from this figure: it must not lag behind the allocations.
  report_totals();
  *out = va;
  return CUDA_SUCCESS;
}

bool release(CUdeviceptr ptr, CUresult* result) noexcept {
  Records& g = g_records;
  if (g.decided.load(std::memory_order_acquire) <= 0 || ptr == 0) return false;
  const Lock lock;
  if (g.chunks == nullptr) return false;
  int device = -1;
  uint64_t size = 0;
  for (uint32_t i = 0; i < g.used && device < 0; ++i)
    if (g.chunks[i].base == ptr) device = g.chunks[i].device, size = g.chunks[i].alloc_size;
  if (device < 0) return false;
  // cuMemFree waits for the work that may still use the memory; unmapping does not.
  if (CUcontext c = primary(device); c != nullptr && api().push(c) == CUDA_SUCCESS) {
    api().synchronize();
    CUcontext popped = nullptr;
    api().pop(&popped);
  }
  for (uint32_t i = 0; i < g.used; ++i)
    if (g.chunks[i].base == ptr) drop(i);
  *result = api().address_free(ptr, size);
  report_totals();
  return true;
}

bool address_range(CUdeviceptr ptr, CUdeviceptr* base, size_t* size) noexcept {
  Records& g = g_records;
  if (g.decided.load(std::memory_order_acquire) <= 0) return false;
  const Lock lock;
  for (uint32_t i = 0; i < g.used; ++i) {
    const Chunk& c = g.chunks[i];
    if (c.base != 0 && ptr >= c.base && ptr < c.base + c.alloc_size) {
      if (base != nullptr) *base = c.base;
      if (size != nullptr) *size = c.alloc_size;
      return true;
    }
  }
  return false;
}

void forget_device(int device) noexcept {
  Records& g = g_records;
  if (g.decided.load(std::memory_order_acquire) <= 0 || !valid(device)) return;
  const Lock lock;
  for (uint32_t i = 0; i < g.used; ++i) {
    const Chunk& c = g.chunks[i];
    if (c.base != 0 && c.device == device) free_allocation(c.base, c.alloc_size, i);
  }
  // The reset destroyed the context and its streams with it.
  g.context[device] = nullptr;
  for (CUstream& s : g.streams[device]) s = nullptr;
}

Totals totals() noexcept {
  const Records& g = g_records;
  return {g.on_gpu.load(std::memory_order_relaxed), g.off_gpu.load(std::memory_order_relaxed),
          g.devices.load(std::memory_order_relaxed)};
}

void after_fork_child() noexcept {
  // The child owns no device memory: its first allocation decides afresh. The parent's
  // records stay mapped in the child (copy-on-write) and are never read.
  Records& g = g_records;
  g.chunks = nullptr;
  g.picked = nullptr;
  g.used = 0;
  for (auto& s : g.streams)
    for (CUstream& x : s) x = nullptr;
  for (CUcontext& c : g.context) c = nullptr;
  g.decided.store(0, std::memory_order_relaxed);
  g.on_gpu.store(0, std::memory_order_relaxed);
  g.off_gpu.store(0, std::memory_order_relaxed);
  g.devices.store(0, std::memory_order_relaxed);
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  g.lock = fresh;
}

}  // namespace cuslice::movable
