// Memory the driver takes without an allocation call (here: FAKE_CUDA_MODULE_BYTES=200MiB
// at the first kernel launch, like lazily loaded kernel code) is measured and charged
// before the quota is reached. CUSLICE_MEMORY_LIMIT=2GiB.
#include <cuda.h>

#include <vector>

#include "tests/hook/hook_test_support.h"

using namespace hook_test;

namespace {

class ModuleMemory : public CudaTest {};

TEST_F(ModuleMemory, UnseenGrowthIsChargedBeforeTheQuota) {
  CUmodule mod;
  const char image[] = "fake module";
  ASSERT_EQ(cuModuleLoadData(&mod, image), CUDA_SUCCESS);
  CUfunction f;
  ASSERT_EQ(cuModuleGetFunction(&f, mod, "kernel"), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  std::vector<CUdeviceptr> blocks;
  CUresult r;
  for (;;) {
    CUdeviceptr p;
    r = cuMemAlloc(&p, 64 * kMiB);
    if (r != CUDA_SUCCESS) break;
    ASSERT_LE(truth(), 2 * kGiB) << "after " << blocks.size() + 1 << " blocks";
    blocks.push_back(p);
  }
  EXPECT_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
  for (CUdeviceptr p : blocks) ASSERT_EQ(cuMemFree(p), CUDA_SUCCESS);
}

}  // namespace
