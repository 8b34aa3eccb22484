// A CUDA application in miniature, for the tests of what the hook does with a process the
// scheduler has no room for (test_hook_admission.py). Run under libcuslice.so over the fake
// driver, it calls cuInit, then, whatever cuInit answered (an application that ignores the
// error), takes the primary context and allocates BYTES with cuMemAlloc. It prints one line,
//
//   init RC alloc RC
//
// (each call's CUresult; alloc's is that of the first call that failed on the way to it), and
// then waits for stdin to close, still holding the memory, so that the test can look at it.
//
//   cuda_app BYTES
//
// Exit status: 0 when both succeeded, 3 when cuInit failed, 4 when only the allocation did, 2
// on bad arguments.
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cuda_app BYTES\n");
    return 2;
  }
  const size_t bytes = std::strtoull(argv[1], nullptr, 10);
  const CUresult init = cuInit(0);
  CUcontext ctx = nullptr;
  CUdeviceptr p = 0;
  CUresult alloc = cuDevicePrimaryCtxRetain(&ctx, 0);
  if (alloc == CUDA_SUCCESS) alloc = cuCtxSetCurrent(ctx);
  if (alloc == CUDA_SUCCESS) alloc = cuMemAlloc_v2(&p, bytes);
  std::printf("init %d alloc %d\n", static_cast<int>(init), static_cast<int>(alloc));
  std::fflush(stdout);
  char buf[64];
  while (read(STDIN_FILENO, buf, sizeof buf) > 0) {
  }
  if (alloc == CUDA_SUCCESS) cuMemFree_v2(p);
  return init != CUDA_SUCCESS ? 3 : alloc != CUDA_SUCCESS ? 4 : 0;
}
