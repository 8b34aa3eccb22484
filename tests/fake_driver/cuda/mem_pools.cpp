// Stream-ordered allocation: memory pools, cuMemAllocAsync / cuMemAllocFromPoolAsync /
// cuMemFreeAsync, and the pool model of mem_pools.h.
#include "tests/fake_driver/cuda/mem_pools.h"

#include <algorithm>

#include "tests/fake_driver/cuda/graph_nodes.h"

namespace fake_cuda {

CUresult pool_allocate(DriverState& state, CUmemPoolHandle_st* pool, std::size_t bytes,
                       CUctx_st* owner, CUdeviceptr* dptr) {
  const std::size_t block = round_up(bytes, kPoolBlockAlignment);
  const std::size_t unused = pool->reserved - pool->used;
  if (block > unused) {
    const std::size_t growth = round_up(block - unused, kGranularity);
    if (pool->max_size != 0 && pool->reserved + growth > pool->max_size) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!state.ledger.try_charge(pool->device, FAKE_CUDA_CHARGE_POOL_RESERVE, growth)) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pool->reserved += growth;
    pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
  }
  pool->used += block;
  pool->used_high = std::max(pool->used_high, pool->used);
  Allocation allocation;
  allocation.base = state.take_address_range(bytes);
  allocation.size = bytes;
  allocation.charged = block;
  allocation.device = pool->device;
  allocation.kind = AllocationKind::kPool;
  allocation.owner = owner;
  allocation.pool = pool;
  state.allocations.emplace(allocation.base, allocation);
  *dptr = allocation.base;
  return CUDA_SUCCESS;
}

void pool_free(DriverState& state, CUdeviceptr base) {
  auto found = state.allocations.find(base);
  found->second.pool->used -= found->second.charged;
  state.allocations.erase(found);
}

void trim_pool(DriverState& state, CUmemPoolHandle_st* pool, std::size_t keep) {
  if (keep >= pool->reserved) return;
  const std::size_t target = round_up(std::max(keep, pool->used), kGranularity);
  if (target >= pool->reserved) return;
  state.ledger.release(pool->device, FAKE_CUDA_CHARGE_POOL_RESERVE, pool->reserved - target);
  pool->reserved = target;
}

void release_pool_reserves_on_sync(DriverState& state) {
  state.pools.for_each([&](CUmemPoolHandle_st& pool) {
    trim_pool(state, &pool, pool.release_threshold);
  });
}

}  // namespace fake_cuda

using namespace fake_cuda;

namespace {

CUresult device_location(const CUmemLocation* location, CUmemAllocationType type, int* device) {
  if (location == nullptr || type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_NOT_SUPPORTED;  // host pools
  *device = location->id;
  return CUDA_SUCCESS;
}

CUresult get_pool(CUmemoryPool* pool, bool default_pool, int dev) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pool = default_pool ? s->default_pools[dev] : s->current_pools[dev];
  return CUDA_SUCCESS;
}

CUresult set_pool(int dev, CUmemoryPool pool) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (!s->pools.contains(pool) || pool->device != dev) return CUDA_ERROR_INVALID_VALUE;
  s->current_pools[dev] = pool;
  return CUDA_SUCCESS;
}

// pool: the pool to take from, or null for the current pool of the stream's device.
CUresult allocate_async(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool, CUstream stream) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  CUstream_st* stream_state = nullptr;
  if (CUresult rc = s->stream_context(stream, &ctx, &stream_state)) return rc;
  if (CUresult rc = mps_check(s->mps)) return rc;
  if (pool == nullptr) {
    pool = s->current_pools[ctx->device];
  } else if (!s->pools.contains(pool)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (stream_state != nullptr && stream_state->capture != nullptr) {
    *dptr = add_alloc_node(*s, stream_state->capture, pool->device, bytes)->dptr;
    return CUDA_SUCCESS;
  }
  return pool_allocate(*s, pool, bytes, ctx, dptr);
}

CUresult free_async(CUdeviceptr dptr, CUstream stream) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  CUctx_st* ctx = nullptr;
  CUstream_st* stream_state = nullptr;
  if (CUresult rc = s->stream_context(stream, &ctx, &stream_state)) return rc;
  if (stream_state != nullptr && stream_state->capture != nullptr) {
    add_free_node(stream_state->capture, dptr);
    return CUDA_SUCCESS;
  }
  auto found = s->allocations.find(dptr);
  if (found == s->allocations.end() || found->second.kind != AllocationKind::kPool) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  pool_free(*s, dptr);
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  return get_pool(pool, true, dev);
}

CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  return get_pool(pool, false, dev);
}

CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) { return set_pool(dev, pool); }

CUresult CUDAAPI cuMemGetDefaultMemPool(CUmemoryPool* pool, CUmemLocation* location,
                                        CUmemAllocationType type) {
  int dev = 0;
  if (CUresult rc = device_location(location, type, &dev)) return rc;
  return get_pool(pool, true, dev);
}

CUresult CUDAAPI cuMemGetMemPool(CUmemoryPool* pool, CUmemLocation* location,
                                 CUmemAllocationType type) {
  int dev = 0;
  if (CUresult rc = device_location(location, type, &dev)) return rc;
  return get_pool(pool, false, dev);
}

CUresult CUDAAPI cuMemSetMemPool(CUmemLocation* location, CUmemAllocationType type,
                                 CUmemoryPool pool) {
  int dev = 0;
  if (CUresult rc = device_location(location, type, &dev)) return rc;
  return set_pool(dev, pool);
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (pool == nullptr || props == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int dev = 0;
  if (CUresult rc = device_location(&props->location, props->allocType, &dev)) return rc;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  auto created = std::make_unique<CUmemPoolHandle_st>();
  created->device = dev;
  created->max_size = props->maxSize;
  *pool = s->pools.add(std::move(created));
  return CUDA_SUCCESS;
}

// Outstanding allocations of the pool die with it (the real driver defers the release until they
// are freed; the fake does not model that delay).
CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->pools.contains(pool) || s->default_pools[pool->device] == pool) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::erase_if(s->allocations, [&](const auto& entry) { return entry.second.pool == pool; });
  s->ledger.release(pool->device, FAKE_CUDA_CHARGE_POOL_RESERVE, pool->reserved);
  if (s->current_pools[pool->device] == pool) {
    s->current_pools[pool->device] = s->default_pools[pool->device];
  }
  s->pools.remove(pool);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t min_bytes_to_keep) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->pools.contains(pool)) return CUDA_ERROR_INVALID_VALUE;
  trim_pool(*s, pool, min_bytes_to_keep);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute,
                                       void* value) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->pools.contains(pool) || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const cuuint64_t number = *static_cast<const cuuint64_t*>(value);
  switch (attribute) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: pool->release_threshold = number; return CUDA_SUCCESS;
    // High watermarks can only be reset (to the current value), by writing 0.
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      if (number != 0) return CUDA_ERROR_INVALID_VALUE;
      pool->reserved_high = pool->reserved;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (number != 0) return CUDA_ERROR_INVALID_VALUE;
      pool->used_high = pool->used;
      return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute,
                                       void* value) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->pools.contains(pool) || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  cuuint64_t* number = static_cast<cuuint64_t*>(value);
  switch (attribute) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *number = pool->release_threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *number = pool->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *number = pool->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *number = pool->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *number = pool->used_high; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return allocate_async(dptr, bytes, nullptr, stream);
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return allocate_async(dptr, bytes, nullptr, stream);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                         CUstream stream) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return allocate_async(dptr, bytes, pool, stream);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                              CUstream stream) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return allocate_async(dptr, bytes, pool, stream);
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) { return free_async(dptr, stream); }

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return free_async(dptr, stream);
}

}  // extern "C"
