// Movable device memory (movable_memory.h). One record per physical chunk: the allocation it
// belongs to (base and size of the reserved range), its place in it, and either its physical
// handle (on the GPU) or its copy in host memory (off the GPU). Records are found by scanning
// up to the highest one ever used: allocations, frees and moves are rare next to launches, and
// a framework's caching allocator keeps their number in the thousands at most.
#include "hook/movable/movable_memory.h"

#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>

#include "hook/base/fork_child.h"
#include "hook/base/log.h"
#include "hook/base/settings.h"
#include "hook/driver/driver.h"
#include "hook/link/client.h"
#include "hook/movable/host_pool.h"
#include "hook/movable/mover.h"
#include "hook/movable/work_hold.h"

namespace cuslice::movable {
namespace {

constexpr uint32_t kMaxChunks = 1u << 17;
constexpr int kStreams = 4;  // copies in flight per device: enough to fill the link both ways

struct Chunk {
  CUdeviceptr base = 0;  // 0: a free record
  uint64_t alloc_size = 0;
  CUdeviceptr va = 0;
  uint64_t size = 0;
  CUmemGenericAllocationHandle handle = 0;  // 0 while off the GPU
  void* host = nullptr;                     // the copy, while off the GPU
  int32_t device = -1;
  bool pinned = false;
};

struct State {
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  Chunk* chunks = nullptr;    // kMaxChunks records, one anonymous mapping
  uint32_t* picked = nullptr;  // move_out's scratch, kMaxChunks entries
  uint32_t used = 0;           // records [0, used) may be taken
  size_t granularity[kMaxDevices] = {};
  int peers[kMaxDevices] = {};  // how many of peer_list[d] can reach device d's memory
  int8_t peer_list[kMaxDevices][kMaxDevices] = {};
  bool peers_known[kMaxDevices] = {};
  CUcontext context[kMaxDevices] = {};
  CUstream streams[kMaxDevices][kStreams] = {};
  std::atomic<int> decided{0};  // 1 movable, -1 not, 0 not yet
  std::atomic<uint64_t> on_gpu{0};
  std::atomic<uint64_t> off_gpu{0};
  std::atomic<uint32_t> devices{0};
};
State g;

// The last driver call of move_out/move_back that failed (under the lock), for the mover's log.
const char* g_failed_call = "";
int g_failed_code = 0;

CUresult noted(const char* call, CUresult r) {
  if (r != CUDA_SUCCESS) {
    g_failed_call = call;
    g_failed_code = static_cast<int>(r);
  }
  return r;
}

struct Lock {
  Lock() { pthread_mutex_lock(&g.lock); }
  ~Lock() { pthread_mutex_unlock(&g.lock); }
};

// The driver's functions this file calls that the hook does not hook (the hooked ones go
// through real<>(), so that the hook's own accounting does not see the mover's work).
struct Api {
  PFN_cuMemAddressReserve_v10020 reserve = cuda_function<PFN_cuMemAddressReserve_v10020>("cuMemAddressReserve");
  PFN_cuMemAddressFree_v10020 address_free = cuda_function<PFN_cuMemAddressFree_v10020>("cuMemAddressFree");
  PFN_cuMemMap_v10020 map = cuda_function<PFN_cuMemMap_v10020>("cuMemMap");
  PFN_cuMemUnmap_v10020 unmap = cuda_function<PFN_cuMemUnmap_v10020>("cuMemUnmap");
  PFN_cuMemSetAccess_v10020 set_access = cuda_function<PFN_cuMemSetAccess_v10020>("cuMemSetAccess");
  PFN_cuMemGetAllocationGranularity_v10020 granularity =
      cuda_function<PFN_cuMemGetAllocationGranularity_v10020>("cuMemGetAllocationGranularity");
  PFN_cuDeviceGetCount_v2000 device_count = cuda_function<PFN_cuDeviceGetCount_v2000>("cuDeviceGetCount");
  PFN_cuDeviceCanAccessPeer_v4000 can_access_peer =
      cuda_function<PFN_cuDeviceCanAccessPeer_v4000>("cuDeviceCanAccessPeer");
  PFN_cuCtxSetCurrent_v4000 set_current = cuda_function<PFN_cuCtxSetCurrent_v4000>("cuCtxSetCurrent");
  PFN_cuCtxPushCurrent_v4000 push = cuda_function<PFN_cuCtxPushCurrent_v4000>("cuCtxPushCurrent_v2");
  PFN_cuCtxPopCurrent_v4000 pop = cuda_function<PFN_cuCtxPopCurrent_v4000>("cuCtxPopCurrent_v2");
  PFN_cuCtxSynchronize_v2000 synchronize = cuda_function<PFN_cuCtxSynchronize_v2000>("cuCtxSynchronize");
  PFN_cuStreamCreate_v2000 stream_create = cuda_function<PFN_cuStreamCreate_v2000>("cuStreamCreate");
  PFN_cuStreamSynchronize_v2000 stream_sync = cuda_function<PFN_cuStreamSynchronize_v2000>("cuStreamSynchronize");

  bool complete() const {
    return reserve && address_free && map && unmap && set_access && granularity && device_count && can_access_peer &&
           set_current && push && pop && synchronize && stream_create && stream_sync;
  }
};
const Api& api() {
  static const Api a;
  return a;
}

bool valid(int device) { return device >= 0 && device < kMaxDevices; }

CUmemAllocationProp prop_of(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

bool storage() {
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

CUresult grant(int device, CUdeviceptr va, uint64_t size) {
  CUmemAccessDesc desc[kMaxDevices + 1];
  int n = 0;
  desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc[n].location.id = device;
  desc[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (int i = 0; i < g.peers[device]; ++i) {
    desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc[n].location.id = g.peer_list[device][i];
    desc[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  CUresult r = api().set_access(va, size, desc, static_cast<size_t>(n));
  if (r != CUDA_SUCCESS && n > 1) {
    // A peer the driver will not map here after all: the device alone, as cuMemAlloc gives.
    g.peers[device] = 0;
    r = api().set_access(va, size, desc, 1);
  }
  return r;
}

// A free record, or kMaxChunks when none is left.
uint32_t free_record(uint32_t from) {
  for (uint32_t i = from; i < g.used; ++i)
    if (g.chunks[i].base == 0) return i;
  return g.used < kMaxChunks ? g.used++ : kMaxChunks;
}

// Gives back what record i holds on the GPU or in host memory, and frees the record.
void drop(uint32_t i) {
  Chunk& c = g.chunks[i];
  if (c.handle != 0) {
    api().unmap(c.va, c.size);
    real<Sym::cuMemRelease>()(c.handle);
    g.on_gpu.fetch_sub(c.size, std::memory_order_relaxed);
  } else if (c.host != nullptr) {
    host_pool::give_back(c.host, c.size, c.pinned);
    g.off_gpu.fetch_sub(c.size, std::memory_order_relaxed);
  }
  c = Chunk{};
}

CUstream* streams(int device) {
  if (g.streams[device][0] != nullptr) return g.streams[device];
  for (CUstream& s : g.streams[device])
    if (api().stream_create(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return nullptr;
  return g.streams[device];
}

bool sync_all(int device) {
  bool ok = true;
  for (CUstream s : g.streams[device])
    if (s != nullptr && api().stream_sync(s) != CUDA_SUCCESS) ok = false;
  return ok;
}

// The primary context of `device`, retained once for the process's life; with the lock held.
CUcontext primary(int device) {
  if (!valid(device)) return nullptr;
  if (g.context[device] == nullptr) {
    CUcontext c = nullptr;
    if (real<Sym::cuDevicePrimaryCtxRetain>()(&c, device) == CUDA_SUCCESS) g.context[device] = c;
  }
  return g.context[device];
}

}  // namespace

bool enabled() noexcept {
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
  if (g.granularity[device] == 0) {
    const CUmemAllocationProp prop = prop_of(device);
    size_t gran = 0;
    if (api().granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || gran == 0 ||
        movable::kChunkBytes % gran != 0)
      return CUDA_ERROR_NOT_SUPPORTED;
    g.granularity[device] = gran;
  }
  learn_peers(device);
  const uint64_t gran = g.granularity[device];
  const uint64_t size = (bytes + gran - 1) / gran * gran;
  CUdeviceptr va = 0;
  CUresult r = api().reserve(&va, size, 0, 0, 0);
  if (r != CUDA_SUCCESS) return r;
  const CUmemAllocationProp prop = prop_of(device);
  uint32_t first = kMaxChunks, record = 0;
  uint64_t mapped = 0;
  for (uint64_t offset = 0; offset < size && r == CUDA_SUCCESS; offset += kChunkBytes) {
    const uint64_t n = std::min(kChunkBytes, size - offset);
    record = free_record(record);
    if (record == kMaxChunks) {
      r = CUDA_ERROR_OUT_OF_MEMORY;
      break;
    }
    CUmemGenericAllocationHandle h = 0;
    r = real<Sym::cuMemCreate>()(&h, n, &prop, 0);
    if (r != CUDA_SUCCESS) break;
    r = api().map(va + offset, n, 0, h, 0);
    if (r != CUDA_SUCCESS) {
      real<Sym::cuMemRelease>()(h);
      break;
    }
    g.chunks[record] = Chunk{va, size, va + offset, n, h, nullptr, device, false};
    g.on_gpu.fetch_add(n, std::memory_order_relaxed);
    if (first == kMaxChunks) first = record;
    mapped += n;
  }
  if (r == CUDA_SUCCESS) r = grant(device, va, size);
  if (r != CUDA_SUCCESS) {
    for (uint32_t i = 0; i < g.used; ++i)
      if (g.chunks[i].base == va) drop(i);
    api().address_free(va, size);
    return r;
  }
  g.devices.fetch_or(uint32_t{1} << (device & 31), std::memory_order_relaxed);
  // The scheduler decides from this figure: it must not lag behind the allocations.
  client::report_movable(g.on_gpu.load(std::memory_order_relaxed), g.off_gpu.load(std::memory_order_relaxed));
  *out = va;
  return CUDA_SUCCESS;
}

bool release(CUdeviceptr ptr, CUresult* result) noexcept {
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
  client::report_movable(g.on_gpu.load(std::memory_order_relaxed), g.off_gpu.load(std::memory_order_relaxed));
  return true;
}

bool address_range(CUdeviceptr ptr, CUdeviceptr* base, size_t* size) noexcept {
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
  if (g.decided.load(std::memory_order_acquire) <= 0 || !valid(device)) return;
  const Lock lock;
  for (uint32_t i = 0; i < g.used; ++i) {
    Chunk& c = g.chunks[i];
    if (c.base == 0 || c.device != device) continue;
    const CUdeviceptr base = c.base;
    const uint64_t size = c.alloc_size;
    for (uint32_t j = i; j < g.used; ++j)
      if (g.chunks[j].base == base) drop(j);
    api().address_free(base, size);
  }
  // The reset destroyed the context and its streams with it.
  g.context[device] = nullptr;
  for (CUstream& s : g.streams[device]) s = nullptr;
}

Totals totals() noexcept {
  return {g.on_gpu.load(std::memory_order_relaxed), g.off_gpu.load(std::memory_order_relaxed),
          g.devices.load(std::memory_order_relaxed)};
}

uint64_t move_out(int device, uint64_t bytes, uint64_t host_reserve, bool* failed) noexcept {
  *failed = false;
  if (!valid(device) || bytes == 0) return 0;
  const Lock lock;
  if (g.chunks == nullptr) return 0;
  uint32_t n = 0;
  for (uint32_t i = 0; i < g.used; ++i)
    if (g.chunks[i].base != 0 && g.chunks[i].device == device && g.chunks[i].handle != 0) g.picked[n++] = i;
  // The largest allocations first: the fewest, and the least likely to be in use at every step.
  std::sort(g.picked, g.picked + n, [](uint32_t a, uint32_t b) {
    const Chunk &x = g.chunks[a], &y = g.chunks[b];
    if (x.alloc_size != y.alloc_size) return x.alloc_size > y.alloc_size;
    return x.va < y.va;
  });
  CUcontext ctx = primary(device);
  CUstream* s = ctx != nullptr && api().set_current(ctx) == CUDA_SUCCESS ? streams(device) : nullptr;
  if (s == nullptr) {
    *failed = true;
    return 0;
  }
  auto copy_out = real<Sym::cuMemcpyDtoHAsync_v2>();
  uint32_t copied = 0;
  uint64_t covered = 0;
  for (; copied < n && covered < bytes; ++copied) {
    Chunk& c = g.chunks[g.picked[copied]];
    bool pinned = false;
    void* host = host_pool::take(c.size, host_reserve, &pinned);
    if (host == nullptr) break;  // the host has no more room: what fits goes
    if (noted("cuMemcpyDtoHAsync", copy_out(host, c.va, c.size, s[copied % kStreams])) != CUDA_SUCCESS) {
      host_pool::give_back(host, c.size, pinned);
      *failed = true;
      break;
    }
    c.host = host;
    c.pinned = pinned;
    covered += c.size;
  }
  if (!sync_all(device)) {
    // Nothing was given back yet: the copies are dropped and every chunk stays on the GPU.
    for (uint32_t k = 0; k < copied; ++k) {
      Chunk& c = g.chunks[g.picked[k]];
      host_pool::give_back(c.host, c.size, c.pinned);
      c.host = nullptr;
    }
    *failed = true;
    return 0;
  }
  uint64_t moved = 0;
  for (uint32_t k = 0; k < copied; ++k) {
    Chunk& c = g.chunks[g.picked[k]];
    if (c.host == nullptr) continue;
    if (noted("cuMemUnmap", api().unmap(c.va, c.size)) != CUDA_SUCCESS) {
      host_pool::give_back(c.host, c.size, c.pinned);
      c.host = nullptr;
      *failed = true;
      continue;
    }
    real<Sym::cuMemRelease>()(c.handle);
    c.handle = 0;
    moved += c.size;
    g.on_gpu.fetch_sub(c.size, std::memory_order_relaxed);
    g.off_gpu.fetch_add(c.size, std::memory_order_relaxed);
  }
  return moved;
}

Back move_back() noexcept {
  const Lock lock;
  if (g.chunks == nullptr) return Back::kDone;
  uint32_t n = 0;
  for (uint32_t i = 0; i < g.used; ++i)
    if (g.chunks[i].base != 0 && g.chunks[i].handle == 0) g.picked[n++] = i;
  if (n == 0) return Back::kDone;
  // Physical memory for all of it first: a GPU without room for everything leaves everything
  // where it is, and the scheduler asks again later.
  Back outcome = Back::kDone;
  uint32_t made = 0;
  for (; made < n; ++made) {
    Chunk& c = g.chunks[g.picked[made]];
    const CUmemAllocationProp prop = prop_of(c.device);
    const CUresult r = noted("cuMemCreate", real<Sym::cuMemCreate>()(&c.handle, c.size, &prop, 0));
    if (r != CUDA_SUCCESS) {
      c.handle = 0;
      outcome = r == CUDA_ERROR_OUT_OF_MEMORY ? Back::kNoRoom : Back::kFailed;
      break;
    }
  }
  uint32_t mapped = 0;
  if (outcome == Back::kDone) {
    for (; mapped < n; ++mapped) {
      Chunk& c = g.chunks[g.picked[mapped]];
      if (noted("cuMemMap", api().map(c.va, c.size, 0, c.handle, 0)) != CUDA_SUCCESS) {
        outcome = Back::kFailed;
        break;
      }
      if (noted("cuMemSetAccess", grant(c.device, c.va, c.size)) != CUDA_SUCCESS) {
        api().unmap(c.va, c.size);
        outcome = Back::kFailed;
        break;
      }
    }
  }
  if (outcome == Back::kDone) {
    auto copy_in = real<Sym::cuMemcpyHtoDAsync_v2>();
    uint32_t devices = 0;
    for (uint32_t k = 0; k < n && outcome == Back::kDone; ++k) {
      Chunk& c = g.chunks[g.picked[k]];
      CUcontext ctx = primary(c.device);
      CUstream* s = ctx != nullptr && api().set_current(ctx) == CUDA_SUCCESS ? streams(c.device) : nullptr;
      if (s == nullptr || noted("cuMemcpyHtoDAsync", copy_in(c.va, c.host, c.size, s[k % kStreams])) != CUDA_SUCCESS)
        outcome = Back::kFailed;
      devices |= uint32_t{1} << (c.device & 31);
    }
    for (int d = 0; d < 32 && d < kMaxDevices; ++d)
      if ((devices >> d) & 1u) {
        if (api().set_current(primary(d)) != CUDA_SUCCESS || !sync_all(d)) outcome = Back::kFailed;
      }
  }
  if (outcome != Back::kDone) {
    // Undone: every chunk off the GPU again, its copy in host memory untouched.
    for (uint32_t k = 0; k < mapped; ++k) api().unmap(g.chunks[g.picked[k]].va, g.chunks[g.picked[k]].size);
    for (uint32_t k = 0; k < made; ++k) {
      Chunk& c = g.chunks[g.picked[k]];
      real<Sym::cuMemRelease>()(c.handle);
      c.handle = 0;
    }
    return outcome;
  }
  for (uint32_t k = 0; k < n; ++k) {
    Chunk& c = g.chunks[g.picked[k]];
    host_pool::give_back(c.host, c.size, c.pinned);
    c.host = nullptr;
    g.on_gpu.fetch_add(c.size, std::memory_order_relaxed);
    g.off_gpu.fetch_sub(c.size, std::memory_order_relaxed);
  }
  return Back::kDone;
}

const char* last_failure(int* code) noexcept {
  *code = g_failed_code;
  return g_failed_call;
}

void after_fork_child() noexcept {
  // The child owns no device memory: its first allocation decides afresh. The parent's
  // records stay mapped in the child (copy-on-write) and are never read.
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
