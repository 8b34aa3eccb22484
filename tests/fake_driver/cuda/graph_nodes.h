// Building graph nodes, shared by the cuGraphAdd*Node entry points and stream capture (where
// cuMemAllocAsync, cuMemFreeAsync and kernel launches become nodes of the graph being captured).
// Callers hold the Session.
#pragma once

#include <cstdint>

#include "tests/fake_driver/cuda/driver_state.h"

namespace fake_cuda {

// A memory allocation node: its address is fixed for the graph's lifetime, as on the real driver.
CUgraphNode_st* add_alloc_node(DriverState& state, CUgraph_st* graph, int device, std::size_t bytes);

// A memory free node of dptr.
CUgraphNode_st* add_free_node(CUgraph_st* graph, CUdeviceptr dptr);

// A kernel node that occupies the device for kernel_ns each time the graph runs.
CUgraphNode_st* add_kernel_node(CUgraph_st* graph, std::int64_t kernel_ns);

}  // namespace fake_cuda
