// Instructions the hook adds per call on its hot paths, counted by callgrind against the fake
// driver (bench/path_cost/run.sh). Noise-free where GPU timings are not: the hook's cost
// per launch is tens of nanoseconds, below the ±20% run-to-run spread of a 4 µs launch.
//
//   path_cost launch|alloc|async N   (N calls of the path, after a warm-up)
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

#define CHECK(x)                                                           \
  do {                                                                     \
    CUresult r_ = (x);                                                     \
    if (r_ != CUDA_SUCCESS) {                                              \
      std::fprintf(stderr, "%s failed: %d\n", #x, static_cast<int>(r_)); \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: path_cost launch|alloc|async N\n");
    return 2;
  }
  const long n = std::atol(argv[2]);
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CHECK(cuModuleLoadData(&mod, "fake"));
  CUfunction f;
  CHECK(cuModuleGetFunction(&f, mod, "null_kernel"));
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  if (std::strcmp(argv[1], "launch") == 0) {
    for (long i = 0; i < n; ++i) CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr));
  } else if (std::strcmp(argv[1], "alloc") == 0) {
    for (long i = 0; i < n; ++i) {
      CUdeviceptr p;
      CHECK(cuMemAlloc(&p, 2 << 20));
      CHECK(cuMemFree(p));
    }
  } else if (std::strcmp(argv[1], "async") == 0) {
    for (long i = 0; i < n; ++i) {
      CUdeviceptr p;
      CHECK(cuMemAllocAsync(&p, 2 << 20, s));
      CHECK(cuMemFreeAsync(p, s));
    }
  } else {
    return 2;
  }
  CHECK(cuStreamSynchronize(s));
  return 0;
}
