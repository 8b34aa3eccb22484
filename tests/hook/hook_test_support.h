// Shared by the hook's tests: they run under LD_PRELOAD=libcuslice.so against the fake
// driver (tests/fake_driver), which tells the truth about what the process holds.
#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tests/fake_driver/fake_cuda_control.h"

namespace hook_test {

inline constexpr uint64_t kMiB = 1ull << 20;
inline constexpr uint64_t kGiB = 1ull << 30;

// What the device really holds for this process, per the fake driver.
inline uint64_t truth() { return fake_cuda_device_used(0); }

// The library a function pointer lies in (its file name), "" if none.
inline std::string library_of(const void* p) {
  Dl_info info{};
  if (p == nullptr || dladdr(p, &info) == 0 || info.dli_fname == nullptr) return "";
  std::string path = info.dli_fname;
  return path.substr(path.rfind('/') + 1);
}

inline bool in_hook(const void* p) { return library_of(p).find("libcuslice") == 0; }

// Every test process: the driver initialised and device 0's primary context current, as
// the CUDA runtime leaves it.
class CudaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    CUdevice dev;
    ASSERT_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    CUcontext ctx;
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  }
  void SetUp() override {
    CUcontext ctx;
    CUdevice dev;
    cuDeviceGet(&dev, 0);
    cuDevicePrimaryCtxRetain(&ctx, dev);
    cuCtxSetCurrent(ctx);
    cuDevicePrimaryCtxRelease(dev);
  }
  // What cuMemGetInfo reports as free (under a quota: quota minus what is charged).
  static uint64_t reported_free() {
    size_t free = 0, total = 0;
    EXPECT_EQ(cuMemGetInfo(&free, &total), CUDA_SUCCESS);
    return free;
  }
};

}  // namespace hook_test
