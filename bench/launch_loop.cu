// Null-kernel launches one after another on a created stream, with a synchronize every 20,000:
// the launch rate alone, in a process short enough that many can be run in turn (bench/run.sh
// --launch-loop). Prints the mean host time per launch in bench/summarize.py's format.
//
//   launch_loop            # LAUNCHES launches (set at build time, -DLAUNCHES=N; 100,000)
#include <chrono>
#include <cstdio>

#ifndef LAUNCHES
#define LAUNCHES 100000
#endif

__global__ void null_kernel() {}

int main() {
  if (cudaFree(nullptr) != cudaSuccess) {
    std::fprintf(stderr, "launch_loop: no CUDA device\n");
    return 1;
  }
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return 1;
  null_kernel<<<1, 1, 0, s>>>();  // the module loaded, the stream's first work placed
  if (cudaStreamSynchronize(s) != cudaSuccess) return 1;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < LAUNCHES; ++i) {
    null_kernel<<<1, 1, 0, s>>>();
    if (i % 20000 == 19999) cudaStreamSynchronize(s);
  }
  if (cudaStreamSynchronize(s) != cudaSuccess || cudaGetLastError() != cudaSuccess) return 1;
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / LAUNCHES;
  std::printf("BENCH launch_loop %.1f %.1f %.1f ns/op\n", ns, ns, ns);
  return 0;
}
