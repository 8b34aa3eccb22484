// Device allocations (cuMemAlloc family), their frees and queries, pinned host memory, and the
// copies and sets, which move no data: device memory is not backed by host memory (a 16 GiB
// device would cost 16 GiB of RAM), so they only validate their ranges.
//
// A device allocation of 2 MiB or more takes its size rounded up to 2 MiB of device memory;
// smaller ones share 2 MiB pages (DriverState::charge_allocation), as on the real driver.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "driver_state.h"
#include "mem_pools.h"
#include "stream_order.h"

using namespace fake_cuda;

namespace {

CUresult allocate(CUdeviceptr* dptr, std::size_t bytes, AllocationKind kind) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = s->current_context(&ctx)) return rc;
  Allocation allocation;
  allocation.size = bytes;
  allocation.device = ctx->device;
  allocation.kind = kind;
  allocation.owner = ctx;
  if (!s->charge_allocation(allocation)) return CUDA_ERROR_OUT_OF_MEMORY;
  allocation.base = s->take_address_range(bytes);
  s->allocations.emplace(allocation.base, allocation);
  s->count_checkpoint_blockers(allocation, 1);
  *dptr = allocation.base;
  return CUDA_SUCCESS;
}

CUresult check_device_range(CUdeviceptr dptr, std::size_t bytes) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = s->current_context(&ctx)) return rc;
  return s->is_device_range(dptr, bytes) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// An asynchronous copy to the host (no data moves: device memory has none). To pinned memory it
// is queued on the stream like any of its work; to pageable memory it completes inside the call,
// which first waits, holding the driver's lock, for the stream's work before it.
CUresult copy_to_host_async(void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream, DefaultStream zero) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (dst == nullptr && bytes != 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = s->current_context(&ctx)) return rc;
  if (!s->is_device_range(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
  StreamQueue queue;
  CUstream_st* stream_state = nullptr;
  if (CUresult rc = StreamQueue::resolve(*s, stream, zero, &queue, &stream_state)) return rc;
  if (s->is_host_range(dst, bytes)) return CUDA_SUCCESS;  // queued: nothing to model
  if (stream_state != nullptr && stream_state->capture != nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  s.wait_until(
      [&] {
        StreamQueue again;
        return StreamQueue::resolve(*s, stream, zero, &again) ? 0 : again.completes_at(*s);
      },
      /*hold_lock=*/true);
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  return allocate(dptr, bytes, AllocationKind::kDevice);
}

// Rows are padded to 512 bytes, the texture pitch alignment of current GPUs.
CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width_bytes,
                                    size_t height, unsigned int element_size_bytes) {
  if (pitch == nullptr || width_bytes == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_size_bytes != 4 && element_size_bytes != 8 && element_size_bytes != 16) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const std::size_t padded = round_up(width_bytes, 512);
  CUresult rc = allocate(dptr, padded * height, AllocationKind::kDevice);
  if (rc == CUDA_SUCCESS) *pitch = padded;
  return rc;
}

// Charged to the current device as if resident there: what a quota has to assume.
CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  return allocate(dptr, bytes, AllocationKind::kManaged);
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  auto found = s->allocations.find(dptr);
  if (found == s->allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  const Allocation& allocation = found->second;
  switch (allocation.kind) {
    case AllocationKind::kPool:  // allowed: frees synchronously
      pool_free(*s, dptr);
      return CUDA_SUCCESS;
    case AllocationKind::kIpcImport:  // only cuIpcCloseMemHandle unmaps these
      return CUDA_ERROR_INVALID_VALUE;
    case AllocationKind::kDevice:
    case AllocationKind::kManaged:
      s->release_allocation(allocation);
      s->count_checkpoint_blockers(allocation, -1);
      s->allocations.erase(found);
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  const Allocation* allocation = s->find_allocation(dptr);
  if (allocation == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = allocation->base;
  if (size != nullptr) *size = allocation->size;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = s->current_context(&ctx)) return rc;
  // What every process sharing the device leaves free, as on a GPU.
  *total_bytes = s->ledger.total(ctx->device);
  *free_bytes = *total_bytes - std::min(*total_bytes, s->ledger.device_used(ctx->device));
  return CUDA_SUCCESS;
}

// Pinned host memory (cuMemAllocHost_v2 is cuMemHostAlloc with no flags): pages of our own,
// zero-filled, and no device pays for them. With unified addressing every such block is mapped,
// at its host address, whatever the flags. The block belongs to the current context and is
// unmapped with it (DriverState::deactivate).
CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  constexpr unsigned int kFlags =
      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if (pp == nullptr || bytes == 0 || (flags & ~kFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = s->current_context(&ctx)) return rc;
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t mapped = round_up(bytes, page);
  void* block = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (block == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  s->host_allocations.emplace(reinterpret_cast<std::uintptr_t>(block), DriverState::HostBlock{bytes, mapped, ctx});
  *pp = block;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytes) { return cuMemHostAlloc(pp, bytes, 0); }

CUresult CUDAAPI cuMemFreeHost(void* p) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  auto block = s->host_allocations.find(reinterpret_cast<std::uintptr_t>(p));
  if (block == s->host_allocations.end() || block->second.mapped == 0) return CUDA_ERROR_INVALID_VALUE;
  s->drop_host_block(block);
  return CUDA_SUCCESS;
}

// The caller's memory, pinned for the current context (and usable from every context with
// PORTABLE); it stays the caller's, unpinned when the context goes.
CUresult CUDAAPI cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  constexpr unsigned int kFlags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                                  CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
  if (p == nullptr || bytes == 0 || (flags & ~kFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = s->current_context(&ctx)) return rc;
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  // Overlapping a block already pinned (the real driver refuses any overlap).
  auto after = s->host_allocations.lower_bound(base + bytes);
  if (after != s->host_allocations.begin() && std::prev(after)->first + std::prev(after)->second.bytes > base)
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  s->host_allocations.emplace(base, DriverState::HostBlock{bytes, 0, ctx});
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostUnregister(void* p) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  auto block = s->host_allocations.find(reinterpret_cast<std::uintptr_t>(p));
  if (block == s->host_allocations.end() || block->second.mapped != 0) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  s->host_allocations.erase(block);
  return CUDA_SUCCESS;
}

// Any address inside pinned host memory: the same address, as under unified addressing.
CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr* dptr, void* p, unsigned int flags) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (dptr == nullptr || flags != 0 || !s->is_host_range(p, 1)) return CUDA_ERROR_INVALID_VALUE;
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count) {
  return check_device_range(dst, count);
}

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  if (src == nullptr && bytes != 0) return CUDA_ERROR_INVALID_VALUE;
  return check_device_range(dst, bytes);
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  if (dst == nullptr && bytes != 0) return CUDA_ERROR_INVALID_VALUE;
  return check_device_range(src, bytes);
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return copy_to_host_async(dst, src, bytes, stream, DefaultStream::kLegacy);
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return copy_to_host_async(dst, src, bytes, stream, DefaultStream::kPerThread);
}

}  // extern "C"
