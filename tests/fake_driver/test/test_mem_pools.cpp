// Stream-ordered pools: reserve growth in 2 MiB chunks, release at synchronisation, limits.
#include "tests/fake_driver/test/fake_driver_test.h"

namespace {

cuuint64_t PoolAttribute(CUmemoryPool pool, CUmemPool_attribute attribute) {
  cuuint64_t value = ~cuuint64_t{0};
  EXPECT_EQ(cuMemPoolGetAttribute(pool, attribute, &value), CUDA_SUCCESS);
  return value;
}

class MemPools : public FakeDriverTest {
 protected:
  void SetUp() override {
    FakeDriverTest::SetUp();
    UsePrimary();
    ASSERT_EQ(cuDeviceGetDefaultMemPool(&pool_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  CUmemoryPool pool_ = nullptr;
  CUstream stream_ = nullptr;
};

TEST_F(MemPools, DefaultPoolIsTheCurrentPoolUnderEveryName) {
  CUmemoryPool current = nullptr, by_location = nullptr, current_by_location = nullptr;
  ASSERT_EQ(cuDeviceGetMemPool(&current, 0), CUDA_SUCCESS);
  EXPECT_EQ(current, pool_);
  CUmemLocation location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  ASSERT_EQ(cuMemGetDefaultMemPool(&by_location, &location, CU_MEM_ALLOCATION_TYPE_PINNED),
            CUDA_SUCCESS);
  ASSERT_EQ(cuMemGetMemPool(&current_by_location, &location, CU_MEM_ALLOCATION_TYPE_PINNED),
            CUDA_SUCCESS);
  EXPECT_EQ(by_location, pool_);
  EXPECT_EQ(current_by_location, pool_);
}

TEST_F(MemPools, ReserveGrowsByChunksAndFreedBlocksStayReservedUntilSync) {
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAllocAsync(&a, kMiB, stream_), CUDA_SUCCESS);
  EXPECT_EQ(PoolAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), kChunk);
  EXPECT_EQ(PoolAttribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), kMiB);
  ASSERT_EQ(cuMemAllocAsync_ptsz(&b, kMiB, stream_), CUDA_SUCCESS);  // fits in the chunk
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_POOL_RESERVE), kChunk);
  ASSERT_EQ(cuMemFreeAsync(a, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync_ptsz(b, stream_), CUDA_SUCCESS);
  EXPECT_EQ(PoolAttribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0u);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_POOL_RESERVE), kChunk);  // kept until synchronisation
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_POOL_RESERVE), 0u);
  EXPECT_EQ(PoolAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), kChunk);
  EXPECT_EQ(PoolAttribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 2 * kMiB);
  EXPECT_EQ(cuMemFreeAsync(a, stream_), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(MemPools, ReleaseThresholdKeepsReserveAcrossSync) {
  cuuint64_t threshold = 8 * kMiB;
  ASSERT_EQ(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
            CUDA_SUCCESS);
  CUdeviceptr ptr = 0;
  ASSERT_EQ(cuMemAllocAsync(&ptr, 20 * kMiB, stream_), CUDA_SUCCESS);
  cuMemFreeAsync(ptr, stream_);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_POOL_RESERVE), 8 * kMiB);
  ASSERT_EQ(cuMemPoolTrimTo(pool_, 3 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_POOL_RESERVE), 4 * kMiB);
  ASSERT_EQ(cuMemPoolTrimTo(pool_, 0), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_POOL_RESERVE), 0u);
}

TEST_F(MemPools, EventSynchronizeAlsoReleases) {
  CUevent event = nullptr;
  ASSERT_EQ(cuEventCreate(&event, 0), CUDA_SUCCESS);
  CUdeviceptr ptr = 0;
  cuMemAllocAsync(&ptr, kMiB, stream_);
  cuMemFreeAsync(ptr, stream_);
  cuEventRecord(event, stream_);
  ASSERT_EQ(cuEventSynchronize(event), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_POOL_RESERVE), 0u);
}

TEST_F(MemPools, TrimNeverReleasesBlocksInUse) {
  CUdeviceptr ptr = 0;
  cuMemAllocAsync(&ptr, 3 * kMiB, stream_);
  ASSERT_EQ(cuMemPoolTrimTo(pool_, 0), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_POOL_RESERVE), 4 * kMiB);
  cuStreamSynchronize(stream_);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_POOL_RESERVE), 4 * kMiB);
}

TEST_F(MemPools, CreatedPoolHonoursMaxSizeAndDiesWithItsReserve) {
  CUmemPoolProps props = {};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  props.maxSize = 4 * kMiB;
  CUmemoryPool pool = nullptr;
  ASSERT_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAllocFromPoolAsync(&a, 3 * kMiB, pool, stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAllocFromPoolAsync(&b, 2 * kMiB, pool, stream_), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemAllocFromPoolAsync_ptsz(&b, kMiB, pool, stream_), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_POOL_RESERVE), 4 * kMiB);
  ASSERT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_POOL_RESERVE), 0u);
  EXPECT_EQ(cuMemPoolDestroy(pool_), CUDA_ERROR_INVALID_VALUE);  // the default pool stays
}

TEST_F(MemPools, CurrentPoolServesCuMemAllocAsync) {
  CUmemPoolProps props = {};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemoryPool pool = nullptr;
  ASSERT_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceSetMemPool(0, pool), CUDA_SUCCESS);
  CUdeviceptr ptr = 0;
  ASSERT_EQ(cuMemAllocAsync(&ptr, kMiB, nullptr), CUDA_SUCCESS);  // stream 0: current device
  EXPECT_EQ(PoolAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), kMiB);
  EXPECT_EQ(PoolAttribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0u);
  CUmemLocation location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  ASSERT_EQ(cuMemSetMemPool(&location, CU_MEM_ALLOCATION_TYPE_PINNED, pool_), CUDA_SUCCESS);
  CUmemoryPool current = nullptr;
  cuDeviceGetMemPool(&current, 0);
  EXPECT_EQ(current, pool_);
}

TEST_F(MemPools, MemFreeReturnsAPoolAllocationToItsPool) {
  CUdeviceptr ptr = 0;
  cuMemAllocAsync(&ptr, kMiB, stream_);
  ASSERT_EQ(cuMemFree_v2(ptr), CUDA_SUCCESS);
  EXPECT_EQ(PoolAttribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0u);
  EXPECT_EQ(PoolAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), kChunk);
}

TEST_F(MemPools, PoolGrowthBeyondTheDeviceIsOutOfMemory) {
  CUdeviceptr ptr = 0;
  EXPECT_EQ(cuMemAllocAsync(&ptr, 16 * kGiB - kContextBytes + 1, stream_), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(PoolAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 0u);
  EXPECT_EQ(Used(), kContextBytes);
}

TEST_F(MemPools, HighWatermarksResetToCurrent) {
  CUdeviceptr ptr = 0;
  cuMemAllocAsync(&ptr, 5 * kMiB, stream_);
  cuMemFreeAsync(ptr, stream_);
  cuStreamSynchronize(stream_);
  cuuint64_t zero = 0;
  ASSERT_EQ(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero), CUDA_SUCCESS);
  ASSERT_EQ(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero), CUDA_SUCCESS);
  EXPECT_EQ(PoolAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 0u);
  EXPECT_EQ(PoolAttribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 0u);
}

TEST(MemPoolDevices, APoolChargesItsOwnDevice) {
  ScopedKnobs knobs{{"FAKE_CUDA_DEVICE_COUNT", "2"}};
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  cuDevicePrimaryCtxRetain(&ctx, 0);
  cuCtxSetCurrent(ctx);
  CUmemoryPool pool = nullptr;
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&pool, 1), CUDA_SUCCESS);
  CUdeviceptr ptr = 0;
  ASSERT_EQ(cuMemAllocFromPoolAsync(&ptr, kMiB, pool, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_device_used_by(1, FAKE_CUDA_CHARGE_POOL_RESERVE), kChunk);
  EXPECT_EQ(fake_cuda_device_used_by(0, FAKE_CUDA_CHARGE_POOL_RESERVE), 0u);
  EXPECT_EQ(cuDeviceSetMemPool(0, pool), CUDA_ERROR_INVALID_VALUE);  // a pool of device 1
}

}  // namespace
