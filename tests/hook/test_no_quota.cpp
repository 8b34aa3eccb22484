// With no CUSLICE_MEMORY_LIMIT the hook changes nothing the application can observe.
#include <cuda.h>

#include "tests/hook/hook_test_support.h"

using namespace hook_test;

namespace {

class NoQuota : public CudaTest {};

TEST_F(NoQuota, ViewsAreTheDevicesOwn) {
  size_t free = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, fake_cuda_device_total(0));
  EXPECT_EQ(free, fake_cuda_device_total(0) - fake_cuda_device_used(0));
  size_t device_total = 0;
  ASSERT_EQ(cuDeviceTotalMem(&device_total, 0), CUDA_SUCCESS);
  EXPECT_EQ(device_total, fake_cuda_device_total(0));
}

TEST_F(NoQuota, AllocationsAreLimitedOnlyByTheDevice) {
  CUdeviceptr a, b;
  ASSERT_EQ(cuMemAlloc(&a, 8 * kGiB), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&b, 6 * kGiB), CUDA_SUCCESS);
  CUdeviceptr c;
  EXPECT_EQ(cuMemAlloc(&c, 4 * kGiB), CUDA_ERROR_OUT_OF_MEMORY);  // the 16 GiB device's own answer
  cuMemFree(a);
  cuMemFree(b);
  // The hook still sits on the door, as a pass-through.
  EXPECT_TRUE(in_hook(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2")));
}

}  // namespace
