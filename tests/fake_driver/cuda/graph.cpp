// Graphs, as far as they hold memory or take device time: allocation, free and kernel nodes,
// instantiation, launch, and the per-device graph memory pool.
//
// Time: a launch runs the graph's kernel nodes (cuGraphAddKernelNode*, or launches captured from
// a stream) back to back, as one stretch of device time on the launch stream; other processes'
// kernels do not interleave with it. A graph without kernel nodes takes no time.
//
// Model: an executable graph needs the sum of its allocation nodes (each rounded up to 2 MiB) on
// each device. Its first launch takes that from the graph pool: first from reserve left idle by
// destroyed executable graphs, then by charging the device. Destroying the executable graph
// leaves its share reserved but idle until cuDeviceGraphMemTrim. Reuse of memory between the
// allocations of one graph, and between live graphs, is not modelled.
#include <algorithm>

#include "tests/fake_driver/cuda/driver_state.h"
#include "tests/fake_driver/cuda/graph_nodes.h"
#include "tests/fake_driver/cuda/stream_order.h"

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
  node->kind = CUgraphNode_st::Kind::kMemFree;
  node->dptr = dptr;
  graph->nodes.push_back(std::move(node));
  return graph->nodes.back().get();
}

CUgraphNode_st* add_kernel_node(CUgraph_st* graph, std::int64_t kernel_ns) {
  auto node = std::make_unique<CUgraphNode_st>();
  node->kind = CUgraphNode_st::Kind::kKernel;
  node->kernel_ns = kernel_ns;
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

CUresult launch_graph(CUgraphExec exec, CUstream stream, DefaultStream zero) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (!s->graph_execs.contains(exec)) return CUDA_ERROR_INVALID_VALUE;
  StreamQueue queue;
  if (CUresult rc = StreamQueue::resolve(*s, stream, zero, &queue)) return rc;
  if (CUresult rc = mps_check(s->mps)) return rc;
  if (s->fault_armed()) {  // FAKE_CUDA_FAULT_ON_UNMAPPED, as a kernel launch (kernel.cpp)
    s->fault(queue.context(), "graph launch");
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  if (!exec->reserved) {
    if (CUresult rc = reserve_graph_memory(*s, exec)) return rc;
  }
  if (exec->kernels > 0) enqueue_kernel(*s, queue, exec->kernel_ns);
  return CUDA_SUCCESS;
}

// cuGraphAddKernelNode and _v2: both parameter structs begin with the function.
template <class Params>
CUresult add_kernel_node_entry(CUgraphNode* node, CUgraph graph, const Params* params) {
  Session s;
  if (CUresult rc = s.require_init()) return rc;
  if (node == nullptr || params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!s->graphs.contains(graph)) return CUDA_ERROR_INVALID_VALUE;
  if (!s->functions.contains(params->func)) return CUDA_ERROR_INVALID_HANDLE;
  *node = add_kernel_node(graph, params->func->duration_ns);
  return CUDA_SUCCESS;
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

CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode* node, CUgraph graph,
                                      const CUgraphNode* dependencies, size_t dependency_count,
                                      const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  return add_kernel_node_entry(node, graph, params);
}

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode* node, CUgraph graph,
                                         const CUgraphNode* dependencies, size_t dependency_count,
                                         const CUDA_KERNEL_NODE_PARAMS_v2* params) {
  return add_kernel_node_entry(node, graph, params);
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
    switch (graph_node->kind) {
      case CUgraphNode_st::Kind::kMemAlloc:
        created->allocation_bytes[graph_node->device] += round_up(graph_node->bytes, kGranularity);
        break;
      case CUgraphNode_st::Kind::kKernel:
        created->kernel_ns += graph_node->kernel_ns;
        ++created->kernels;
        break;
      case CUgraphNode_st::Kind::kMemFree: break;
    }
  }
  *exec = s->graph_execs.add(std::move(created));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  return launch_graph(exec, stream, DefaultStream::kLegacy);
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return launch_graph(exec, stream, DefaultStream::kPerThread);
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
