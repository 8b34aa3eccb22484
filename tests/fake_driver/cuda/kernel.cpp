// Modules, functions and kernel launches. Any image loads and any name resolves; launches are
// validated, then "run" by run_kernel().
#include "driver_state.h"

using namespace fake_cuda;

namespace {

struct LaunchShape {
  unsigned int grid[3];
  unsigned int block[3];
  unsigned int shared_bytes;
};

// Where a launch takes effect. Today: lazy module loading (the process's first launch adds
// FAKE_CUDA_MODULE_BYTES to the context) and a count. Simulated run time on a device shared by
// several processes belongs here too.
CUresult run_kernel(DriverState& state, CUctx_st* ctx, const LaunchShape& shape) {
  if (!state.module_loaded) {
    if (!state.ledger.try_charge(ctx->device, FAKE_CUDA_CHARGE_MODULE, state.knobs.module_bytes)) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ctx->module_bytes += state.knobs.module_bytes;
    state.module_loaded = true;
  }
  ++state.launches;
  return CUDA_SUCCESS;
}

CUresult launch(CUfunction function, const LaunchShape& shape, CUstream stream, void** params,
                void** extra) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->functions.contains(function)) return CUDA_ERROR_INVALID_HANDLE;
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned int dim : shape.grid) {
    if (dim == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  unsigned long long threads = 1;
  for (unsigned int dim : shape.block) {
    if (dim == 0) return CUDA_ERROR_INVALID_VALUE;
    threads *= dim;
  }
  if (threads > 1024) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  CUstream_st* stream_state = nullptr;
  if (CUresult rc = s->stream_context(stream, &ctx, &stream_state)) return rc;
  // A kernel launched into a capturing stream is recorded, not run (the fake records nothing).
  if (stream_state != nullptr && stream_state->capture != nullptr) return CUDA_SUCCESS;
  return run_kernel(*s, ctx, shape);
}

CUresult launch_kernel(CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                       unsigned int block_x, unsigned int block_y, unsigned int block_z,
                       unsigned int shared_bytes, CUstream stream, void** params, void** extra) {
  return launch(f, {{grid_x, grid_y, grid_z}, {block_x, block_y, block_z}, shared_bytes}, stream,
                params, extra);
}

CUresult launch_kernel_ex(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return launch(f,
                {{config->gridDimX, config->gridDimY, config->gridDimZ},
                 {config->blockDimX, config->blockDimY, config->blockDimZ},
                 config->sharedMemBytes},
                config->hStream, params, extra);
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = s->current_context(&ctx)) return rc;
  auto loaded = std::make_unique<CUmod_st>();
  loaded->ctx = ctx;
  *module = s->modules.add(std::move(loaded));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->modules.contains(module)) return CUDA_ERROR_INVALID_HANDLE;
  s->functions.remove_if([&](const CUfunc_st& function) { return function.module == module; });
  s->modules.remove(module);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (function == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!s->modules.contains(module)) return CUDA_ERROR_INVALID_HANDLE;
  auto resolved = std::make_unique<CUfunc_st>();
  resolved->module = module;
  resolved->name = name;
  *function = s->functions.add(std::move(resolved));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                                unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                                void** params, void** extra) {
  return launch_kernel(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream,
                       params, extra);
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                                     unsigned int grid_z, unsigned int block_x,
                                     unsigned int block_y, unsigned int block_z,
                                     unsigned int shared_bytes, CUstream stream, void** params,
                                     void** extra) {
  return launch_kernel(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream,
                       params, extra);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                  void** extra) {
  return launch_kernel_ex(config, f, params, extra);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                                       void** extra) {
  return launch_kernel_ex(config, f, params, extra);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                                           unsigned int grid_z, unsigned int block_x,
                                           unsigned int block_y, unsigned int block_z,
                                           unsigned int shared_bytes, CUstream stream,
                                           void** params) {
  return launch_kernel(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream,
                       params, nullptr);
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int grid_x,
                                                unsigned int grid_y, unsigned int grid_z,
                                                unsigned int block_x, unsigned int block_y,
                                                unsigned int block_z, unsigned int shared_bytes,
                                                CUstream stream, void** params) {
  return launch_kernel(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream,
                       params, nullptr);
}

}  // extern "C"
