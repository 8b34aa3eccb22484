// fork() without exec: the child owns none of the parent's device memory, and the hook
// must not count the parent's allocations against it.
#include <cuda.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/hook/hook_test_support.h"

using namespace hook_test;

namespace {

class Fork : public CudaTest {};

TEST_F(Fork, ChildStartsWithAnEmptyLedger) {
  CUdeviceptr p;
  ASSERT_EQ(cuMemAlloc(&p, kGiB), CUDA_SUCCESS);  // 2 GiB quota: 1 GiB + context left no room
  CUdeviceptr q;
  ASSERT_EQ(cuMemAlloc(&q, kGiB), CUDA_ERROR_OUT_OF_MEMORY);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The fake driver's state was copied with the process, as a test stand-in for a child
    // that initialises CUDA afresh. The hook's ledger must be empty here.
    CUdeviceptr c;
    const CUresult r = cuMemAlloc(&c, kGiB);
    _exit(r == CUDA_SUCCESS ? 0 : 10 + static_cast<int>(r));
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child was charged for the parent's memory";
  // The parent's ledger is untouched by the child.
  EXPECT_EQ(cuMemAlloc(&q, kGiB), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuMemFree(p), CUDA_SUCCESS);
}

}  // namespace
