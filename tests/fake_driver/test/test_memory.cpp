// cuMemAlloc family, memory views, host memory, copies, lazy module loading.
#include "tests/fake_driver/test/fake_driver_test.h"

namespace {

class Memory : public FakeDriverTest {
 protected:
  void SetUp() override {
    FakeDriverTest::SetUp();
    UsePrimary();
  }
};

TEST_F(Memory, AllocationsTakeWhole2MiBChunksUntilFreed) {
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&b, kChunk + 1), CUDA_SUCCESS);
  EXPECT_NE(a, 0u);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_ALLOCATION), 3 * kChunk);
  EXPECT_EQ(Used(), kContextBytes + 3 * kChunk);
  ASSERT_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_ALLOCATION), kChunk);
  EXPECT_EQ(cuMemFree_v2(b), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree_v2(a + 16), CUDA_ERROR_INVALID_VALUE);  // not a base address
  EXPECT_EQ(cuMemAlloc_v2(&a, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Memory, MemGetInfoSeesEverythingTheDeviceHolds) {
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 16 * kGiB);
  EXPECT_EQ(free_bytes, total - kContextBytes);
  CUdeviceptr ptr = 0;
  cuMemAlloc_v2(&ptr, 100 * kMiB);
  cuMemGetInfo_v2(&free_bytes, &total);
  EXPECT_EQ(free_bytes, total - kContextBytes - 100 * kMiB);
}

TEST_F(Memory, OverTheDeviceSizeIsOutOfMemoryAndChargesNothing) {
  CUdeviceptr ptr = 0;
  const size_t left = 16 * kGiB - kContextBytes;
  EXPECT_EQ(cuMemAlloc_v2(&ptr, left + 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(Used(), kContextBytes);
  ASSERT_EQ(cuMemAlloc_v2(&ptr, left), CUDA_SUCCESS);
  CUdeviceptr more = 0;
  EXPECT_EQ(cuMemAlloc_v2(&more, 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(Used(), 16 * kGiB);
}

TEST_F(Memory, PitchIsWidthRoundedTo512) {
  CUdeviceptr ptr = 0;
  size_t pitch = 0;
  ASSERT_EQ(cuMemAllocPitch_v2(&ptr, &pitch, 1000, 4096, 4), CUDA_SUCCESS);
  EXPECT_EQ(pitch, 1024u);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_ALLOCATION), 2 * kChunk);  // 4 MiB exactly
  EXPECT_EQ(cuMemAllocPitch_v2(&ptr, &pitch, 1000, 10, 3), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Memory, ManagedMemoryIsChargedToTheCurrentDevice) {
  CUdeviceptr ptr = 0;
  ASSERT_EQ(cuMemAllocManaged(&ptr, 5 * kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_ALLOCATION), 6 * kMiB);
  ASSERT_EQ(cuMemFree_v2(ptr), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_ALLOCATION), 0u);
}

TEST_F(Memory, AddressRangeFindsTheAllocationOfAnInteriorPointer) {
  CUdeviceptr ptr = 0, base = 0;
  size_t size = 0;
  cuMemAlloc_v2(&ptr, 3000);
  ASSERT_EQ(cuMemGetAddressRange_v2(&base, &size, ptr + 100), CUDA_SUCCESS);
  EXPECT_EQ(base, ptr);
  EXPECT_EQ(size, 3000u);
  EXPECT_EQ(cuMemGetAddressRange_v2(&base, &size, ptr + 3000), CUDA_ERROR_NOT_FOUND);
}

TEST_F(Memory, HostMemoryCostsTheDeviceNothing) {
  void* host = nullptr;
  ASSERT_EQ(cuMemAllocHost_v2(&host, 64 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(Used(), kContextBytes);
  EXPECT_EQ(cuMemFreeHost(host), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(host), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Memory, CopiesAndSetsValidateTheirDeviceRange) {
  CUdeviceptr ptr = 0;
  cuMemAlloc_v2(&ptr, 4096);
  char host[4096] = {};
  EXPECT_EQ(cuMemcpyHtoD_v2(ptr, host, sizeof(host)), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyDtoH_v2(host, ptr + 96, 4000), CUDA_SUCCESS);
  EXPECT_EQ(cuMemsetD8_v2(ptr, 0, 4096), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyHtoD_v2(ptr + 1, host, sizeof(host)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD8_v2(ptr + kChunk * 4, 0, 1), CUDA_ERROR_INVALID_VALUE);
}

TEST(LazyModuleLoading, FirstLaunchOfTheProcessAddsModuleBytesToItsContext) {
  ScopedKnobs knobs{{"FAKE_CUDA_MODULE_BYTES", "67108864"}};  // 64 MiB
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuCtxCreate_v2(&ctx, 0, 0), CUDA_SUCCESS);
  CUmodule module = nullptr;
  CUfunction kernel = nullptr;
  const char image[] = "fake cubin";
  ASSERT_EQ(cuModuleLoadData(&module, image), CUDA_SUCCESS);
  ASSERT_EQ(cuModuleGetFunction(&kernel, module, "kernel"), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_device_used(0), kContextBytes);
  ASSERT_EQ(cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_device_used_by(0, FAKE_CUDA_CHARGE_MODULE), 64 * kMiB);
  ASSERT_EQ(cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_device_used(0), kContextBytes + 64 * kMiB);
  ASSERT_EQ(cuCtxDestroy_v2(ctx), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_device_used(0), 0u);
}

}  // namespace
