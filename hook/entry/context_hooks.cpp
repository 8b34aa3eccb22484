// A CUDA context holds device memory of its own (527 MiB measured on an idle H100 context)
// that no allocation call shows. Each context is charged before the driver creates it, so a
// quota smaller than a context fails the creation with CUDA_ERROR_OUT_OF_MEMORY.
#include <atomic>

#include "hook/base/settings.h"
#include "hook/bookkeeping/allocation_table.h"
#include "hook/driver/driver.h"
#include "hook/memory/quota.h"
#include "hook/monitor/activity.h"
#include "hook/movable/host_pool.h"
#include "hook/movable/movable_memory.h"

using namespace cuslice;

namespace {

// How often the primary context of each device is retained through the hook.
std::atomic<int> g_primary_refs[kMaxDevices];
// Contexts alive per device (the primary while retained, plus created ones).
std::atomic<int> g_live[kMaxDevices];

bool valid(int dev) { return dev >= 0 && dev < kMaxDevices && quota::accounted(dev); }

// Charged before creation, calibrated to the driver's figure after it.
bool begin_context(int dev) { return quota::charge_context(dev, settings().context_bytes); }

void created(int dev) {
  g_live[dev].fetch_add(1, std::memory_order_acq_rel);
  quota::calibrate_context(dev);
  quota::begin_warmup(dev);
}

void destroyed(int dev) {
  // The last context takes all context memory with it; otherwise what the others still hold
  // is measured again.
  if (g_live[dev].fetch_sub(1, std::memory_order_acq_rel) <= 1)
    quota::release_context(dev, quota::context_charge(dev));
  else
    quota::calibrate_context(dev);
}

template <typename Create>
CUresult create_context(CUcontext* pctx, int dev, Create create) {
  if (!quota::active() || !valid(dev) || pctx == nullptr) return create();
  if (!begin_context(dev)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult r = [&] {
    const quota::Operation op(dev);
    return create();
  }();
  if (r != CUDA_SUCCESS) {
    quota::release_context(dev, settings().context_bytes);
    return r;
  }
  contexts().insert(reinterpret_cast<uint64_t>(*pctx), Charge{0, dev, 1});
  created(dev);
  return r;
}

}  // namespace

namespace cuslice {
// fork() child: it holds no contexts.
void reset_context_counts() {
  for (int d = 0; d < kMaxDevices; ++d) {
    g_primary_refs[d].store(0, std::memory_order_relaxed);
    g_live[d].store(0, std::memory_order_relaxed);
  }
}
}  // namespace cuslice

extern "C" {

CUSLICE_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  auto fn = real<Sym::cuDevicePrimaryCtxRetain>();
  if (fn == nullptr) return unavailable_result();
  if (!quota::active() || !valid(dev)) return fn(pctx, dev);
  const bool first = g_primary_refs[dev].fetch_add(1, std::memory_order_acq_rel) == 0;
  if (first && !begin_context(dev)) {
    g_primary_refs[dev].fetch_sub(1, std::memory_order_acq_rel);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult r = [&] {
    const quota::Operation op(dev);
    return fn(pctx, dev);
  }();
  if (r != CUDA_SUCCESS) {
    g_primary_refs[dev].fetch_sub(1, std::memory_order_acq_rel);
    if (first) quota::release_context(dev, settings().context_bytes);
    return r;
  }
  if (first) created(dev);
  return r;
}

CUSLICE_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  auto fn = real<Sym::cuDevicePrimaryCtxRelease_v2>();
  if (fn == nullptr) return unavailable_result();
  const CUresult r = fn(dev);
  if (r == CUDA_SUCCESS && quota::active() && valid(dev) &&
      g_primary_refs[dev].fetch_sub(1, std::memory_order_acq_rel) == 1) {
    activity::forget_device(dev);  // the last release destroyed it, and its streams
    destroyed(dev);
  }
  return r;
}

CUSLICE_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  auto fn = real<Sym::cuDevicePrimaryCtxReset_v2>();
  if (fn == nullptr) return unavailable_result();
  activity::forget_device(dev);  // its streams die with it
  const CUresult r = fn(dev);
  // cuMemAlloc's memory goes with the context, so movable memory standing in for it goes too.
  if (r == CUDA_SUCCESS && valid(dev)) {
    movable::forget_device(dev);
    host_pool::forget_device(dev);
  }
  // Reset destroys every allocation of the primary context.
  if (r == CUDA_SUCCESS && quota::active() && valid(dev)) quota::forget_allocations(dev);
  return r;
}

CUSLICE_EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  auto fn = real<Sym::cuCtxCreate_v2>();
  if (fn == nullptr) return unavailable_result();
  return create_context(pctx, dev, [&] { return fn(pctx, flags, dev); });
}

CUSLICE_EXPORT CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
                                              unsigned int flags, CUdevice dev) {
  auto fn = real<Sym::cuCtxCreate_v3>();
  if (fn == nullptr) return unavailable_result();
  return create_context(pctx, dev, [&] { return fn(pctx, paramsArray, numParams, flags, dev); });
}

CUSLICE_EXPORT CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams,
                                              unsigned int flags, CUdevice dev) {
  auto fn = real<Sym::cuCtxCreate_v4>();
  if (fn == nullptr) return unavailable_result();
  return create_context(pctx, dev, [&] { return fn(pctx, ctxCreateParams, flags, dev); });
}

CUSLICE_EXPORT CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  auto fn = real<Sym::cuCtxDestroy_v2>();
  if (fn == nullptr) return unavailable_result();
  activity::forget_context(ctx);  // its streams die with it
  if (!quota::active()) return fn(ctx);
  Charge c;
  const bool tracked = contexts().remove(reinterpret_cast<uint64_t>(ctx), &c);
  const CUresult r = fn(ctx);
  if (tracked) {
    if (r == CUDA_SUCCESS)
      destroyed(c.device);
    else
      contexts().insert(reinterpret_cast<uint64_t>(ctx), c);
  }
  return r;
}

}  // extern "C"
