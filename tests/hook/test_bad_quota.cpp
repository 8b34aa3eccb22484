// A quota that cannot be read fails closed: CUDA initialisation returns an error and one
// line on stderr says why; it never silently means unlimited.
#include <cuda.h>

#include <string>

#include "tests/hook/hook_test_support.h"

namespace {

TEST(BadQuota, InitialisationFailsWithOneLineOnStderr) {
  testing::internal::CaptureStderr();
  const CUresult first = cuInit(0);
  const CUresult second = cuInit(0);
  CUdeviceptr p;
  const CUresult alloc = cuMemAlloc(&p, 1);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(first, CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(second, CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_NE(alloc, CUDA_SUCCESS);
  EXPECT_NE(err.find("CUSLICE_MEMORY_LIMIT='4 furlongs'"), std::string::npos) << err;
  EXPECT_NE(err.find("unknown unit"), std::string::npos) << err;
  size_t lines = 0;
  for (char c : err) lines += c == '\n';
  EXPECT_EQ(lines, 1u) << err;
}

}  // namespace
