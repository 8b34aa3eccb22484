// CUDA arrays and mipmapped arrays. Their size model:
//   row   = width * channels * bytes per channel, padded to 512 bytes
//   level = row * max(height, 1) * max(depth, 1)
//   array = sum of its levels (one for a plain array), rounded up to 2 MiB
// Formats: the integer, half and float formats; the packed and video formats are refused with
// CUDA_ERROR_NOT_SUPPORTED.
#include <algorithm>

#include "tests/fake_driver/cuda/driver_state.h"

using namespace fake_cuda;

namespace {

std::size_t bytes_per_channel(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
  }
}

// Bytes of an array of `levels` mipmap levels (1: a plain array), before the 2 MiB rounding;
// 0 with *rc set when the descriptor is refused.
std::size_t array_bytes(const CUDA_ARRAY3D_DESCRIPTOR& desc, unsigned int levels, CUresult* rc) {
  const std::size_t channel_bytes = bytes_per_channel(desc.Format);
  const unsigned int channels = desc.NumChannels;
  *rc = CUDA_SUCCESS;
  if (channel_bytes == 0) *rc = CUDA_ERROR_NOT_SUPPORTED;
  if (desc.Width == 0 || levels == 0 || (channels != 1 && channels != 2 && channels != 4)) {
    *rc = CUDA_ERROR_INVALID_VALUE;
  }
  if (*rc != CUDA_SUCCESS) return 0;
  std::size_t total = 0;
  for (unsigned int level = 0; level < levels; ++level) {
    const std::size_t width = std::max<std::size_t>(desc.Width >> level, 1);
    const std::size_t height = std::max<std::size_t>(desc.Height >> level, 1);
    const std::size_t depth = std::max<std::size_t>(desc.Depth >> level, 1);
    total += round_up(width * channels * channel_bytes, 512) * height * depth;
  }
  return total;
}

// Creates an array (T = CUarray_st) or a mipmapped array (T = CUmipmappedArray_st) in the
// current context.
template <class T>
CUresult create(T** handle, Registry<T> DriverState::*registry, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                unsigned int levels) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (handle == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = s->current_context(&ctx)) return rc;
  CUresult rc = CUDA_SUCCESS;
  const std::size_t bytes = array_bytes(*desc, levels, &rc);
  if (rc != CUDA_SUCCESS) return rc;
  auto array = std::make_unique<T>();
  array->owner = ctx;
  array->device = ctx->device;
  array->size = round_up(bytes, kGranularity);
  const bool backed = (desc->Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) == 0;
  array->charged = backed ? array->size : 0;
  if (!s->ledger.try_charge(ctx->device, FAKE_CUDA_CHARGE_ARRAY, array->charged)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *handle = ((*s).*registry).add(std::move(array));
  return CUDA_SUCCESS;
}

template <class T>
CUresult destroy(T* handle, Registry<T> DriverState::*registry) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!((*s).*registry).contains(handle)) return CUDA_ERROR_INVALID_HANDLE;
  s->ledger.release(handle->device, FAKE_CUDA_CHARGE_ARRAY, handle->charged);
  ((*s).*registry).remove(handle);
  return CUDA_SUCCESS;
}

template <class T>
CUresult memory_requirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* requirements, T* handle,
                             Registry<T> DriverState::*registry, CUdevice dev) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (requirements == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!((*s).*registry).contains(handle)) return CUDA_ERROR_INVALID_HANDLE;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *requirements = {};
  requirements->size = handle->size;
  requirements->alignment = kGranularity;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuArrayCreate_v2(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR desc3d = {};
  desc3d.Width = desc->Width;
  desc3d.Height = desc->Height;
  desc3d.Format = desc->Format;
  desc3d.NumChannels = desc->NumChannels;
  return create(handle, &DriverState::arrays, &desc3d, 1);
}

CUresult CUDAAPI cuArray3DCreate_v2(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  return create(handle, &DriverState::arrays, desc, 1);
}

CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray* handle,
                                        const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                        unsigned int levels) {
  return create(handle, &DriverState::mipmapped_arrays, desc, levels);
}

CUresult CUDAAPI cuArrayDestroy(CUarray handle) { return destroy(handle, &DriverState::arrays); }

CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray handle) {
  return destroy(handle, &DriverState::mipmapped_arrays);
}

CUresult CUDAAPI cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* requirements,
                                              CUarray handle, CUdevice dev) {
  return memory_requirements(requirements, handle, &DriverState::arrays, dev);
}

CUresult CUDAAPI cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* requirements,
                                                       CUmipmappedArray handle, CUdevice dev) {
  return memory_requirements(requirements, handle, &DriverState::mipmapped_arrays, dev);
}

}  // extern "C"
