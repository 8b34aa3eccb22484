// Runs with LD_PRELOAD=preloaded_interposer (see CMakeLists.txt): whatever an interposer defines,
// cuGetProcAddress returns the driver's own functions, which the hook maps back to exact names.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

namespace {

TEST(PreloadedInterposer, ProcAddressStillHandsOutTheDriversOwnFunction) {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(library, nullptr);
  void* driver = dlsym(library, "cuMemAlloc_v2");
  void* interposer = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
  ASSERT_NE(driver, interposer) << "the interposer is not preloaded";
  void* pfn = nullptr;
  ASSERT_EQ(cuGetProcAddress_v2("cuMemAlloc", &pfn, 3020, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                                nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(pfn, driver);
  dlclose(library);
}

}  // namespace
