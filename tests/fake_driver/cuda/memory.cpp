// Device allocations (cuMemAlloc family), their frees and queries, pinned host memory, and the
// copies and sets, which move bytes: device memory has contents (device_memory.h), kept lazily
// so that only what is written costs host memory.
//
// A device allocation of 2 MiB or more takes its size rounded up to 2 MiB of device memory;
// smaller ones share 2 MiB pages (DriverState::charge_allocation), as on the real driver.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "tests/fake_driver/cuda/driver_state.h"
#include "tests/fake_driver/cuda/mem_pools.h"
#include "tests/fake_driver/cuda/sim_clock.h"
#include "tests/fake_driver/cuda/stream_order.h"

using namespace fake_cuda;

namespace {

CUresult allocate(CUdeviceptr* dptr, std::size_t bytes, AllocationKind kind) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = s->current_context(&ctx)) return rc;
  if (CUresult rc = mps_check(s->mps)) return rc;
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

// One side of a copy: device memory (an allocation, or mapped VMM memory) or host memory (any
// other address; pinned or pageable).
struct Side {
  bool device = false;
  CUdeviceptr address = 0;  // the device address, or the host pointer's value
};

Side host_side(const void* p) { return Side{false, reinterpret_cast<CUdeviceptr>(p)}; }
Side device_side(CUdeviceptr p) { return Side{true, p}; }
// cuMemcpy / cuMemcpyAsync: the address says which (unified addressing).
constexpr bool kUnified = true;

// How a copy or a set is issued: synchronously, or on a stream.
struct Issue {
  bool async = false;
  CUstream stream = nullptr;
  DefaultStream zero = DefaultStream::kLegacy;
};

constexpr Issue kSync{};
constexpr Issue on_stream(CUstream stream, DefaultStream zero) { return Issue{true, stream, zero}; }

bool capturing(const CUstream_st* stream_state) {
  return stream_state != nullptr && stream_state->capture != nullptr;
}

// The calling context (sync) or the stream's queue and context (async).
CUresult issuing_context(DriverState& state, const Issue& issue, CUctx_st** ctx, StreamQueue* queue,
                         CUstream_st** stream_state) {
  if (!issue.async) return state.current_context(ctx);
  if (CUresult rc = StreamQueue::resolve(state, issue.stream, issue.zero, queue, stream_state)) return rc;
  *ctx = queue->context();
  return CUDA_SUCCESS;
}

// Validates a copy's sides: the device ones must be accessible (DriverState::device_spans), the
// host ones must not meet device address space.
bool resolve_sides(DriverState& state, const Side& dst, const Side& src, std::size_t bytes, int device,
                   Spans* dst_spans, Spans* src_spans) {
  if (dst.device ? !state.device_spans(dst.address, bytes, device, /*write=*/true, dst_spans)
                 : state.overlaps_device_space(dst.address, bytes)) {
    return false;
  }
  return src.device ? state.device_spans(src.address, bytes, device, /*write=*/false, src_spans)
                    : !state.overlaps_device_space(src.address, bytes);
}

CUresult move_bytes(const Side& dst, const Side& src, std::size_t bytes, const Spans& dst_spans,
                    const Spans& src_spans) {
  if (bytes == 0) return CUDA_SUCCESS;
  if (dst.device && src.device) return copy_spans(dst_spans, src_spans, bytes);
  if (dst.device) return write_spans(dst_spans, 0, reinterpret_cast<const void*>(src.address), bytes);
  if (src.device) {
    read_spans(src_spans, 0, reinterpret_cast<void*>(dst.address), bytes);
  } else {
    std::memmove(reinterpret_cast<void*>(dst.address), reinterpret_cast<const void*>(src.address), bytes);
  }
  return CUDA_SUCCESS;
}

std::vector<DeviceRange> touched(const Side& dst, const Side& src, std::size_t bytes) {
  std::vector<DeviceRange> ranges;
  if (dst.device) ranges.push_back(DeviceRange{dst.address, bytes, true});
  if (src.device) ranges.push_back(DeviceRange{src.address, bytes, false});
  return ranges;
}

// Every copy. The bytes move at the call, under the driver's lock; a copy between host and device
// then takes FAKE_CUDA_COPY_MS_PER_GIB:
//   - synchronous: the call returns that long after it began (asleep without the lock, as in a
//     synchronisation); it neither waits for nor occupies any stream;
//   - asynchronous: the time is queued on the stream behind its work (enqueue_copy), so what
//     waits for the stream waits for the copy; the call returns at once;
//   - asynchronous to pageable host memory: completes inside the call, which first waits,
//     holding the driver's lock, for the stream's work before it (as the real driver stages such
//     a copy itself), then moves the bytes and takes the copy's time, still holding it.
// On a capturing stream nothing happens (to pageable memory: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED).
CUresult copy(Side dst, Side src, std::size_t bytes, const Issue& issue, bool unified = false) {
  const std::int64_t began = monotonic_ns();
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (unified) {
    dst.device = s->in_device_space(dst.address);
    src.device = s->in_device_space(src.address);
  }
  if (bytes != 0 && ((!dst.device && dst.address == 0) || (!src.device && src.address == 0))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUctx_st* ctx = nullptr;
  StreamQueue queue;
  CUstream_st* stream_state = nullptr;
  if (CUresult rc = issuing_context(*s, issue, &ctx, &queue, &stream_state)) return rc;
  Spans dst_spans, src_spans;
  if (!resolve_sides(*s, dst, src, bytes, ctx->device, &dst_spans, &src_spans)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const std::int64_t duration =
      dst.device != src.device ? copy_duration_ns(bytes, s->knobs.copy_ms_per_gib) : 0;
  if (!issue.async) {
    if (CUresult rc = move_bytes(dst, src, bytes, dst_spans, src_spans)) return rc;
    if (duration > 0) s.wait_until([&] { return began + duration; });
    return CUDA_SUCCESS;
  }
  const bool to_pageable =
      !dst.device && src.device && !s->is_host_range(reinterpret_cast<const void*>(dst.address), bytes);
  if (capturing(stream_state)) return to_pageable ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
  if (!to_pageable) {
    if (CUresult rc = move_bytes(dst, src, bytes, dst_spans, src_spans)) return rc;
    enqueue_copy(*s, queue, duration, touched(dst, src, bytes));
    return CUDA_SUCCESS;
  }
  s.wait_until(
      [&] {
        StreamQueue again;
        return StreamQueue::resolve(*s, issue.stream, issue.zero, &again) ? 0 : again.completes_at(*s);
      },
      /*hold_lock=*/true);
  // Held work that ran meanwhile may have poisoned the context.
  if (CUresult rc = StreamQueue::resolve(*s, issue.stream, issue.zero, &queue)) return rc;
  if (!resolve_sides(*s, dst, src, bytes, ctx->device, &dst_spans, &src_spans)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult rc = move_bytes(dst, src, bytes, dst_spans, src_spans)) return rc;
  const std::int64_t end = enqueue_copy(*s, queue, duration, {});
  s.wait_until([&] { return end; }, /*hold_lock=*/true);
  return CUDA_SUCCESS;
}

// cuMemsetD8 / D32 (period 1 / 4 bytes; dst must be aligned to it): count elements of pattern.
// Sets take no time; an asynchronous one is ordered on its stream like a copy.
CUresult set(CUdeviceptr dst, const unsigned char* pattern, std::size_t period, std::size_t count,
             const Issue& issue) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  CUctx_st* ctx = nullptr;
  StreamQueue queue;
  CUstream_st* stream_state = nullptr;
  if (CUresult rc = issuing_context(*s, issue, &ctx, &queue, &stream_state)) return rc;
  if (dst % period != 0 || count > SIZE_MAX / period) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t bytes = count * period;
  Spans spans;
  if (!s->device_spans(dst, bytes, ctx->device, /*write=*/true, &spans)) return CUDA_ERROR_INVALID_VALUE;
  if (capturing(stream_state)) return CUDA_SUCCESS;
  if (CUresult rc = fill_spans(spans, pattern, period)) return rc;
  if (issue.async) enqueue_copy(*s, queue, 0, {DeviceRange{dst, bytes, true}});
  return CUDA_SUCCESS;
}

CUresult set8(CUdeviceptr dst, unsigned char value, std::size_t count, const Issue& issue) {
  return set(dst, &value, 1, count, issue);
}

CUresult set32(CUdeviceptr dst, unsigned int value, std::size_t count, const Issue& issue) {
  unsigned char pattern[4];
  std::memcpy(pattern, &value, sizeof pattern);  // as the device stores the word (little-endian)
  return set(dst, pattern, 4, count, issue);
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
  if (CUresult rc = s->current_context_fault()) return rc;
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

// --- Copies and sets (copy() and set() above say how they behave) ------------------------------

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  return copy(device_side(dst), host_side(src), bytes, kSync);
}

CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t bytes) {
  return copy(device_side(dst), host_side(src), bytes, kSync);
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  return copy(host_side(dst), device_side(src), bytes, kSync);
}

CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t bytes) {
  return copy(host_side(dst), device_side(src), bytes, kSync);
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return copy(device_side(dst), device_side(src), bytes, kSync);
}

CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return copy(device_side(dst), device_side(src), bytes, kSync);
}

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return copy(device_side(dst), device_side(src), bytes, kSync, kUnified);
}

CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return copy(device_side(dst), device_side(src), bytes, kSync, kUnified);
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  return copy(device_side(dst), host_side(src), bytes, on_stream(stream, DefaultStream::kLegacy));
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  return copy(device_side(dst), host_side(src), bytes, on_stream(stream, DefaultStream::kPerThread));
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return copy(host_side(dst), device_side(src), bytes, on_stream(stream, DefaultStream::kLegacy));
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return copy(host_side(dst), device_side(src), bytes, on_stream(stream, DefaultStream::kPerThread));
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return copy(device_side(dst), device_side(src), bytes, on_stream(stream, DefaultStream::kLegacy));
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return copy(device_side(dst), device_side(src), bytes, on_stream(stream, DefaultStream::kPerThread));
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return copy(device_side(dst), device_side(src), bytes, on_stream(stream, DefaultStream::kLegacy), kUnified);
}

CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return copy(device_side(dst), device_side(src), bytes, on_stream(stream, DefaultStream::kPerThread),
              kUnified);
}

CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count) {
  return set8(dst, value, count, kSync);
}

CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char value, size_t count) {
  return set8(dst, value, count, kSync);
}

CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t count) {
  return set32(dst, value, count, kSync);
}

CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr dst, unsigned int value, size_t count) {
  return set32(dst, value, count, kSync);
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream) {
  return set8(dst, value, count, on_stream(stream, DefaultStream::kLegacy));
}

CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream) {
  return set8(dst, value, count, on_stream(stream, DefaultStream::kPerThread));
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t count, CUstream stream) {
  return set32(dst, value, count, on_stream(stream, DefaultStream::kLegacy));
}

CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int value, size_t count, CUstream stream) {
  return set32(dst, value, count, on_stream(stream, DefaultStream::kPerThread));
}

}  // extern "C"
