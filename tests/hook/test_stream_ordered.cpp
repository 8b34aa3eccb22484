// Stream-ordered pools and graph memory under CUSLICE_MEMORY_LIMIT=2GiB (fake device: 16 GiB,
// 512 MiB contexts, pools growing in 2 MiB steps).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cstdint>
#include <vector>

#include "tests/hook/hook_test_support.h"

using namespace hook_test;

namespace {

constexpr uint64_t kQuota = 2 * kGiB;
constexpr uint64_t kContext = 512 * kMiB;

class StreamOrdered : public CudaTest {
 protected:
  void TearDown() override {
    // Pools may keep reserve; trimmed, everything is back to the context.
    CUmemoryPool pool;
    ASSERT_EQ(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
    cuMemPoolTrimTo(pool, 0);
    EXPECT_EQ(truth(), kContext);
  }
};

TEST_F(StreamOrdered, AsyncAllocationsStopAtTheQuota) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  std::vector<CUdeviceptr> blocks;
  CUresult r;
  for (;;) {
    CUdeviceptr p;
    r = cuMemAllocAsync(&p, 64 * kMiB, s);
    if (r != CUDA_SUCCESS) break;
    ASSERT_LE(truth(), kQuota);
    blocks.push_back(p);
  }
  EXPECT_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
  // Pre-charges are settled to the real reserve before refusing: the quota is usable.
  EXPECT_GE(truth() + 64 * kMiB + 128 * kMiB, kQuota);
  for (CUdeviceptr p : blocks) ASSERT_EQ(cuMemFreeAsync(p, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

// Pre-charges drawn from a credit charged ahead: once settled (cuMemGetInfo settles), the
// ledger holds exactly what the pool reserves, neither the pre-charges nor the credit left.
TEST_F(StreamOrdered, SettledTheLedgerHoldsWhatThePoolReservesExactly) {
  CUmemoryPool pool;
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
  cuuint64_t keep_all = ~0ull;
  ASSERT_EQ(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all), CUDA_SUCCESS);
  const uint64_t before = reported_free();
  for (int i = 0; i < 100; ++i) {
    CUdeviceptr p;
    ASSERT_EQ(cuMemAllocAsync(&p, 2 * kMiB, nullptr), CUDA_SUCCESS) << i;
    ASSERT_EQ(cuMemFreeAsync(p, nullptr), CUDA_SUCCESS);
  }
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  cuuint64_t reserved = 0;
  ASSERT_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_SUCCESS);
  ASSERT_GT(reserved, 0u);
  EXPECT_EQ(reported_free(), before - reserved);
  cuuint64_t zero = 0;
  cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero);
}

TEST_F(StreamOrdered, ReserveKeptByAPoolCountsAndIsTrimmedBeforeRefusing) {
  CUmemoryPool pool;
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
  cuuint64_t keep_all = ~0ull;  // what PyTorch's and CuPy's async allocators set
  ASSERT_EQ(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all), CUDA_SUCCESS);
  CUdeviceptr p;
  ASSERT_EQ(cuMemAllocAsync(&p, kGiB, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(p, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  cuuint64_t reserved = 0;
  ASSERT_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_SUCCESS);
  ASSERT_EQ(reserved, kGiB);  // the pool kept it
  // A synchronous 1 GiB does not fit beside that reserve: the hook trims the pool (only
  // memory no allocation uses) rather than refuse, and never exceeds the quota.
  ASSERT_EQ(cuMemAlloc(&p, kGiB), CUDA_SUCCESS);
  EXPECT_LE(truth(), kQuota);
  ASSERT_EQ(cuMemFree(p), CUDA_SUCCESS);
  cuuint64_t zero = 0;
  cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero);
}

TEST_F(StreamOrdered, AtTheLimitRequestsAreServedFromTheReservePoolsHold) {
  CUmemoryPool pool;
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_SUCCESS);
  cuuint64_t keep_all = ~0ull;
  ASSERT_EQ(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all), CUDA_SUCCESS);
  std::vector<CUdeviceptr> blocks;
  for (uint64_t size : {64 * kMiB, 2 * kMiB}) {
    CUdeviceptr p;
    while (cuMemAllocAsync(&p, size, nullptr) == CUDA_SUCCESS) blocks.push_back(p);
  }
  // Less than one pool growth step is left: a worst-case pre-charge no longer fits. Freed
  // memory stays in the pool, charged; requests it can hold must still succeed.
  ASSERT_EQ(cuMemFreeAsync(blocks.front(), nullptr), CUDA_SUCCESS);
  blocks.erase(blocks.begin());
  for (int i = 0; i < 100; ++i) {
    CUdeviceptr p;
    ASSERT_EQ(cuMemAllocAsync(&p, 1024, nullptr), CUDA_SUCCESS) << i;
    blocks.push_back(p);
  }
  EXPECT_LE(truth(), kQuota);
  // A request the reserve cannot hold is still refused.
  CUdeviceptr p;
  EXPECT_EQ(cuMemAllocAsync(&p, 256 * kMiB, nullptr), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_LE(truth(), kQuota);
  for (CUdeviceptr b : blocks) ASSERT_EQ(cuMemFreeAsync(b, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  cuuint64_t zero = 0;
  cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero);
}

TEST_F(StreamOrdered, CreatedPoolsAndPerThreadStreams) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool;
  ASSERT_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  // The per-thread-stream entry points, as code built with --default-stream per-thread
  // reaches them (cuda.h declares them only under that option).
  auto alloc_ptsz = reinterpret_cast<PFN_cuMemAllocFromPoolAsync_v11020_ptsz>(
      dlsym(RTLD_DEFAULT, "cuMemAllocFromPoolAsync_ptsz"));
  auto free_ptsz = reinterpret_cast<PFN_cuMemFreeAsync_v11020_ptsz>(dlsym(RTLD_DEFAULT, "cuMemFreeAsync_ptsz"));
  auto sync_ptsz = reinterpret_cast<PFN_cuStreamSynchronize_v7000_ptsz>(dlsym(RTLD_DEFAULT, "cuStreamSynchronize_ptsz"));
  ASSERT_TRUE(alloc_ptsz && free_ptsz && sync_ptsz);
  EXPECT_TRUE(in_hook(reinterpret_cast<void*>(alloc_ptsz)));
  std::vector<CUdeviceptr> blocks;
  CUresult r;
  for (;;) {
    CUdeviceptr p;
    r = alloc_ptsz(&p, 100 * kMiB, pool, CU_STREAM_PER_THREAD);
    if (r != CUDA_SUCCESS) break;
    ASSERT_LE(truth(), kQuota);
    blocks.push_back(p);
  }
  EXPECT_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
  for (CUdeviceptr p : blocks) ASSERT_EQ(free_ptsz(p, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  ASSERT_EQ(sync_ptsz(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  ASSERT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
  // The destroyed pool's reserve is no longer charged: 1 GiB fits again.
  CUdeviceptr p;
  ASSERT_EQ(cuMemAlloc(&p, kGiB), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree(p), CUDA_SUCCESS);
}

TEST_F(StreamOrdered, GraphMemoryNodes) {
  CUgraph g;
  ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUDA_MEM_ALLOC_NODE_PARAMS params{};
  params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  params.poolProps.location.id = 0;
  params.bytesize = kGiB;
  CUgraphNode n1, n2;
  ASSERT_EQ(cuGraphAddMemAllocNode(&n1, g, nullptr, 0, &params), CUDA_SUCCESS);
  // A second 1 GiB allocation in the graph cannot fit beside the first.
  EXPECT_EQ(cuGraphAddMemAllocNode(&n2, g, &n1, 1, &params), CUDA_ERROR_OUT_OF_MEMORY);
  CUgraphNode f;
  ASSERT_EQ(cuGraphAddMemFreeNode(&f, g, &n1, 1, params.dptr), CUDA_SUCCESS);
  CUgraphExec exec;
  ASSERT_EQ(cuGraphInstantiate(&exec, g, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_LE(truth(), kQuota);
  // The executable graph holds its 1 GiB: a synchronous 1 GiB does not fit beside it.
  CUdeviceptr p;
  EXPECT_EQ(cuMemAlloc(&p, kGiB), CUDA_ERROR_OUT_OF_MEMORY);
  // Destroyed, its memory stays reserved (until trimmed): the slow path trims graph memory
  // no graph uses before refusing, so now it fits.
  ASSERT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc(&p, kGiB), CUDA_SUCCESS);
  EXPECT_LE(truth(), kQuota);
  cuMemFree(p);
}

}  // namespace
