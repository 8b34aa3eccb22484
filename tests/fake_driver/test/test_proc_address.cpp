// cuGetProcAddress[_v2] routes base name + version + flags to the exact exported symbol.
#include <dlfcn.h>

#include <ostream>

#include "tests/fake_driver/test/fake_driver_test.h"

namespace {

constexpr cuuint64_t kDefault = CU_GET_PROC_ADDRESS_DEFAULT;
constexpr cuuint64_t kLegacy = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

struct Route {
  const char* symbol;
  int version;
  cuuint64_t flags;
  const char* exact;  // null: no pointer expected
  CUdriverProcAddressQueryResult status;
};

std::ostream& operator<<(std::ostream& out, const Route& route) {
  return out << route.symbol << "@" << route.version << "/flags=" << route.flags;
}

class ProcAddressRouting : public ::testing::TestWithParam<Route> {
 protected:
  void SetUp() override { fake_cuda_reset(); }
};

TEST_P(ProcAddressRouting, ResolvesToTheExactExportedSymbol) {
  const Route& route = GetParam();
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(library, nullptr);
  void* pfn = reinterpret_cast<void*>(0x1);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  ASSERT_EQ(cuGetProcAddress_v2(route.symbol, &pfn, route.version, route.flags, &status),
            CUDA_SUCCESS);
  EXPECT_EQ(status, route.status);
  if (route.exact == nullptr) {
    EXPECT_EQ(pfn, nullptr);
  } else {
    void* expected = dlsym(library, route.exact);
    ASSERT_NE(expected, nullptr) << route.exact;
    EXPECT_EQ(pfn, expected) << "expected " << route.exact;
  }
  // The 4-argument ABI routes the same way.
  void* legacy_pfn = reinterpret_cast<void*>(0x1);
  ASSERT_EQ(cuGetProcAddress(route.symbol, &legacy_pfn, route.version, route.flags), CUDA_SUCCESS);
  EXPECT_EQ(legacy_pfn, pfn);
  dlclose(library);
}

constexpr CUdriverProcAddressQueryResult kFound = CU_GET_PROC_ADDRESS_SUCCESS;
constexpr CUdriverProcAddressQueryResult kNotFound = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
constexpr CUdriverProcAddressQueryResult kTooOld = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;

INSTANTIATE_TEST_SUITE_P(
    Driver13, ProcAddressRouting,
    ::testing::Values(
        // Legacy 32-bit ABI below 3020, _v2 from 3020, whatever the flag.
        Route{"cuMemAlloc", 2000, kLegacy, "cuMemAlloc", kFound},
        Route{"cuMemAlloc", 3020, kLegacy, "cuMemAlloc_v2", kFound},
        Route{"cuMemAlloc", 13000, kDefault, "cuMemAlloc_v2", kFound},
        Route{"cuMemAlloc", 13000, kPerThread, "cuMemAlloc_v2", kFound},  // no twin: legacy
        Route{"cuMemGetInfo", 3020, kLegacy, "cuMemGetInfo_v2", kFound},
        Route{"cuDeviceTotalMem", 2000, kLegacy, "cuDeviceTotalMem", kFound},
        // Four ABIs of cuCtxCreate.
        Route{"cuCtxCreate", 3020, kLegacy, "cuCtxCreate_v2", kFound},
        Route{"cuCtxCreate", 11040, kLegacy, "cuCtxCreate_v3", kFound},
        Route{"cuCtxCreate", 12040, kLegacy, "cuCtxCreate_v3", kFound},
        Route{"cuCtxCreate", 12050, kLegacy, "cuCtxCreate_v4", kFound},
        Route{"cuDevicePrimaryCtxRelease", 10020, kLegacy, "cuDevicePrimaryCtxRelease", kFound},
        Route{"cuDevicePrimaryCtxRelease", 11000, kLegacy, "cuDevicePrimaryCtxRelease_v2", kFound},
        Route{"cuIpcOpenMemHandle", 11000, kLegacy, "cuIpcOpenMemHandle_v2", kFound},
        Route{"cuCtxSynchronize", 12090, kLegacy, "cuCtxSynchronize", kFound},
        Route{"cuCtxSynchronize", 13000, kLegacy, "cuCtxSynchronize_v2", kFound},
        // Per-thread twins: only with the per-thread flag, and only from their own version.
        Route{"cuLaunchKernel", 4000, kLegacy, "cuLaunchKernel", kFound},
        Route{"cuLaunchKernel", 4000, kPerThread, "cuLaunchKernel", kFound},
        Route{"cuLaunchKernel", 7000, kPerThread, "cuLaunchKernel_ptsz", kFound},
        Route{"cuLaunchKernel", 13000, kDefault, "cuLaunchKernel", kFound},
        Route{"cuLaunchKernelEx", 11060, kPerThread, "cuLaunchKernelEx_ptsz", kFound},
        Route{"cuMemAllocAsync", 11020, kPerThread, "cuMemAllocAsync_ptsz", kFound},
        Route{"cuMemcpyHtoD", 13000, kPerThread, "cuMemcpyHtoD_v2_ptds", kFound},
        Route{"cuStreamBeginCapture", 10000, kPerThread, "cuStreamBeginCapture_ptsz", kFound},
        Route{"cuStreamBeginCapture", 10010, kPerThread, "cuStreamBeginCapture_v2_ptsz", kFound},
        Route{"cuStreamBeginCapture", 10010, kLegacy, "cuStreamBeginCapture_v2", kFound},
        // The runtime's self-query.
        Route{"cuGetProcAddress", 11030, kLegacy, "cuGetProcAddress", kFound},
        Route{"cuGetProcAddress", 12000, kLegacy, "cuGetProcAddress_v2", kFound},
        Route{"cuProfilerStart", 4000, kLegacy, "cuProfilerStart", kFound},
        // Known names asked below their first version, and names the driver lacks.
        Route{"cuLaunchKernelEx", 11050, kLegacy, nullptr, kTooOld},
        Route{"cuMemAllocAsync", 11010, kPerThread, nullptr, kTooOld},
        Route{"cuCtxGetDevice", 1000, kLegacy, nullptr, kTooOld},
        Route{"cuNoSuchEntryPoint", 13000, kLegacy, nullptr, kNotFound},
        Route{"cuMemAllo", 13000, kLegacy, nullptr, kNotFound}));

TEST(ProcAddress, VersionAboveTheDriversIsInvalid) {
  void* pfn = reinterpret_cast<void*>(0x1);
  CUdriverProcAddressQueryResult status;
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAlloc", &pfn, 13010, kLegacy, &status),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(pfn, nullptr);
  EXPECT_EQ(cuGetProcAddress("cuMemAlloc", &pfn, 14000, kLegacy), CUDA_ERROR_INVALID_VALUE);
}

TEST(ProcAddress, NullArgumentsAreInvalid) {
  void* pfn = nullptr;
  EXPECT_EQ(cuGetProcAddress_v2(nullptr, &pfn, 13000, kLegacy, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress_v2("cuInit", nullptr, 13000, kLegacy, nullptr),
            CUDA_ERROR_INVALID_VALUE);
}

TEST(ProcAddress, AnswersBeforeCuInitAndCountsCalls) {
  fake_cuda_reset();  // cuInit forgotten
  void* pfn = nullptr;
  EXPECT_EQ(cuGetProcAddress_v2("cuInit", &pfn, 2000, kLegacy, nullptr), CUDA_SUCCESS);
  EXPECT_NE(pfn, nullptr);
  EXPECT_EQ(cuGetProcAddress("cuNoSuchEntryPoint", &pfn, 2000, kLegacy), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_proc_address_calls(), 2);
}

TEST(ProcAddress, ResolvedPointerIsCallable) {
  fake_cuda_reset();
  void* pfn = nullptr;
  ASSERT_EQ(cuGetProcAddress_v2("cuDriverGetVersion", &pfn, 2020, kLegacy, nullptr), CUDA_SUCCESS);
  int version = 0;
  EXPECT_EQ(reinterpret_cast<CUresult (*)(int*)>(pfn)(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, 13000);
}

}  // namespace
