// Memory quota, one allocation path at a time. Runs with CUSLICE_MEMORY_LIMIT=2GiB on a
// 16 GiB fake device whose contexts hold 512 MiB (see CMakeLists.txt).
#include <cuda.h>
#include <unistd.h>

#include <vector>

#include "hook/base/nvml_api.h"
#include "tests/hook/hook_test_support.h"

using namespace hook_test;

namespace {

constexpr uint64_t kQuota = 2 * kGiB;
constexpr uint64_t kContext = 512 * kMiB;   // FAKE_CUDA_CONTEXT_BYTES
constexpr uint64_t kHeadroom = 128 * kMiB;  // CUSLICE_CONTEXT_HEADROOM default

class Quota : public CudaTest {
 protected:
  void TearDown() override {
    // Every test gives back what it took: the next one starts from the context alone.
    EXPECT_EQ(truth(), kContext);
    EXPECT_EQ(reported_free(), kQuota - kContext - kHeadroom);
  }
};

// Allocates `step`-byte blocks with `alloc` until it fails; returns the blocks and the error.
template <typename Alloc>
std::vector<CUdeviceptr> fill(uint64_t step, Alloc alloc, CUresult* last) {
  std::vector<CUdeviceptr> blocks;
  for (int i = 0; i < 10000; ++i) {
    CUdeviceptr p = 0;
    *last = alloc(&p, step);
    if (*last != CUDA_SUCCESS) break;
    EXPECT_LE(truth(), kQuota) << "after " << blocks.size() + 1 << " blocks";
    blocks.push_back(p);
  }
  return blocks;
}

TEST_F(Quota, ViewsShowTheQuota) {
  size_t free = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, kQuota);
  // The context is measured (through NVML) and a headroom kept beside it.
  EXPECT_EQ(free, kQuota - kContext - kHeadroom);
  size_t device_total = 0;
  ASSERT_EQ(cuDeviceTotalMem(&device_total, 0), CUDA_SUCCESS);
  EXPECT_EQ(device_total, kQuota);

  // NVML as nvidia-smi reaches it: dlopen + dlsym on its own handle.
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  ASSERT_NE(nvml, nullptr);
  auto init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(nvml, "nvmlInit_v2"));
  auto by_index = reinterpret_cast<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(
      dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
  auto info = reinterpret_cast<PFN_nvmlDeviceGetMemoryInfo>(dlsym(nvml, "nvmlDeviceGetMemoryInfo"));
  auto info2 = reinterpret_cast<PFN_nvmlDeviceGetMemoryInfo_v2>(dlsym(nvml, "nvmlDeviceGetMemoryInfo_v2"));
  ASSERT_TRUE(init && by_index && info && info2);
  EXPECT_TRUE(in_hook(reinterpret_cast<void*>(info)));
  ASSERT_EQ(init(), NVML_SUCCESS);
  nvmlDevice_t dev;
  ASSERT_EQ(by_index(0, &dev), NVML_SUCCESS);
  nvmlMemory_t m{};
  ASSERT_EQ(info(dev, &m), NVML_SUCCESS);
  EXPECT_EQ(m.total, kQuota);
  EXPECT_EQ(m.used + m.free, m.total);
  EXPECT_EQ(m.used, kContext + kHeadroom);
  // Other processes on the GPU (the fake lists FAKE_NVML_OTHER_PIDS) are not shown to a
  // process under a quota: only itself.
  auto procs = reinterpret_cast<PFN_nvmlDeviceGetComputeRunningProcesses_v3>(
      dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses_v3"));
  ASSERT_NE(procs, nullptr);
  nvmlProcessInfo_t list[16];
  unsigned int n = 16;
  ASSERT_EQ(procs(dev, &n, list), NVML_SUCCESS);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(list[0].pid, static_cast<unsigned int>(getpid()));
  nvmlMemory_v2_t m2{};
  m2.version = nvmlMemory_v2;
  ASSERT_EQ(info2(dev, &m2), NVML_SUCCESS);
  EXPECT_EQ(m2.total, kQuota);
  EXPECT_EQ(m2.reserved + m2.used + m2.free, m2.total);
}

TEST_F(Quota, SyncAllocationsStopAtTheQuotaAndRecover) {
  CUresult last;
  auto blocks = fill(64 * kMiB, [](CUdeviceptr* p, uint64_t n) { return cuMemAlloc(p, n); }, &last);
  EXPECT_EQ(last, CUDA_ERROR_OUT_OF_MEMORY);
  // The whole quota is usable: the refusal comes within one block of it.
  EXPECT_GE(truth() + 64 * kMiB + kHeadroom, kQuota);
  EXPECT_LE(truth(), kQuota);
  // Nothing else changed: free one block, and the same request succeeds.
  ASSERT_EQ(cuMemFree(blocks.back()), CUDA_SUCCESS);
  blocks.pop_back();
  CUdeviceptr p;
  ASSERT_EQ(cuMemAlloc(&p, 64 * kMiB), CUDA_SUCCESS);
  blocks.push_back(p);
  for (CUdeviceptr b : blocks) ASSERT_EQ(cuMemFree(b), CUDA_SUCCESS);
}

TEST_F(Quota, OneByteOverIsRefused) {
  const uint64_t room = reported_free();
  CUdeviceptr p, q;
  ASSERT_EQ(cuMemAlloc(&p, room), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc(&q, 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(reported_free(), 0u);
  ASSERT_EQ(cuMemFree(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAlloc(&p, room + 1), CUDA_ERROR_OUT_OF_MEMORY);
}

TEST_F(Quota, SmallAllocationsShareTheirPages) {
  // 2000 x 4 KiB: 8 MB, which the driver packs into few 2 MiB pages. Charged a page each,
  // they would need 4000 MiB and be refused.
  std::vector<CUdeviceptr> blocks;
  for (int i = 0; i < 2000; ++i) {
    CUdeviceptr p;
    ASSERT_EQ(cuMemAlloc(&p, 4096), CUDA_SUCCESS) << i;
    blocks.push_back(p);
  }
  EXPECT_LE(truth(), kQuota);
  const uint64_t charged = kQuota - kContext - kHeadroom - reported_free();
  EXPECT_EQ(charged, 2000 * 4096 / (2 * kMiB) * 2 * kMiB + 2 * kMiB);
  for (CUdeviceptr b : blocks) ASSERT_EQ(cuMemFree(b), CUDA_SUCCESS);
}

TEST_F(Quota, PitchAndManagedAllocations) {
  CUdeviceptr p;
  size_t pitch = 0;
  ASSERT_EQ(cuMemAllocPitch(&p, &pitch, 1000, 1000, 4), CUDA_SUCCESS);
  EXPECT_GE(pitch, 1000u);
  CUresult last;
  auto blocks = fill(100 * kMiB, [](CUdeviceptr* d, uint64_t n) {
    size_t pt;
    return cuMemAllocPitch(d, &pt, 10 * kMiB, n / (10 * kMiB), 4);
  }, &last);
  EXPECT_EQ(last, CUDA_ERROR_OUT_OF_MEMORY);
  for (CUdeviceptr b : blocks) ASSERT_EQ(cuMemFree(b), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree(p), CUDA_SUCCESS);

  // Managed memory may become fully resident: charged in full.
  ASSERT_EQ(cuMemAllocManaged(&p, kGiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  CUdeviceptr q;
  EXPECT_EQ(cuMemAllocManaged(&q, kGiB, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemFree(p), CUDA_SUCCESS);
}

TEST_F(Quota, VirtualMemoryCountsPhysicalHandlesUntilTheLastRelease) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle big, other;
  ASSERT_EQ(cuMemCreate(&big, kGiB, &prop, 0), CUDA_SUCCESS);
  EXPECT_LE(truth(), kQuota);
  EXPECT_EQ(cuMemCreate(&other, 512 * kMiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);

  // A retained handle keeps the memory alive after the creator's release.
  CUdeviceptr va;
  ASSERT_EQ(cuMemAddressReserve(&va, kGiB, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va, kGiB, 0, big, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle retained;
  ASSERT_EQ(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va)), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(big), CUDA_SUCCESS);
  EXPECT_EQ(cuMemCreate(&other, 512 * kMiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemUnmap(va, kGiB), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(retained), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressFree(va, kGiB), CUDA_SUCCESS);
  ASSERT_EQ(cuMemCreate(&other, 512 * kMiB, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(other), CUDA_SUCCESS);

  // Host-located VMM memory is not device memory.
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  const uint64_t before = reported_free();
  if (cuMemCreate(&other, 2 * kGiB, &prop, 0) == CUDA_SUCCESS) {
    EXPECT_EQ(reported_free(), before);
    cuMemRelease(other);
  }
}

TEST_F(Quota, ArraysAndMipmappedArrays) {
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = 4096;
  d.Height = 4096;
  d.Depth = 4;
  d.Format = CU_AD_FORMAT_FLOAT;
  d.NumChannels = 1;  // 256 MiB
  std::vector<CUarray> arrays;
  CUresult r;
  CUarray a;
  while ((r = cuArray3DCreate(&a, &d)) == CUDA_SUCCESS) {
    EXPECT_LE(truth(), kQuota);
    arrays.push_back(a);
  }
  EXPECT_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(arrays.size(), (kQuota - kContext - kHeadroom) / (256 * kMiB));
  for (CUarray x : arrays) ASSERT_EQ(cuArrayDestroy(x), CUDA_SUCCESS);

  CUDA_ARRAY_DESCRIPTOR d2{};
  d2.Width = 8192;
  d2.Height = 8192;
  d2.Format = CU_AD_FORMAT_FLOAT;
  d2.NumChannels = 4;  // 1 GiB
  ASSERT_EQ(cuArrayCreate(&a, &d2), CUDA_SUCCESS);
  CUarray b;
  EXPECT_EQ(cuArrayCreate(&b, &d2), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuArrayDestroy(a), CUDA_SUCCESS);

  CUmipmappedArray m;
  d.Depth = 0;
  d.NumChannels = 4;  // 256 MiB base level
  ASSERT_EQ(cuMipmappedArrayCreate(&m, &d, 8), CUDA_SUCCESS);
  EXPECT_LE(truth(), kQuota);
  ASSERT_EQ(cuMipmappedArrayDestroy(m), CUDA_SUCCESS);
}

TEST_F(Quota, ContextsAreCharged) {
  CUdevice dev;
  cuDeviceGet(&dev, 0);
  CUcontext extra;
  CUcontext primary;
  cuCtxGetCurrent(&primary);
  ASSERT_EQ(cuCtxCreate(&extra, nullptr, 0, dev), CUDA_SUCCESS);
  // The second context's 512 MiB is charged (measured, as the first one's).
  EXPECT_EQ(reported_free(), kQuota - 2 * kContext - kHeadroom);
  ASSERT_EQ(cuCtxDestroy(extra), CUDA_SUCCESS);
  cuCtxSetCurrent(primary);
  EXPECT_EQ(reported_free(), kQuota - kContext - kHeadroom);

  // No room for a context: creating one is refused like an allocation.
  const uint64_t room = reported_free();
  CUdeviceptr p;
  ASSERT_EQ(cuMemAlloc(&p, room - 256 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxCreate(&extra, nullptr, 0, dev), CUDA_ERROR_OUT_OF_MEMORY);
  cuCtxSetCurrent(primary);
  EXPECT_LE(truth(), kQuota);
  ASSERT_EQ(cuMemFree(p), CUDA_SUCCESS);
}

TEST_F(Quota, IpcImportsBelongToTheExporter) {
  CUdeviceptr p;
  ASSERT_EQ(cuMemAlloc(&p, 512 * kMiB), CUDA_SUCCESS);
  CUipcMemHandle h;
  ASSERT_EQ(cuIpcGetMemHandle(&h, p), CUDA_SUCCESS);
  const uint64_t before = reported_free();
  CUdeviceptr imported;
  if (cuIpcOpenMemHandle(&imported, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS) {
    EXPECT_EQ(reported_free(), before);
    ASSERT_EQ(cuIpcCloseMemHandle(imported), CUDA_SUCCESS);
  }
  ASSERT_EQ(cuMemFree(p), CUDA_SUCCESS);
}

}  // namespace
