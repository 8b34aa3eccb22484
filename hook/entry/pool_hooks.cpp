// Stream-ordered allocations, pools and graph memory (accounting in pool_accounting.cpp). An
// allocation first waits while its tenant is suspended, and one the quota allows but the card
// cannot hold asks the scheduler for room (preemption.h), as synchronous allocations do.
#include "hook/driver/driver.h"
#include "hook/memory/pool_accounting.h"
#include "hook/memory/preemption.h"
#include "hook/memory/quota.h"

using namespace cuslice;

namespace {

// `pool`: the pool the request draws on (nullptr: the device's current pool); `undo` frees
// a successful allocation again.
template <typename Call, typename Undo>
CUresult charged_async(int dev, CUmemoryPool pool, size_t bytes, Call call, Undo undo) {
  preemption::wait_while_suspended();
  const quota::Operation op(dev);
  uint64_t charged = 0;
  if (pool_accounting::begin(dev, bytes, &charged)) {
    // The quota allows the pool's growth; a card too full for it asks the scheduler for room
    // as a synchronous allocation does, for the most the pool grows by.
    const CUresult r = preemption::after_out_of_memory(dev, charged, call(), call);
    pool_accounting::end(dev, charged, r == CUDA_SUCCESS);
    return r;
  }
  // Refused at the worst case: serve it from the pool's free reserve if that can hold it.
  if (pool == nullptr) pool = pool_accounting::current_pool(dev);
  uint64_t before = 0, after = 0, used = 0;
  if (!pool_accounting::pool_reserve(pool, &before, &used) || before - used < bytes)
    return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult r = preemption::after_out_of_memory(dev, bytes, call(), call);
  if (r != CUDA_SUCCESS || !pool_accounting::pool_reserve(pool, &after, &used) || after <= before) return r;
  // The pool grew all the same (its free reserve was fragmented).
  if (pool_accounting::charge_growth(dev, after - before)) return r;
  undo();
  return CUDA_ERROR_OUT_OF_MEMORY;
}

using FreeAsync = CUresult (*)(CUdeviceptr, CUstream);
FreeAsync free_async(bool per_thread) {
  static const auto legacy = reinterpret_cast<FreeAsync>(cuda_symbol("cuMemFreeAsync"));
  static const auto ptsz = reinterpret_cast<FreeAsync>(cuda_symbol("cuMemFreeAsync_ptsz"));
  return per_thread ? ptsz : legacy;
}

// cuMemAllocAsync and its per-thread twin (`S`, on the per-thread default stream if
// `kPerThread`): charged to the stream's device, from its current pool.
template <Sym S, bool kPerThread>
CUresult alloc_async(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  auto fn = real<S>();
  if (fn == nullptr) return unavailable_result();
  if (!quota::active()) return fn(dptr, bytesize, stream);
  const int dev = pool_accounting::stream_device(stream, kPerThread);
  return charged_async(dev, nullptr, bytesize, [&] { return fn(dptr, bytesize, stream); },
                       [&] { free_async(kPerThread)(*dptr, stream); });
}

// cuMemAllocFromPoolAsync and its per-thread twin: charged to the pool's device. (An unknown
// pool was imported from another process, whose memory it is.)
template <Sym S, bool kPerThread>
CUresult alloc_from_pool_async(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream stream) {
  auto fn = real<S>();
  if (fn == nullptr) return unavailable_result();
  if (!quota::active()) return fn(dptr, bytesize, pool, stream);
  const int dev = pool_accounting::pool_device(pool);
  return charged_async(dev, pool, bytesize, [&] { return fn(dptr, bytesize, pool, stream); },
                       [&] { free_async(kPerThread)(*dptr, stream); });
}

// cuGraphUpload and its per-thread twin: an upload makes the graph's memory nodes' reserve
// appear as its first launch does.
template <Sym S, bool kPerThread>
CUresult graph_upload(CUgraphExec exec, CUstream stream) {
  auto fn = real<S>();
  if (fn == nullptr) return unavailable_result();
  const CUresult r = fn(exec, stream);
  if (r == CUDA_SUCCESS && quota::active())
    pool_accounting::note_graph_launch(pool_accounting::stream_device(stream, kPerThread));
  return r;
}

}  // namespace

extern "C" {

CUSLICE_EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async<Sym::cuMemAllocAsync, false>(dptr, bytesize, hStream);
}

CUSLICE_EXPORT CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async<Sym::cuMemAllocAsync_ptsz, true>(dptr, bytesize, hStream);
}

CUSLICE_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                                       CUstream hStream) {
  return alloc_from_pool_async<Sym::cuMemAllocFromPoolAsync, false>(dptr, bytesize, pool, hStream);
}

CUSLICE_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                                            CUstream hStream) {
  return alloc_from_pool_async<Sym::cuMemAllocFromPoolAsync_ptsz, true>(dptr, bytesize, pool, hStream);
}

CUSLICE_EXPORT CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  auto fn = real<Sym::cuMemPoolCreate>();
  if (fn == nullptr) return unavailable_result();
  const CUresult r = fn(pool, poolProps);
  if (r == CUDA_SUCCESS && quota::active() && poolProps != nullptr &&
      poolProps->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
    pool_accounting::register_pool(*pool, poolProps->location.id);
  return r;
}

CUSLICE_EXPORT CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  auto fn = real<Sym::cuMemPoolDestroy>();
  if (fn == nullptr) return unavailable_result();
  const int dev = quota::active() ? pool_accounting::pool_device(pool) : -1;
  const CUresult r = [&] {
    const quota::Operation op(dev);
    return fn(pool);
  }();
  if (r == CUDA_SUCCESS && dev >= 0) {
    // A reading while the pool is still registered would read a destroyed pool: unregister,
    // then let the next reading see the reserve gone.
    pool_accounting::unregister_pool(pool);
    quota::refresh(dev);
  }
  return r;
}

CUSLICE_EXPORT CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                      const CUgraphNode* dependencies, size_t numDependencies,
                                                      CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  auto fn = real<Sym::cuGraphAddMemAllocNode>();
  if (fn == nullptr) return unavailable_result();
  if (!quota::active() || nodeParams == nullptr ||
      nodeParams->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return fn(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
  const int dev = nodeParams->poolProps.location.id;
  if (!pool_accounting::begin_graph_node(dev, nodeParams->bytesize)) return CUDA_ERROR_OUT_OF_MEMORY;
  return fn(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

CUSLICE_EXPORT CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  return graph_upload<Sym::cuGraphUpload, false>(hGraphExec, hStream);
}

CUSLICE_EXPORT CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return graph_upload<Sym::cuGraphUpload_ptsz, true>(hGraphExec, hStream);
}

}  // extern "C"
