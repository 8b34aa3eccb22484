// Graphs, as far as they hold memory: allocation and free nodes, instantiation, launch, and the
// per-device graph memory pool.
//
// Model: an executable graph needs the sum of its allocation nodes (each rounded up to 2 MiB) on
// each device. Its first launch takes that from the graph pool: first from reserve left idle by
// destroyed executable graphs, then by charging the device. Destroying the executable graph
// leaves its share reserved but idle until cuDeviceGraphMemTrim. Reuse of memory between the
// allocations of one graph, and between live graphs, is not modelled.
#include <algorithm>

#include "driver_state.h"
#include "graph_memory.h"

namespace fake_cuda {

CUgraphNode_st* add_alloc_node(DriverState& state, CUgraph_st* graph, int device, std::size_t bytes) {
  auto node = std::make_unique<CUgraphNode_st>();
  node->device = device;
  node->bytes = bytes;
  node->dptr = state.take_address_range(bytes);
  graph->nodes.push_back(std::move(node));
  return graph->nodes.back().get();
}

CUgraphNode_st* add_free_node(CUgraph_st* graph, CUdeviceptr dptr) {
  auto node = std::make_unique<CUgraphNode_st>();
  node->dptr = dptr;
  graph->nodes.push_back(std::move(node));
  return graph->nodes.back().get();
}

}  // namespace fake_cuda

using namespace fake_cuda;

namespace {

// Takes an executable graph's memory from the graph pools, all devices or none.
CUresult reserve_graph_memory(DriverState& state, CUgraphExec_st* exec) {
  std::array<std::size_t, kMaxDevices> charged{};
  for (int dev = 0; dev < state.ledger.device_count(); ++dev) {
    GraphMemoryPool& pool = state.graph_pools[dev];
    const std::size_t from_idle = std::min(pool.idle, exec->allocation_bytes[dev]);
    charged[dev] = exec->allocation_bytes[dev] - from_idle;
    if (!state.ledger.try_charge(dev, FAKE_CUDA_CHARGE_GRAPH, charged[dev])) {
      for (int undo = 0; undo < dev; ++undo) {
        state.ledger.release(undo, FAKE_CUDA_CHARGE_GRAPH, charged[undo]);
      }
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  for (int dev = 0; dev < state.ledger.device_count(); ++dev) {
    GraphMemoryPool& pool = state.graph_pools[dev];
    pool.idle -= exec->allocation_bytes[dev] - charged[dev];
    pool.in_use += exec->allocation_bytes[dev];
    pool.used_high = std::max(pool.used_high, pool.in_use);
    pool.reserved_high = std::max(pool.reserved_high, pool.in_use + pool.idle);
  }
  exec->reserved = true;
  return CUDA_SUCCESS;
}

CUresult launch_graph(CUgraphExec exec, CUstream stream) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->graph_execs.contains(exec)) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = nullptr;
  if (CUresult rc = s->stream_context(stream, &ctx)) return rc;
  return exec->reserved ? CUDA_SUCCESS : reserve_graph_memory(*s, exec);
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuGraphCreate(CUgraph* graph, unsigned int flags) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (graph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  *graph = s->graphs.add(std::make_unique<CUgraph_st>());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph graph) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->graphs.contains(graph)) return CUDA_ERROR_INVALID_VALUE;
  s->graphs.remove(graph);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph,
                                        const CUgraphNode* dependencies, size_t dependency_count,
                                        CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (node == nullptr || params == nullptr || params->bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!s->graphs.contains(graph)) return CUDA_ERROR_INVALID_VALUE;
  const CUmemLocation& location = params->poolProps.location;
  if (location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (!s->ledger.valid(location.id)) return CUDA_ERROR_INVALID_DEVICE;
  *node = add_alloc_node(*s, graph, location.id, params->bytesize);
  params->dptr = (*node)->dptr;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph,
                                       const CUgraphNode* dependencies, size_t dependency_count,
                                       CUdeviceptr dptr) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (node == nullptr || !s->graphs.contains(graph)) return CUDA_ERROR_INVALID_VALUE;
  *node = add_free_node(graph, dptr);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                             unsigned long long flags) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (exec == nullptr || !s->graphs.contains(graph)) return CUDA_ERROR_INVALID_VALUE;
  auto created = std::make_unique<CUgraphExec_st>();
  for (const auto& graph_node : graph->nodes) {
    created->allocation_bytes[graph_node->device] += round_up(graph_node->bytes, kGranularity);
  }
  *exec = s->graph_execs.add(std::move(created));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  return launch_graph(exec, stream);
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return launch_graph(exec, stream);
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec exec) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->graph_execs.contains(exec)) return CUDA_ERROR_INVALID_VALUE;
  if (exec->reserved) {
    for (int dev = 0; dev < s->ledger.device_count(); ++dev) {
      s->graph_pools[dev].in_use -= exec->allocation_bytes[dev];
      s->graph_pools[dev].idle += exec->allocation_bytes[dev];
    }
  }
  s->graph_execs.remove(exec);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attribute,
                                              void* value) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  const GraphMemoryPool& pool = s->graph_pools[dev];
  cuuint64_t* number = static_cast<cuuint64_t*>(value);
  switch (attribute) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *number = pool.in_use; break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: *number = pool.used_high; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *number = pool.in_use + pool.idle; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *number = pool.reserved_high; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice dev) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->ledger.valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
  s->ledger.release(dev, FAKE_CUDA_CHARGE_GRAPH, s->graph_pools[dev].idle);
  s->graph_pools[dev].idle = 0;
  return CUDA_SUCCESS;
}

}  // extern "C"
