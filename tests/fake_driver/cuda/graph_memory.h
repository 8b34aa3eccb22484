// Graph memory nodes, shared by cuGraphAddMem*Node and stream capture (where cuMemAllocAsync and
// cuMemFreeAsync become nodes of the graph being captured). Callers hold the Session.
#pragma once

#include "driver_state.h"

namespace fake_cuda {

// A memory allocation node: its address is fixed for the graph's lifetime, as on the real driver.
CUgraphNode_st* add_alloc_node(DriverState& state, CUgraph_st* graph, int device, std::size_t bytes);

// A memory free node of dptr.
CUgraphNode_st* add_free_node(CUgraph_st* graph, CUdeviceptr dptr);

}  // namespace fake_cuda
