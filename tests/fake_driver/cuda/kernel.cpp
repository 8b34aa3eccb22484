// Modules, functions and kernel launches. Any image loads and any name resolves; launches are
// validated, then "run" by run_kernel(), which places the kernel on its device's timeline and
// returns at once, as a launch on a GPU does. Kernels touch no device memory's bytes; under
// FAKE_CUDA_FAULT_ON_UNMAPPED a launch while VMM memory is unmapped faults instead
// (CUDA_ERROR_ILLEGAL_ADDRESS, context poisoned: DriverState::fault), and in an MPS client a
// kernel named mps_fault* faults and ends the client's server (mps_client.h).
//
// How long a kernel takes comes from its name: "spin_<N>us" occupies the device for N
// microseconds; any other name for FAKE_CUDA_KERNEL_US (default 0).
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tests/fake_driver/cuda/driver_state.h"
#include "tests/fake_driver/cuda/graph_nodes.h"
#include "tests/fake_driver/cuda/stream_order.h"

using namespace fake_cuda;

namespace {

struct LaunchShape {
  unsigned int grid[3];
  unsigned int block[3];
  unsigned int shared_bytes;
};

std::int64_t kernel_duration_ns(const char* name, const Knobs& knobs) {
  constexpr char kPrefix[] = "spin_";
  constexpr std::size_t kPrefixLength = sizeof kPrefix - 1;
  if (std::strncmp(name, kPrefix, kPrefixLength) == 0 && name[kPrefixLength] >= '0' &&
      name[kPrefixLength] <= '9') {
    char* end = nullptr;
    errno = 0;
    const unsigned long long us = std::strtoull(name + kPrefixLength, &end, 10);
    if (errno == 0 && std::strcmp(end, "us") == 0 && us <= 3'600'000'000ull) {
      return static_cast<std::int64_t>(us) * 1000;
    }
  }
  return static_cast<std::int64_t>(knobs.kernel_us) * 1000;
}

// Where a launch takes effect: lazy module loading (the process's first launch adds
// FAKE_CUDA_MODULE_BYTES to the context), the count, and the kernel's time on the device.
CUresult run_kernel(DriverState& state, StreamQueue& queue, CUfunction function) {
  CUctx_st* ctx = queue.context();
  if (!state.module_loaded) {
    if (!state.ledger.try_charge(ctx->device, FAKE_CUDA_CHARGE_MODULE, state.knobs.module_bytes)) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ctx->module_bytes += state.knobs.module_bytes;
    state.module_loaded = true;
  }
  ++state.launches;
  enqueue_kernel(state, queue, function->duration_ns);
  return CUDA_SUCCESS;
}

CUresult launch(CUfunction function, const LaunchShape& shape, CUstream stream, void** params,
                void** extra, DefaultStream zero) {
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
  StreamQueue queue;
  CUstream_st* stream_state = nullptr;
  if (CUresult rc = StreamQueue::resolve(*s, stream, zero, &queue, &stream_state)) return rc;
  // A kernel launched into a capturing stream becomes a node of the graph; cuGraphLaunch runs it.
  if (stream_state != nullptr && stream_state->capture != nullptr) {
    add_kernel_node(stream_state->capture, function->duration_ns);
    return CUDA_SUCCESS;
  }
  // FAKE_CUDA_FAULT_ON_UNMAPPED: a kernel run while memory the process mapped is away faults, as
  // one that touched it would; its context is poisoned (later calls fail the same way).
  if (s->fault_armed()) {
    s->fault(queue.context(), "kernel launch");
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  // An MPS client whose server ended, or its mps_fault* kernel that ends it (mps_client.h).
  if (CUresult rc = mps_launch(*s, queue.context(), function->name)) return rc;
  return run_kernel(*s, queue, function);
}

CUresult launch_kernel(CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                       unsigned int block_x, unsigned int block_y, unsigned int block_z,
                       unsigned int shared_bytes, CUstream stream, void** params, void** extra,
                       DefaultStream zero) {
  return launch(f, {{grid_x, grid_y, grid_z}, {block_x, block_y, block_z}, shared_bytes}, stream,
                params, extra, zero);
}

CUresult launch_kernel_ex(const CUlaunchConfig* config, CUfunction f, void** params, void** extra,
                          DefaultStream zero) {
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return launch(f,
                {{config->gridDimX, config->gridDimY, config->gridDimZ},
                 {config->blockDimX, config->blockDimY, config->blockDimZ},
                 config->sharedMemBytes},
                config->hStream, params, extra, zero);
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
  resolved->duration_ns = kernel_duration_ns(name, s->knobs);
  *function = s->functions.add(std::move(resolved));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                                unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                                void** params, void** extra) {
  return launch_kernel(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream,
                       params, extra, DefaultStream::kLegacy);
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                                     unsigned int grid_z, unsigned int block_x,
                                     unsigned int block_y, unsigned int block_z,
                                     unsigned int shared_bytes, CUstream stream, void** params,
                                     void** extra) {
  return launch_kernel(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream,
                       params, extra, DefaultStream::kPerThread);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                  void** extra) {
  return launch_kernel_ex(config, f, params, extra, DefaultStream::kLegacy);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                                       void** extra) {
  return launch_kernel_ex(config, f, params, extra, DefaultStream::kPerThread);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int grid_x, unsigned int grid_y,
                                           unsigned int grid_z, unsigned int block_x,
                                           unsigned int block_y, unsigned int block_z,
                                           unsigned int shared_bytes, CUstream stream,
                                           void** params) {
  return launch_kernel(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream,
                       params, nullptr, DefaultStream::kLegacy);
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int grid_x,
                                                unsigned int grid_y, unsigned int grid_z,
                                                unsigned int block_x, unsigned int block_y,
                                                unsigned int block_z, unsigned int shared_bytes,
                                                CUstream stream, void** params) {
  return launch_kernel(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream,
                       params, nullptr, DefaultStream::kPerThread);
}

}  // extern "C"
