// Allocations the driver makes one call at a time: charged before the driver is asked,
// remembered in an allocation table, given back when freed. Each first waits while its
// tenant is suspended (preemption.h). In a process whose memory the fast suspension may move,
// cuMemAlloc's memory is made movable (movable_memory.h).
#include "hook/bookkeeping/allocation_table.h"
#include "hook/driver/driver.h"
#include "hook/memory/preemption.h"
#include "hook/memory/quota.h"
#include "hook/movable/movable_memory.h"
#include "protocol/shm_protocol.h"

using namespace cuslice;

namespace {

// Records a successful allocation; if the table is full, undoes it (the allocation is
// refused rather than left uncounted).
template <typename Undo>
CUresult remember(AllocationTable& table, uint64_t key, int device, uint64_t charged, Undo undo) {
  if (table.insert(key, Charge{charged, device, 1})) return CUDA_SUCCESS;
  undo();
  quota::uncharge_allocation(device, charged);
  return CUDA_ERROR_OUT_OF_MEMORY;
}

// Frees through `release` and gives back what the allocation was charged. The entry leaves
// the table before the driver frees, so an address the driver hands out again at once can
// never meet a stale entry; it returns if the driver refuses.
template <typename Release>
CUresult forget(AllocationTable& table, uint64_t key, Release release) {
  Charge c;
  const bool tracked = table.remove(key, &c);
  const quota::Operation op(tracked ? c.device : -1);
  const CUresult r = release();
  if (tracked) {
    if (r == CUDA_SUCCESS)
      quota::uncharge_allocation(c.device, c.bytes);
    else
      table.insert(key, c);
  }
  return r;
}

// Element size of an array format (bytes per channel); 16 for formats we do not size
// exactly (block-compressed, video), which overestimates.
uint64_t format_bytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 16;
  }
}

uint64_t array_estimate(size_t w, size_t h, size_t d, unsigned channels, CUarray_format f, unsigned levels) {
  const uint64_t row = quota::round_up(static_cast<uint64_t>(w) * channels * format_bytes(f), 512);
  uint64_t bytes = row * (h ? h : 1) * (d ? d : 1);
  if (levels > 1) bytes *= 2;  // a full mip chain adds less than the base level again
  return quota::round_up(bytes, quota::kGranule);
}

// The requirements query and destroy call of each array kind.
CUresult requirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* req, CUarray a, int dev) {
  static const auto fn = reinterpret_cast<PFN_cuArrayGetMemoryRequirements_v11060>(
      cuda_symbol("cuArrayGetMemoryRequirements"));
  return fn ? fn(req, a, dev) : CUDA_ERROR_NOT_SUPPORTED;
}
CUresult requirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* req, CUmipmappedArray a, int dev) {
  static const auto fn = reinterpret_cast<PFN_cuMipmappedArrayGetMemoryRequirements_v11060>(
      cuda_symbol("cuMipmappedArrayGetMemoryRequirements"));
  return fn ? fn(req, a, dev) : CUDA_ERROR_NOT_SUPPORTED;
}
void destroy(CUarray a) { real<Sym::cuArrayDestroy>()(a); }
void destroy(CUmipmappedArray a) { real<Sym::cuMipmappedArrayDestroy>()(a); }

// Arrays are sized before creation from their descriptor. cuArrayGetMemoryRequirements
// answers only for deferred-mapping arrays (CUDA_ERROR_INVALID_VALUE otherwise, measured);
// where it answers, the charge is corrected to it, and a correction that does not fit
// destroys the array and reports out of memory.
template <typename Handle>
CUresult correct_array_charge(Handle h, int device, uint64_t estimated) {
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  uint64_t charged = estimated;
  if (requirements(&req, h, device) == CUDA_SUCCESS) {
    const uint64_t actual = quota::round_up(req.size, quota::kGranule);
    if (actual > estimated) {
      if (!quota::charge(device, actual - estimated)) {
        destroy(h);
        quota::uncharge(device, estimated);
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
    } else {
      quota::uncharge(device, estimated - actual);
    }
    charged = actual;
  }
  return remember(arrays(), reinterpret_cast<uint64_t>(h), device, charged, [&] { destroy(h); });
}

// Creates an array (through `create`) charged `estimate` first.
template <typename Handle, typename Create>
CUresult create_array(Handle* handle, uint64_t estimate, Create create) {
  preemption::wait_while_suspended();
  if (!quota::active() || handle == nullptr) return create();
  const int dev = quota::current_device();
  if (!quota::accounted(dev)) return create();
  const quota::Operation op(dev);
  if (!quota::charge(dev, estimate)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult r = create();
  if (r != CUDA_SUCCESS) {
    quota::uncharge(dev, estimate);
    return r;
  }
  return correct_array_charge(*handle, dev, estimate);
}

}  // namespace

extern "C" {

CUSLICE_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  auto fn = real<Sym::cuMemAlloc_v2>();
  if (fn == nullptr) return unavailable_result();
  preemption::wait_while_suspended();
  if (!quota::active()) return fn(dptr, bytesize);
  const int dev = quota::current_device();
  if (!quota::accounted(dev) || bytesize == 0 || dptr == nullptr) return fn(dptr, bytesize);
  const quota::Operation op(dev);
  const uint64_t charged = quota::allocation_charge(bytesize);
  if (!quota::charge_allocation(dev, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
  // Small allocations stay as the driver makes them: it packs them into pages of its own,
  // where movable memory would take a whole granule each.
  bool movable = bytesize >= movable::kMinBytes && movable::enabled();
  const auto allocate = [&] {
    if (movable) {
      const CUresult m = movable::allocate(dev, bytesize, dptr);
      if (m != CUDA_ERROR_NOT_SUPPORTED) return m;
      movable = false;  // the driver cannot make it that way: as cuMemAlloc makes it
    }
    return fn(dptr, bytesize);
  };
  const CUresult r = preemption::after_out_of_memory(dev, charged, allocate(), allocate);
  if (r != CUDA_SUCCESS) {
    quota::uncharge_allocation(dev, charged);
    return r;
  }
  return remember(device_pointers(), *dptr, dev, charged, [&] {
    CUresult freed;
    if (!movable::release(*dptr, &freed)) real<Sym::cuMemFree_v2>()(*dptr);
  });
}

CUSLICE_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  auto fn = real<Sym::cuMemAllocManaged>();
  if (fn == nullptr) return unavailable_result();
  preemption::wait_while_suspended();
  if (!quota::active()) return fn(dptr, bytesize, flags);
  // Managed memory can become fully resident on the device: charge all of it there.
  const int dev = quota::current_device();
  if (!quota::accounted(dev) || bytesize == 0 || dptr == nullptr) return fn(dptr, bytesize, flags);
  const quota::Operation op(dev);
  const uint64_t charged = quota::allocation_charge(bytesize);
  if (!quota::charge_allocation(dev, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult r = fn(dptr, bytesize, flags);
  if (r != CUDA_SUCCESS) {
    quota::uncharge_allocation(dev, charged);
    return r;
  }
  preemption::uses_unmovable(shm::ProcessSlot::kUsesManaged);  // the checkpoint cannot move it
  return remember(device_pointers(), *dptr, dev, charged, [&] { real<Sym::cuMemFree_v2>()(*dptr); });
}

CUSLICE_EXPORT CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                                  size_t Height, unsigned int ElementSizeBytes) {
  auto fn = real<Sym::cuMemAllocPitch_v2>();
  if (fn == nullptr) return unavailable_result();
  preemption::wait_while_suspended();
  if (!quota::active()) return fn(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  const int dev = quota::current_device();
  if (!quota::accounted(dev) || dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0)
    return fn(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  const quota::Operation op(dev);
  // The pitch is known only afterwards: charge for rows padded to 512 bytes (the most the
  // driver pads), then correct to the pitch it chose.
  const uint64_t estimate = quota::allocation_charge(quota::round_up(WidthInBytes, 512) * Height);
  if (!quota::charge_allocation(dev, estimate)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult r = preemption::after_out_of_memory(
      dev, estimate, fn(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes),
      [&] { return fn(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes); });
  if (r != CUDA_SUCCESS) {
    quota::uncharge_allocation(dev, estimate);
    return r;
  }
  const uint64_t actual = quota::allocation_charge(static_cast<uint64_t>(*pPitch) * Height);
  if (actual != estimate) {
    quota::uncharge_allocation(dev, estimate);
    if (!quota::charge_allocation(dev, actual)) {
      real<Sym::cuMemFree_v2>()(*dptr);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  return remember(device_pointers(), *dptr, dev, actual, [&] { real<Sym::cuMemFree_v2>()(*dptr); });
}

CUSLICE_EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  auto fn = real<Sym::cuMemFree_v2>();
  if (fn == nullptr) return unavailable_result();
  const auto release = [&] {
    CUresult r;
    return movable::release(dptr, &r) ? r : fn(dptr);
  };
  if (!quota::active()) return release();
  return forget(device_pointers(), dptr, release);
}

CUSLICE_EXPORT CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  auto fn = real<Sym::cuMemGetAddressRange_v2>();
  if (fn == nullptr) return unavailable_result();
  // Movable memory is several mappings in one range: the range is what cuMemAlloc gave.
  if (movable::address_range(dptr, pbase, psize)) return CUDA_SUCCESS;
  return fn(pbase, psize, dptr);
}

// Virtual memory management (PyTorch expandable segments, NCCL): physical memory is what
// cuMemCreate makes; mapping it costs nothing more.
CUSLICE_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                           const CUmemAllocationProp* prop, unsigned long long flags) {
  auto fn = real<Sym::cuMemCreate>();
  if (fn == nullptr) return unavailable_result();
  preemption::wait_while_suspended();
  if (!quota::active() || prop == nullptr || handle == nullptr ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return fn(handle, size, prop, flags);
  const int dev = prop->location.id;
  if (!quota::accounted(dev)) return fn(handle, size, prop, flags);
  const quota::Operation op(dev);
  const uint64_t charged = quota::round_up(size, quota::kGranule);
  if (!quota::charge(dev, charged)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult r = preemption::after_out_of_memory(dev, charged, fn(handle, size, prop, flags),
                                                     [&] { return fn(handle, size, prop, flags); });
  if (r != CUDA_SUCCESS) {
    quota::uncharge(dev, charged);
    return r;
  }
  return remember(vmm_handles(), *handle, dev, charged, [&] { real<Sym::cuMemRelease>()(*handle); });
}

CUSLICE_EXPORT CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  auto fn = real<Sym::cuMemRetainAllocationHandle>();
  if (fn == nullptr) return unavailable_result();
  const CUresult r = fn(handle, addr);
  // Each retain needs its own cuMemRelease before the memory goes.
  if (r == CUDA_SUCCESS && quota::active()) vmm_handles().add_refs(*handle, 1);
  return r;
}

CUSLICE_EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  auto fn = real<Sym::cuMemRelease>();
  if (fn == nullptr) return unavailable_result();
  if (!quota::active() || !vmm_handles().contains(handle)) return fn(handle);
  const quota::Operation op(quota::current_device());
  const CUresult r = fn(handle);
  if (r == CUDA_SUCCESS && vmm_handles().add_refs(handle, -1) == 0) {
    Charge c;
    if (vmm_handles().remove(handle, &c)) quota::uncharge(c.device, c.bytes);
  }
  return r;
}

CUSLICE_EXPORT CUresult CUDAAPI cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  auto fn = real<Sym::cuArrayCreate_v2>();
  if (fn == nullptr) return unavailable_result();
  if (desc == nullptr) return fn(pHandle, desc);
  return create_array(pHandle, array_estimate(desc->Width, desc->Height, 0, desc->NumChannels, desc->Format, 1),
                      [&] { return fn(pHandle, desc); });
}

CUSLICE_EXPORT CUresult CUDAAPI cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  auto fn = real<Sym::cuArray3DCreate_v2>();
  if (fn == nullptr) return unavailable_result();
  if (desc == nullptr) return fn(pHandle, desc);
  return create_array(pHandle,
                      array_estimate(desc->Width, desc->Height, desc->Depth, desc->NumChannels, desc->Format, 1),
                      [&] { return fn(pHandle, desc); });
}

CUSLICE_EXPORT CUresult CUDAAPI cuArrayDestroy(CUarray hArray) {
  auto fn = real<Sym::cuArrayDestroy>();
  if (fn == nullptr) return unavailable_result();
  if (!quota::active()) return fn(hArray);
  return forget(arrays(), reinterpret_cast<uint64_t>(hArray), [&] { return fn(hArray); });
}

CUSLICE_EXPORT CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                                      unsigned int numMipmapLevels) {
  auto fn = real<Sym::cuMipmappedArrayCreate>();
  if (fn == nullptr) return unavailable_result();
  if (desc == nullptr) return fn(pHandle, desc, numMipmapLevels);
  return create_array(pHandle,
                      array_estimate(desc->Width, desc->Height, desc->Depth, desc->NumChannels, desc->Format,
                                     numMipmapLevels),
                      [&] { return fn(pHandle, desc, numMipmapLevels); });
}

CUSLICE_EXPORT CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  auto fn = real<Sym::cuMipmappedArrayDestroy>();
  if (fn == nullptr) return unavailable_result();
  if (!quota::active()) return fn(hMipmappedArray);
  return forget(arrays(), reinterpret_cast<uint64_t>(hMipmappedArray), [&] { return fn(hMipmappedArray); });
}

}  // extern "C"
