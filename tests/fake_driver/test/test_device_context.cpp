// cuInit, device queries, knobs, contexts and what they cost.
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "tests/fake_driver/test/fake_driver_test.h"

namespace {

TEST(Init, EverythingButVersionAndLookupNeedsCuInit) {
  fake_cuda_reset();
  int count = 0;
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  CUcontext ctx = nullptr;
  EXPECT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_ERROR_NOT_INITIALIZED);
  int version = 0;
  EXPECT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, 13000);
  EXPECT_EQ(cuInit(1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 1);
}

TEST_F(FakeDriverTest, DeviceQueriesDescribeAnH100) {
  CUdevice dev = -1;
  ASSERT_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
  int value = -1;
  EXPECT_EQ(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
  EXPECT_EQ(value, 132);
  cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0);
  EXPECT_EQ(value, 9);
  cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0);
  EXPECT_EQ(value, 0);
  cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0);
  EXPECT_EQ(value, 1);
  size_t total = 0;
  ASSERT_EQ(cuDeviceTotalMem_v2(&total, 0), CUDA_SUCCESS);
  EXPECT_EQ(total, 16 * kGiB);
  EXPECT_EQ(fake_cuda_device_total(0), 16 * kGiB);
  char name[128];
  ASSERT_EQ(cuDeviceGetName(name, sizeof(name), 0), CUDA_SUCCESS);
  EXPECT_NE(std::string(name).find("H100"), std::string::npos);
  char bus[32];
  ASSERT_EQ(cuDeviceGetPCIBusId(bus, sizeof(bus), 0), CUDA_SUCCESS);
  EXPECT_STREQ(bus, "0000:19:00.0");
}

TEST(Knobs, DeviceCountAndMemoryComeFromTheEnvironment) {
  ScopedKnobs knobs{{"FAKE_CUDA_DEVICE_COUNT", "3"}, {"FAKE_CUDA_DEVICE_MEMORY", "1073741824"}};
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  int count = 0;
  cuDeviceGetCount(&count);
  EXPECT_EQ(count, 3);
  std::set<std::string> uuids;
  for (int dev = 0; dev < count; ++dev) {
    size_t total = 0;
    cuDeviceTotalMem_v2(&total, dev);
    EXPECT_EQ(total, kGiB);
    CUuuid uuid, again, legacy;
    ASSERT_EQ(cuDeviceGetUuid_v2(&uuid, dev), CUDA_SUCCESS);
    cuDeviceGetUuid_v2(&again, dev);
    cuDeviceGetUuid(&legacy, dev);
    EXPECT_EQ(std::memcmp(uuid.bytes, again.bytes, 16), 0);
    EXPECT_EQ(std::memcmp(uuid.bytes, legacy.bytes, 16), 0);
    uuids.insert(std::string(uuid.bytes, 16));
  }
  EXPECT_EQ(uuids.size(), 3u);
}

TEST(Knobs, MalformedValuesKeepTheDefaults) {
  ScopedKnobs knobs{{"FAKE_CUDA_DEVICE_COUNT", "99"}, {"FAKE_CUDA_DEVICE_MEMORY", "12G"}};
  EXPECT_EQ(fake_cuda_device_count(), 1);
  EXPECT_EQ(fake_cuda_device_total(0), 16 * kGiB);
}

TEST_F(FakeDriverTest, PrimaryContextCostsContextBytesWhileRetained) {
  EXPECT_EQ(Used(), 0u);
  CUcontext first = nullptr, second = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&first, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&second, 0), CUDA_SUCCESS);
  EXPECT_EQ(first, second);
  EXPECT_EQ(Used(), kContextBytes);
  EXPECT_EQ(UsedBy(FAKE_CUDA_CHARGE_CONTEXT), kContextBytes);
  unsigned int flags = 0;
  int active = 0;
  cuDevicePrimaryCtxGetState(0, &flags, &active);
  EXPECT_EQ(active, 1);
  ASSERT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(Used(), kContextBytes);
  ASSERT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 0u);
  cuDevicePrimaryCtxGetState(0, &flags, &active);
  EXPECT_EQ(active, 0);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxSetCurrent(first), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(FakeDriverTest, PrimaryContextResetFreesItsMemoryUntilNextUse) {
  UsePrimary();
  CUdeviceptr ptr = 0;
  ASSERT_EQ(cuMemAlloc_v2(&ptr, kMiB), CUDA_SUCCESS);
  EXPECT_EQ(Used(), kContextBytes + kChunk);
  ASSERT_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(cuMemFree_v2(ptr), CUDA_ERROR_INVALID_VALUE);  // freed by the reset
  ASSERT_EQ(cuMemAlloc_v2(&ptr, kMiB), CUDA_SUCCESS);      // the current context comes back
  EXPECT_EQ(Used(), kContextBytes + kChunk);
  ASSERT_EQ(cuDevicePrimaryCtxSetFlags_v2(0, CU_CTX_SCHED_BLOCKING_SYNC), CUDA_SUCCESS);
  unsigned int flags = 0;
  int active = 0;
  cuDevicePrimaryCtxGetState(0, &flags, &active);
  EXPECT_EQ(flags, unsigned{CU_CTX_SCHED_BLOCKING_SYNC});
}

TEST_F(FakeDriverTest, EachCreatedContextCostsContextBytesAndTakesItsMemoryAlong) {
  CUcontext v2 = nullptr, v3 = nullptr, v4 = nullptr;
  ASSERT_EQ(cuCtxCreate_v2(&v2, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxCreate_v3(&v3, nullptr, 0, 0, 0), CUDA_SUCCESS);
  CUctxCreateParams params = {};
  ASSERT_EQ(cuCtxCreate_v4(&v4, &params, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 3 * kContextBytes);
  CUcontext current = nullptr;
  cuCtxGetCurrent(&current);
  EXPECT_EQ(current, v4);  // creation pushes
  CUdeviceptr ptr = 0;
  ASSERT_EQ(cuMemAlloc_v2(&ptr, 3 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 3 * kContextBytes + 2 * kChunk);
  ASSERT_EQ(cuCtxDestroy_v2(v4), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 2 * kContextBytes);
  cuCtxGetCurrent(&current);
  EXPECT_EQ(current, v3);  // destroying the current context pops it
  EXPECT_EQ(cuCtxDestroy_v2(v4), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxPushCurrent_v2(v4), CUDA_ERROR_INVALID_CONTEXT);
  cuCtxDestroy_v2(v3);
  cuCtxDestroy_v2(v2);
  EXPECT_EQ(Used(), 0u);
}

TEST(Contexts, FailWithOutOfMemoryWhenTheDeviceLacksContextBytes) {
  ScopedKnobs knobs{{"FAKE_CUDA_DEVICE_MEMORY", "268435456"}};  // 256 MiB < 512 MiB
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  EXPECT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuCtxCreate_v2(&ctx, 0, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(fake_cuda_device_used(0), 0u);
  unsigned int flags = 0;
  int active = 1;
  cuDevicePrimaryCtxGetState(0, &flags, &active);
  EXPECT_EQ(active, 0);
}

TEST(Contexts, ContextBytesComeFromTheEnvironment) {
  ScopedKnobs knobs{{"FAKE_CUDA_CONTEXT_BYTES", "1048576"}};
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_device_used(0), kMiB);
}

TEST_F(FakeDriverTest, CallsNeedingAContextFailWithoutOne) {
  CUdeviceptr ptr = 0;
  size_t free_bytes = 0, total = 0;
  CUdevice dev = -1;
  EXPECT_EQ(cuMemAlloc_v2(&ptr, kMiB), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuMemGetInfo_v2(&free_bytes, &total), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
  CUstream stream = nullptr;
  EXPECT_EQ(cuStreamCreate(&stream, 0), CUDA_ERROR_INVALID_CONTEXT);
}

TEST(Contexts, StackPushPopSetAndGetDevice) {
  ScopedKnobs knobs{{"FAKE_CUDA_DEVICE_COUNT", "2"}};
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext zero = nullptr, one = nullptr, popped = nullptr, current = nullptr;
  cuDevicePrimaryCtxRetain(&zero, 0);
  cuDevicePrimaryCtxRetain(&one, 1);
  ASSERT_EQ(cuCtxPushCurrent_v2(zero), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxPushCurrent_v2(one), CUDA_SUCCESS);
  CUdevice dev = -1;
  cuCtxGetDevice(&dev);
  EXPECT_EQ(dev, 1);
  ASSERT_EQ(cuCtxGetDevice_v2(&dev, zero), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  ASSERT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, one);
  cuCtxGetCurrent(&current);
  EXPECT_EQ(current, zero);
  ASSERT_EQ(cuCtxSetCurrent(one), CUDA_SUCCESS);  // replaces the top
  ASSERT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, one);
  EXPECT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cuCtxSetCurrent(zero), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);  // pops
  cuCtxGetCurrent(&current);
  EXPECT_EQ(current, nullptr);
  EXPECT_EQ(cuCtxSynchronize_v2(one), CUDA_SUCCESS);  // explicit context, none current
}

TEST_F(FakeDriverTest, CurrentContextIsPerThread) {
  UsePrimary();
  CUcontext other_thread = reinterpret_cast<CUcontext>(0x1);
  std::thread([&] { cuCtxGetCurrent(&other_thread); }).join();
  EXPECT_EQ(other_thread, nullptr);
}

}  // namespace
