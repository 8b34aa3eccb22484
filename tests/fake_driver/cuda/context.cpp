// Primary and created contexts, and the calling thread's context stack.
#include <algorithm>

#include "tests/fake_driver/cuda/driver_state.h"
#include "tests/fake_driver/cuda/mem_pools.h"
#include "tests/fake_driver/cuda/stream_order.h"

using namespace fake_cuda;

namespace {

CUresult create_context(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  auto ctx = std::make_unique<CUctx_st>();
  ctx->device = dev;
  ctx->flags = flags;
  if (CUresult rc = s->activate(ctx.get())) return rc;
  *pctx = s->created_contexts.add(std::move(ctx));
  thread_context_stack(*s).push_back(*pctx);
  return CUDA_SUCCESS;
}

CUresult context_device(CUdevice* device, CUcontext ctx) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx == nullptr) {
    if (CUresult rc = s->current_context(&ctx)) return rc;
  } else if (!s->is_live_context(ctx)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  *device = ctx->device;
  return CUDA_SUCCESS;
}

// Waits for the simulated end of everything queued on the context's streams (per-thread and
// destroyed ones included), then lets the stream-ordered pools give back their unused reserve.
CUresult synchronize_context(CUcontext ctx) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (ctx == nullptr) {
    if (CUresult rc = s->current_context(&ctx)) return rc;
  } else if (!s->is_live_context(ctx)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  } else if (ctx->faulted) {
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  if (CUresult rc = mps_check(s->mps)) return rc;
  s.wait_until([&] { return s->is_live_context(ctx) ? context_completes_at(*s, ctx) : 0; });
  if (s->is_live_context(ctx) && ctx->faulted) return CUDA_ERROR_ILLEGAL_ADDRESS;
  if (CUresult rc = mps_check(s->mps)) return rc;
  release_pool_reserves_on_sync(*s);
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  CUctx_st* primary = s->primary_contexts[dev].get();
  if (!primary->active) {
    if (CUresult rc = s->activate(primary)) return rc;
  }
  ++primary->retain_count;
  *pctx = primary;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  CUctx_st* primary = s->primary_contexts[dev].get();
  if (primary->retain_count == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--primary->retain_count == 0) s->deactivate(primary);
  return CUDA_SUCCESS;
}

// Frees everything the primary context holds; holders keep their (now inactive) handle, which
// comes back to life, charged again, at its next use.
CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  s->deactivate(s->primary_contexts[dev].get());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  const CUctx_st* primary = s->primary_contexts[dev].get();
  *flags = primary->flags;
  *active = primary->retain_count > 0 && primary->active;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  s->primary_contexts[dev]->flags = flags;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return create_context(pctx, flags, dev);
}

// Execution affinity (SM limits) and CIG parameters are accepted and ignored.
CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int num_params,
                                unsigned int flags, CUdevice dev) {
  if (num_params < 0 || (num_params > 0 && params == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return create_context(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                CUdevice dev) {
  return create_context(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->created_contexts.contains(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  s->deactivate(ctx);
  std::erase(thread_context_stack(*s), ctx);
  s->created_contexts.remove(ctx);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  auto& stack = thread_context_stack(*s);
  if (ctx == nullptr) {
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (!s->is_live_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (stack.empty()) {
    stack.push_back(ctx);
  } else {
    stack.back() = ctx;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto& stack = thread_context_stack(*s);
  *pctx = stack.empty() || !s->is_live_context(stack.back()) ? nullptr : stack.back();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->is_live_context(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  thread_context_stack(*s).push_back(ctx);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  auto& stack = thread_context_stack(*s);
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = stack.back();
  stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) { return context_device(device, nullptr); }

CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  return context_device(device, ctx);
}

CUresult CUDAAPI cuCtxSynchronize(void) { return synchronize_context(nullptr); }

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) { return synchronize_context(ctx); }

}  // extern "C"
