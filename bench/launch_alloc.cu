// launch_alloc: what the hook adds to the calls it sits on.
//
// Built by nvcc with the default static cudart, so the runtime reaches the driver the way most
// CUDA programs do (dlopen("libcuda.so.1") + cuGetProcAddress): with the hook preloaded, every
// call below goes through the hook's real path. bench/run.sh runs it alternately with and
// without the hook and compares.
//
// Prints one line per measurement:  BENCH <name> <median ns> <min ns> <max ns> <unit>
// where median/min/max are over the repeats of that measurement in this process.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

__global__ void null_kernel() {}

#define CK(call)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

using Clock = std::chrono::steady_clock;
double ns_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

// Runs `one_repeat` (which returns ns per operation) `repeats` times after `warmup` runs and
// prints median, min and max.
template <class F>
void measure(const char* name, int warmup, int repeats, F&& one_repeat) {
  for (int i = 0; i < warmup; ++i) one_repeat();
  std::vector<double> v;
  for (int i = 0; i < repeats; ++i) v.push_back(one_repeat());
  std::sort(v.begin(), v.end());
  std::printf("BENCH %s %.1f %.1f %.1f ns/op\n", name, v[v.size() / 2], v.front(), v.back());
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CK(cudaFree(nullptr));  // context and module load stay out of the numbers
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  null_kernel<<<1, 1, 0, s>>>();
  CK(cudaStreamSynchronize(s));

  // 1. Enqueue: host time per launch over 500 launches, device drained between repeats.
  measure("launch_enqueue", 5, 60, [&] {
    auto t0 = Clock::now();
    for (int i = 0; i < 500; ++i) null_kernel<<<1, 1, 0, s>>>();
    double ns = ns_since(t0) / 500;
    CK(cudaStreamSynchronize(s));
    return ns;
  });

  // 2. Sustained: 20000 launches and the final synchronisation, per launch.
  measure("launch_sustained", 1, 7, [&] {
    auto t0 = Clock::now();
    for (int i = 0; i < 20000; ++i) null_kernel<<<1, 1, 0, s>>>();
    CK(cudaStreamSynchronize(s));
    return ns_since(t0) / 20000;
  });
  CK(cudaGetLastError());

  // 3. cudaMalloc + cudaFree of 2 MiB, per pair.
  measure("malloc_free_2MiB", 2, 15, [&] {
    auto t0 = Clock::now();
    for (int i = 0; i < 100; ++i) {
      void* p;
      CK(cudaMalloc(&p, 2 << 20));
      CK(cudaFree(p));
    }
    return ns_since(t0) / 100;
  });

  // 4. cudaMallocAsync + cudaFreeAsync of 2 MiB on one stream, per pair (pool reuse).
  measure("mallocasync_freeasync_2MiB", 2, 15, [&] {
    auto t0 = Clock::now();
    for (int i = 0; i < 5000; ++i) {
      void* p;
      CK(cudaMallocAsync(&p, 2 << 20, s));
      CK(cudaFreeAsync(p, s));
    }
    double ns = ns_since(t0) / 5000;
    CK(cudaStreamSynchronize(s));
    return ns;
  });

  // 5. cudaMemGetInfo (the hook answers it from its own accounting).
  measure("memgetinfo", 2, 15, [&] {
    auto t0 = Clock::now();
    for (int i = 0; i < 200; ++i) {
      size_t f, t;
      CK(cudaMemGetInfo(&f, &t));
    }
    return ns_since(t0) / 200;
  });

  CK(cudaStreamDestroy(s));
  return 0;
}
