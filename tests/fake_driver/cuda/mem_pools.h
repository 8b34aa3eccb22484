// The stream-ordered pool model (see CUmemPoolHandle_st), shared by the pool entry points, the
// frees that may meet a pool allocation, and the synchronising calls. Callers hold the Session.
#pragma once

#include "tests/fake_driver/cuda/driver_state.h"

namespace fake_cuda {

// Pool allocations are carved in units of this size from the pool's 2 MiB chunks.
inline constexpr std::size_t kPoolBlockAlignment = 512;

// Takes bytes from the pool, growing its reserve if needed (CUDA_ERROR_OUT_OF_MEMORY when the
// device or the pool's maxSize cannot hold the growth), and records the allocation.
CUresult pool_allocate(DriverState& state, CUmemPoolHandle_st* pool, std::size_t bytes,
                       CUctx_st* owner, CUdeviceptr* dptr);

// Returns a kPool allocation's bytes to its pool (which keeps them reserved) and forgets it.
void pool_free(DriverState& state, CUdeviceptr base);

// Releases unused reserve, keeping at least max(keep, used) rounded up to whole chunks.
void trim_pool(DriverState& state, CUmemPoolHandle_st* pool, std::size_t keep);

// What cuStreamSynchronize, cuCtxSynchronize and cuEventSynchronize do to every pool: trim it to
// its release threshold.
void release_pool_reserves_on_sync(DriverState& state);

}  // namespace fake_cuda
