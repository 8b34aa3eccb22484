// The fake NVML reads the fake driver's truth, with NVML's conventions.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "hook/base/nvml_api.h"
#include "tests/fake_driver/test/fake_driver_test.h"

namespace {

class Nvml : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_cuda_reset();
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &device_), NVML_SUCCESS);
  }
  void TearDown() override {
    nvmlShutdown();
    fake_cuda_reset();
  }
  nvmlDevice_t device_ = nullptr;
};

TEST_F(Nvml, WorksWithoutCuInitAndSeesNothingHeld) {
  unsigned int count = 0;
  ASSERT_EQ(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
  EXPECT_EQ(count, 1u);
  nvmlMemory_t memory = {};
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(device_, &memory), NVML_SUCCESS);
  EXPECT_EQ(memory.total, 16 * kGiB);
  EXPECT_EQ(memory.used, 0u);
  EXPECT_EQ(memory.free, 16 * kGiB);
  unsigned int processes = 0;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(device_, &processes, nullptr), NVML_SUCCESS);
  EXPECT_EQ(processes, 0u);
}

TEST_F(Nvml, MemoryInfoIsWhatTheProcessHolds) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  cuDevicePrimaryCtxRetain(&ctx, 0);
  cuCtxSetCurrent(ctx);
  CUdeviceptr ptr = 0;
  ASSERT_EQ(cuMemAlloc_v2(&ptr, 100 * kMiB), CUDA_SUCCESS);
  nvmlMemory_t memory = {};
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(device_, &memory), NVML_SUCCESS);
  EXPECT_EQ(memory.used, kContextBytes + 100 * kMiB);
  EXPECT_EQ(memory.used, fake_cuda_device_used(0));
  EXPECT_EQ(memory.free, memory.total - memory.used);
  nvmlMemory_v2_t memory2 = {};
  memory2.version = nvmlMemory_v2;
  ASSERT_EQ(nvmlDeviceGetMemoryInfo_v2(device_, &memory2), NVML_SUCCESS);
  EXPECT_EQ(memory2.total, memory.total);
  EXPECT_EQ(memory2.used, memory.used);
  EXPECT_EQ(memory2.free, memory.free);
  EXPECT_EQ(memory2.reserved, 0u);
  memory2.version = sizeof(nvmlMemory_v2_t) | (1u << 24);
  EXPECT_EQ(nvmlDeviceGetMemoryInfo_v2(device_, &memory2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
}

TEST_F(Nvml, ProcessListFollowsNvmlSizeSemantics) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  cuDevicePrimaryCtxRetain(&ctx, 0);
  unsigned int count = 0;
  EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(device_, &count, nullptr),
            NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 1u);
  nvmlProcessInfo_t infos[4] = {};
  count = 4;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(device_, &count, infos), NVML_SUCCESS);
  EXPECT_EQ(count, 1u);
  EXPECT_EQ(infos[0].pid, static_cast<unsigned int>(getpid()));
  EXPECT_EQ(infos[0].usedGpuMemory, kContextBytes);
}

TEST_F(Nvml, UuidNameAndDriverVersion) {
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
  ASSERT_EQ(nvmlDeviceGetUUID(device_, uuid, sizeof(uuid)), NVML_SUCCESS);
  EXPECT_EQ(std::strlen(uuid), 40u);
  EXPECT_EQ(std::string(uuid).rfind("GPU-facec0da-", 0), 0u) << uuid;
  EXPECT_EQ(nvmlDeviceGetUUID(device_, uuid, 10), NVML_ERROR_INSUFFICIENT_SIZE);
  nvmlDevice_t by_uuid = nullptr;
  ASSERT_EQ(nvmlDeviceGetHandleByUUID(uuid, &by_uuid), NVML_SUCCESS);
  EXPECT_EQ(by_uuid, device_);
  EXPECT_EQ(nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &by_uuid),
            NVML_ERROR_NOT_FOUND);
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  ASSERT_EQ(nvmlDeviceGetName(device_, name, sizeof(name)), NVML_SUCCESS);
  char cuda_name[128];
  fake_cuda_device_name(0, cuda_name, sizeof(cuda_name));
  EXPECT_STREQ(name, cuda_name);
  char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
  ASSERT_EQ(nvmlSystemGetDriverVersion(version, sizeof(version)), NVML_SUCCESS);
  EXPECT_STREQ(nvmlErrorString(NVML_ERROR_NOT_FOUND), "Not Found");
}

TEST_F(Nvml, HandlesAreCheckedAgainstTheDeviceCount) {
  nvmlDevice_t device = nullptr;
  EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(1, &device), NVML_ERROR_INVALID_ARGUMENT);
  nvmlMemory_t memory;
  EXPECT_EQ(nvmlDeviceGetMemoryInfo(nullptr, &memory), NVML_ERROR_INVALID_ARGUMENT);
}

TEST(NvmlInit, CallsBeforeInitOrAfterTheLastShutdownAreUninitialized) {
  unsigned int count = 0;
  EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
  ASSERT_EQ(nvmlInit(), NVML_SUCCESS);
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  ASSERT_EQ(nvmlShutdown(), NVML_SUCCESS);
  EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);  // still one init outstanding
  ASSERT_EQ(nvmlShutdown(), NVML_SUCCESS);
  EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
}

TEST(NvmlInit, FailsWithTheErrorATestGives) {
  ScopedKnobs knobs{{"FAKE_NVML_INIT_ERROR", "9"}};
  EXPECT_EQ(nvmlInit_v2(), NVML_ERROR_DRIVER_NOT_LOADED);
  EXPECT_STREQ(nvmlErrorString(NVML_ERROR_DRIVER_NOT_LOADED), "Driver Not Loaded");
  unsigned int count = 0;
  EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
  setenv("FAKE_NVML_INIT_ERROR", "123456", 1);  // no such error: NVML's catch-all
  EXPECT_EQ(nvmlInit(), NVML_ERROR_UNKNOWN);
}

TEST(NvmlDevices, EachDeviceReportsItsOwnUsage) {
  ScopedKnobs knobs{{"FAKE_CUDA_DEVICE_COUNT", "2"}};
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  cuDevicePrimaryCtxRetain(&ctx, 1);
  nvmlDevice_t zero = nullptr, one = nullptr;
  nvmlDeviceGetHandleByIndex_v2(0, &zero);
  nvmlDeviceGetHandleByIndex_v2(1, &one);
  nvmlMemory_t memory = {};
  nvmlDeviceGetMemoryInfo(zero, &memory);
  EXPECT_EQ(memory.used, 0u);
  nvmlDeviceGetMemoryInfo(one, &memory);
  EXPECT_EQ(memory.used, kContextBytes);
  char uuid0[64], uuid1[64];
  nvmlDeviceGetUUID(zero, uuid0, sizeof(uuid0));
  nvmlDeviceGetUUID(one, uuid1, sizeof(uuid1));
  EXPECT_STRNE(uuid0, uuid1);
  nvmlShutdown();
}

// With FAKE_NVML_DEVICE_PROCESSES=1, every process holding memory on a shared device is
// listed with what it holds, as the real NVML lists a GPU's processes; without it, this one.
TEST(NvmlDeviceProcesses, EveryProcessSharingTheDeviceIsListedWhenAsked) {
  const std::string name = "fake-nvml-test-" + std::to_string(getpid());
  shm_unlink(("/" + name).c_str());
  int held[2], done[2];
  ASSERT_EQ(pipe(held), 0);
  ASSERT_EQ(pipe(done), 0);
  ScopedKnobs knobs{{"FAKE_CUDA_SHARED_DEVICE", name.c_str()}};
  const pid_t child = fork();
  if (child == 0) {
    fake_cuda_reset();
    CUcontext ctx = nullptr;
    CUdeviceptr p = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuMemAlloc_v2(&p, size_t{1} << 30) != CUDA_SUCCESS)
      _exit(1);
    char byte = 'h';
    if (write(held[1], &byte, 1) != 1) _exit(2);
    _exit(read(done[0], &byte, 1) == 1 ? 0 : 3);
  }
  char byte = 0;
  ASSERT_EQ(read(held[0], &byte, 1), 1);
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  nvmlDevice_t device = nullptr;
  ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &device), NVML_SUCCESS);
  nvmlProcessInfo_t infos[4] = {};
  unsigned int count = 4;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(device, &count, infos), NVML_SUCCESS);
  ASSERT_EQ(count, 1u) << "without the knob: this process only";
  EXPECT_EQ(infos[0].pid, static_cast<unsigned int>(getpid()));

  int pids[4] = {};
  size_t bytes[4] = {};
  ASSERT_EQ(fake_cuda_device_processes(0, pids, bytes, 4), 2);
  setenv("FAKE_NVML_DEVICE_PROCESSES", "1", 1);
  count = 4;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(device, &count, infos), NVML_SUCCESS);
  unsetenv("FAKE_NVML_DEVICE_PROCESSES");
  ASSERT_EQ(count, 2u);
  for (unsigned int i = 0; i < count; ++i) {
    EXPECT_EQ(infos[i].pid, static_cast<unsigned int>(pids[i]));
    EXPECT_EQ(infos[i].usedGpuMemory, bytes[i]);
    if (infos[i].pid == static_cast<unsigned int>(child))
      EXPECT_EQ(infos[i].usedGpuMemory, kContextBytes + (size_t{1} << 30));
    else
      EXPECT_EQ(infos[i].usedGpuMemory, kContextBytes);
  }
  nvmlShutdown();
  ASSERT_EQ(write(done[1], "d", 1), 1);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(fake_cuda_device_processes(0, pids, bytes, 4), 1) << "an exited process is not listed";
  shm_unlink(("/" + name).c_str());
}

}  // namespace
