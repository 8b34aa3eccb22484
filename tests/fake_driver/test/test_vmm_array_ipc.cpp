// Virtual memory management, CUDA arrays, and IPC.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>

#include "tests/fake_driver/test/fake_driver_test.h"

namespace {

CUmemAllocationProp DeviceProp(int dev = 0) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, dev};
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

class Vmm : public FakeDriverTest {
 protected:
  void SetUp() override {
    FakeDriverTest::SetUp();
    UsePrimary();
  }
  // Reserves a range and maps handle at its start.
  CUdeviceptr MapNew(CUmemGenericAllocationHandle handle, size_t size) {
    CUdeviceptr va = 0;
    EXPECT_EQ(cuMemAddressReserve(&va, size, 0, 0, 0), CUDA_SUCCESS);
    EXPECT_EQ(cuMemMap(va, size, 0, handle, 0), CUDA_SUCCESS);
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    EXPECT_EQ(cuMemSetAccess(va, size, &access, 1), CUDA_SUCCESS);
    return va;
  }
};

TEST_F(Vmm, CreateChargesWholeGranulesOnTheDevice) {
  const CUmemAllocationProp prop = DeviceProp();
  size_t granularity = 0;
  ASSERT_EQ(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_SUCCESS);
  EXPECT_EQ(granularity, kChunk);
  CUmemGenericAllocationHandle handle = 0;
  EXPECT_EQ(cuMemCreate(&handle, kMiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemCreate(&handle, 3 * kChunk, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_VMM), 3 * kChunk);
  ASSERT_EQ(cuMemRelease(handle), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_VMM), 0u);
  EXPECT_EQ(cuMemRelease(handle), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Vmm, HostLocatedMemoryCostsTheDeviceNothing) {
  CUmemAllocationProp prop = DeviceProp();
  prop.location = {CU_MEM_LOCATION_TYPE_HOST, 0};
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_EQ(cuMemCreate(&handle, kChunk, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(Used(), kContextBytes);
  EXPECT_EQ(cuMemRelease(handle), CUDA_SUCCESS);
}

TEST_F(Vmm, MemoryLivesUntilReleasedAndUnmapped) {
  const CUmemAllocationProp prop = DeviceProp();
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_EQ(cuMemCreate(&handle, kChunk, &prop, 0), CUDA_SUCCESS);
  const CUdeviceptr va = MapNew(handle, kChunk);
  ASSERT_EQ(cuMemRelease(handle), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_VMM), kChunk);  // still mapped
  EXPECT_EQ(cuMemsetD8_v2(va, 0, kChunk), CUDA_SUCCESS);
  ASSERT_EQ(cuMemUnmap(va, kChunk), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_VMM), 0u);
  EXPECT_EQ(cuMemAddressFree(va, kChunk), CUDA_SUCCESS);
}

TEST_F(Vmm, RetainedHandleNeedsOneMoreRelease) {
  const CUmemAllocationProp prop = DeviceProp();
  CUmemGenericAllocationHandle handle = 0, retained = 0;
  ASSERT_EQ(cuMemCreate(&handle, kChunk, &prop, 0), CUDA_SUCCESS);
  const CUdeviceptr va = MapNew(handle, kChunk);
  ASSERT_EQ(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va + 100)),
            CUDA_SUCCESS);
  EXPECT_EQ(retained, handle);
  ASSERT_EQ(cuMemUnmap(va, kChunk), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(handle), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_VMM), kChunk);
  ASSERT_EQ(cuMemRelease(retained), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_VMM), 0u);
}

TEST_F(Vmm, MappingMustLieInAReservationAndNotOverlap) {
  const CUmemAllocationProp prop = DeviceProp();
  CUmemGenericAllocationHandle handle = 0;
  cuMemCreate(&handle, 2 * kChunk, &prop, 0);
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, 2 * kChunk, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va + kChunk, 2 * kChunk, 0, handle, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemMap(va, kChunk, 0, handle, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va, kChunk, 0, handle, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(va + kChunk, kChunk, 0, handle, 0), CUDA_SUCCESS);  // same memory twice
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_VMM), 2 * kChunk);
}

TEST_F(Vmm, ImportedHandleSharesThePhysicalMemory) {
  const CUmemAllocationProp prop = DeviceProp();
  CUmemGenericAllocationHandle handle = 0, imported = 0;
  ASSERT_EQ(cuMemCreate(&handle, 2 * kChunk, &prop, 0), CUDA_SUCCESS);
  int fd = -1;
  ASSERT_EQ(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  ASSERT_EQ(cuMemImportFromShareableHandle(&imported,
                                           reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_SUCCESS);
  EXPECT_NE(imported, handle);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_VMM), 2 * kChunk);
  cuMemRelease(handle);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_VMM), 2 * kChunk);
  cuMemRelease(imported);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_VMM), 0u);
}

TEST_F(Vmm, ExportNeedsTheHandleTypeRequestedAtCreation) {
  CUmemAllocationProp prop = DeviceProp();
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  CUmemGenericAllocationHandle handle = 0;
  cuMemCreate(&handle, kChunk, &prop, 0);
  int fd = -1;
  EXPECT_EQ(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);
}

class Arrays : public FakeDriverTest {
 protected:
  void SetUp() override {
    FakeDriverTest::SetUp();
    UsePrimary();
  }
};

TEST_F(Arrays, SizeIsPaddedRowsTimesHeightRoundedTo2MiB) {
  // 1000 float4 = 16000 B a row, padded to 16384; 1000 rows = 16384000 B -> 16 MiB.
  CUDA_ARRAY_DESCRIPTOR desc = {1000, 1000, CU_AD_FORMAT_FLOAT, 4};
  CUarray array = nullptr;
  ASSERT_EQ(cuArrayCreate_v2(&array, &desc), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_ARRAY), 16 * kMiB);
  CUDA_ARRAY_MEMORY_REQUIREMENTS requirements = {};
  ASSERT_EQ(cuArrayGetMemoryRequirements(&requirements, array, 0), CUDA_SUCCESS);
  EXPECT_EQ(requirements.size, 16 * kMiB);
  ASSERT_EQ(cuArrayDestroy(array), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_ARRAY), 0u);
  EXPECT_EQ(cuArrayDestroy(array), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(Arrays, ThreeDimensionsMultiplyAndSparseArraysHoldNothing) {
  // 256 x 256 x 64 of uint8: 256 B rows padded to 512: 512 * 256 * 64 = 8 MiB.
  CUDA_ARRAY3D_DESCRIPTOR desc = {256, 256, 64, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
  CUarray array = nullptr;
  ASSERT_EQ(cuArray3DCreate_v2(&array, &desc), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_ARRAY), 8 * kMiB);
  desc.Flags = CUDA_ARRAY3D_SPARSE;
  CUarray sparse = nullptr;
  ASSERT_EQ(cuArray3DCreate_v2(&sparse, &desc), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_ARRAY), 8 * kMiB);
  CUDA_ARRAY_MEMORY_REQUIREMENTS requirements = {};
  cuArrayGetMemoryRequirements(&requirements, sparse, 0);
  EXPECT_EQ(requirements.size, 8 * kMiB);
}

TEST_F(Arrays, MipmapsSumTheirLevels) {
  // 2048 x 2048 float: level 0 = 8192 * 2048 = 16 MiB, level 1 = 4 MiB, level 2 = 1 MiB; 21 MiB
  // rounds up to 22 MiB.
  CUDA_ARRAY3D_DESCRIPTOR desc = {2048, 2048, 0, CU_AD_FORMAT_FLOAT, 1, 0};
  CUmipmappedArray mipmap = nullptr;
  ASSERT_EQ(cuMipmappedArrayCreate(&mipmap, &desc, 3), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_ARRAY), 22 * kMiB);
  CUDA_ARRAY_MEMORY_REQUIREMENTS requirements = {};
  ASSERT_EQ(cuMipmappedArrayGetMemoryRequirements(&requirements, mipmap, 0), CUDA_SUCCESS);
  EXPECT_EQ(requirements.size, 22 * kMiB);
  ASSERT_EQ(cuMipmappedArrayDestroy(mipmap), CUDA_SUCCESS);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_ARRAY), 0u);
}

TEST_F(Arrays, OutOfMemoryAndUnsupportedFormats) {
  CUDA_ARRAY3D_DESCRIPTOR huge = {65536, 65536, 2, CU_AD_FORMAT_FLOAT, 4, 0};  // 64 GiB
  CUarray array = nullptr;
  EXPECT_EQ(cuArray3DCreate_v2(&array, &huge), CUDA_ERROR_OUT_OF_MEMORY);
  CUDA_ARRAY_DESCRIPTOR video = {64, 64, CU_AD_FORMAT_NV12, 1};
  EXPECT_EQ(cuArrayCreate_v2(&array, &video), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_ARRAY), 0u);
}

class Ipc : public FakeDriverTest {
 protected:
  void SetUp() override {
    FakeDriverTest::SetUp();
    UsePrimary();
  }
};

TEST_F(Ipc, OpeningCostsTheImporterNothing) {
  CUdeviceptr ptr = 0, opened = 0, base = 0;
  ASSERT_EQ(cuMemAlloc_v2(&ptr, 3 * kMiB), CUDA_SUCCESS);
  CUipcMemHandle handle;
  ASSERT_EQ(cuIpcGetMemHandle(&handle, ptr), CUDA_SUCCESS);
  ASSERT_EQ(cuIpcOpenMemHandle_v2(&opened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
            CUDA_SUCCESS);
  EXPECT_NE(opened, ptr);
  EXPECT_EQ(Used(), kContextBytes + 4 * kMiB);
  size_t size = 0;
  ASSERT_EQ(cuMemGetAddressRange_v2(&base, &size, opened + 1), CUDA_SUCCESS);
  EXPECT_EQ(size, 3 * kMiB);
  EXPECT_EQ(cuMemFree_v2(opened), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuIpcCloseMemHandle(opened), CUDA_SUCCESS);
  EXPECT_EQ(cuIpcCloseMemHandle(opened), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Ipc, AnotherProcessOpensTheHandleForFree) {
  CUdeviceptr ptr = 0;
  ASSERT_EQ(cuMemAlloc_v2(&ptr, 64 * kMiB), CUDA_SUCCESS);
  CUipcMemHandle handle;
  ASSERT_EQ(cuIpcGetMemHandle(&handle, ptr), CUDA_SUCCESS);
  const pid_t child = fork();
  ASSERT_NE(child, -1);
  if (child == 0) {  // a fresh process state, as after exec
    fake_cuda_reset();
    CUcontext ctx = nullptr;
    CUdeviceptr opened = 0;
    bool ok = cuInit(0) == CUDA_SUCCESS && cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS &&
              cuCtxSetCurrent(ctx) == CUDA_SUCCESS &&
              cuIpcOpenMemHandle_v2(&opened, handle, 0) == CUDA_SUCCESS &&
              fake_cuda_device_used(0) == kContextBytes;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_F(Ipc, OnlyCuMemAllocMemoryHasHandles) {
  CUipcMemHandle handle;
  EXPECT_EQ(cuIpcGetMemHandle(&handle, 0x1234), CUDA_ERROR_INVALID_VALUE);
  CUipcMemHandle forged = {};
  CUdeviceptr opened = 0;
  EXPECT_EQ(cuIpcOpenMemHandle_v2(&opened, forged, 0), CUDA_ERROR_INVALID_VALUE);
}

}  // namespace
