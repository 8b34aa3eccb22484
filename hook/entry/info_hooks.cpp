// What the application is told about memory: the quota is the device's size. PyTorch's
// mem_get_info, JAX's preallocation (75% of total), vLLM's sizing all read these.
#include "hook/driver/driver.h"
#include "hook/memory/quota.h"

using namespace cuslice;

extern "C" {

CUSLICE_EXPORT CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  auto fn = real<Sym::cuMemGetInfo_v2>();
  if (fn == nullptr) return unavailable_result();
  const CUresult r = fn(free, total);
  if (r != CUDA_SUCCESS || !quota::active() || free == nullptr || total == nullptr) return r;
  const int dev = quota::current_device();
  if (!quota::accounted(dev)) return r;
  quota::refresh_view(dev);
  const quota::View v = quota::view(dev);
  if (v.total == quota::kUnlimited) return r;  // counted for a scheduler, but no quota
  // Never an error when usage is above the quota (after a measured correction): callers
  // such as torch.cuda.mem_get_info would throw. Free is what is left, and never more than
  // the device really has free (other processes share it).
  const uint64_t left = v.used < v.total ? v.total - v.used : 0;
  if (v.total < *total) *total = v.total;
  if (left < *free) *free = left;
  return r;
}

CUSLICE_EXPORT CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  auto fn = real<Sym::cuDeviceTotalMem_v2>();
  if (fn == nullptr) return unavailable_result();
  const CUresult r = fn(bytes, dev);
  if (r == CUDA_SUCCESS && bytes != nullptr && quota::active() && quota::accounted(dev)) {
    const uint64_t total = quota::view(dev).total;
    if (total < *bytes) *bytes = total;
  }
  return r;
}

}  // extern "C"
