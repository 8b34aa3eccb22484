// A plain CUDA program that resets its device between phases of work and at the end
// (cudaDeviceReset: the primary context, and every allocation in it, pinned host memory
// included, is destroyed), then exits. context_reset.sh runs it below an idle higher-priority
// tenant, where the hook holds launches back behind gates whose words are pinned host memory.
//
//   context_reset [PHASES] [LAUNCHES]      defaults 3 phases of 20000 launches
//
// Prints one line per phase and "ok" at the end; exit status 0 only if every call succeeded.
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

__global__ void tick(int* counter) { atomicAdd(counter, 1); }

#define CHECK(call)                                                                              \
  do {                                                                                           \
    const cudaError_t rc_ = (call);                                                              \
    if (rc_ != cudaSuccess) {                                                                    \
      std::printf("FAIL %s: %s\n", #call, cudaGetErrorString(rc_));                              \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

int main(int argc, char** argv) {
  const int phases = argc > 1 ? std::atoi(argv[1]) : 3;
  const int launches = argc > 2 ? std::atoi(argv[2]) : 20000;
  for (int phase = 0; phase < phases; ++phase) {
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    int* counter = nullptr;
    CHECK(cudaMalloc(&counter, sizeof(int)));
    CHECK(cudaMemsetAsync(counter, 0, sizeof(int), stream));
    for (int i = 0; i < launches; ++i) tick<<<1, 1, 0, stream>>>(counter);
    CHECK(cudaGetLastError());
    int got = 0;
    CHECK(cudaMemcpyAsync(&got, counter, sizeof(int), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    std::printf("phase %d: %d of %d kernels ran\n", phase, got, launches);
    if (got != launches) return 1;
    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaFree(counter));
    CHECK(cudaDeviceReset());  // the last one too: the program then exits with no context
  }
  std::printf("ok\n");
  return 0;
}
